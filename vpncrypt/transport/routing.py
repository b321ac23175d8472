"""Cryptokey routing for the reference table: AllowedIPs with longest-prefix
match over IPv4 and IPv6 (native/wg_routes.c is the native twin).

One dict per prefix length, searched from the longest length present to the
shortest, so a lookup costs one probe per prefix length in use.  Each peer
also keeps the set of its prefixes, so removing a peer touches only those.
A prefix another peer holds moves to the peer that adds it last, as in
WireGuard."""

import ipaddress
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Key = tuple[int, int, int]  # (address bits, prefix length, prefix)


def route_network(cidr: Any) -> Network:
    """'10.0.0.0/24', an ip_network, or (address, prefix length) -> ip_network
    (host bits cleared)."""
    if isinstance(cidr, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return cidr
    if isinstance(cidr, tuple):
        cidr = f"{cidr[0]}/{cidr[1]}"
    return ipaddress.ip_network(cidr, strict=False)


def _key(net: Network) -> _Key:
    bits, plen = net.max_prefixlen, net.prefixlen
    return bits, plen, int(net.network_address) >> (bits - plen) if plen else 0


class _Family:
    __slots__ = ("bits", "tables", "order")

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.tables: dict[int, dict[int, Any]] = {}  # plen -> {prefix: peer}
        self.order: tuple[tuple[int, dict[int, Any]], ...] = ()  # ((shift, table), ...), longest first

    def reorder(self) -> None:
        self.tables = {p: t for p, t in self.tables.items() if t}
        self.order = tuple((self.bits - p, self.tables[p]) for p in sorted(self.tables, reverse=True))

    def lookup(self, value: int) -> Any:
        for shift, table in self.order:
            peer = table.get(value >> shift)
            if peer is not None:
                return peer
        return None


class AllowedIPs:
    def __init__(self) -> None:
        self._fam = {32: _Family(32), 128: _Family(128)}
        self._by_peer: dict[Any, set[_Key]] = {}  # peer -> {(bits, plen, prefix)}

    def insert(self, cidr: Any, peer: Any) -> None:
        bits, plen, prefix = _key(route_network(cidr))
        fam = self._fam[bits]
        table = fam.tables.setdefault(plen, {})
        old = table.get(prefix)
        if old is not None and old != peer:
            self._by_peer[old].discard((bits, plen, prefix))
        table[prefix] = peer
        self._by_peer.setdefault(peer, set()).add((bits, plen, prefix))
        if len(table) == 1 and old is None:
            fam.reorder()

    def remove(self, cidr: Any, peer: Any) -> bool:
        """Remove a prefix if `peer` holds it."""
        bits, plen, prefix = _key(route_network(cidr))
        fam = self._fam[bits]
        table = fam.tables.get(plen)
        if table is None or table.get(prefix) != peer:
            return False
        del table[prefix]
        self._by_peer[peer].discard((bits, plen, prefix))
        if not table:
            fam.reorder()
        return True

    def remove_peer(self, peer: Any) -> None:
        touched: set[int] = set()
        for bits, plen, prefix in self._by_peer.pop(peer, ()):
            del self._fam[bits].tables[plen][prefix]
            touched.add(bits)
        for bits in touched:
            self._fam[bits].reorder()

    def entries(self, peer: Any) -> list[Network]:
        """The peer's prefixes: IPv4 first, longer prefixes first."""
        out = sorted(self._by_peer.get(peer, ()), key=lambda k: (k[0], -k[1], k[2]))
        nets: list[Network] = []
        for bits, plen, prefix in out:
            value = prefix << (bits - plen) if plen else 0
            cls = ipaddress.IPv4Network if bits == 32 else ipaddress.IPv6Network
            nets.append(cls((value, plen)))
        return nets

    def lookup(self, addr: bytes) -> Any:
        """The peer for a 4- or 16-byte address, or None."""
        if len(addr) == 4:
            return self._fam[32].lookup(int.from_bytes(addr, "big"))
        if len(addr) == 16:
            return self._fam[128].lookup(int.from_bytes(addr, "big"))
        return None
