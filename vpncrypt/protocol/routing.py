"""Cryptokey routing: AllowedIPs with longest-prefix match (IPv4 and IPv6).

The table is one hash map per prefix length, searched from the longest
length present to the shortest, so a lookup costs one dict probe per
distinct prefix length in use (usually a handful).  Inserting a prefix
another peer holds moves it to the new peer, as in WireGuard.
"""
import ipaddress


def _parse(cidr):
    """'10.0.0.0/24' | ip_network | (addr, plen) -> (family bits, plen, prefix int)."""
    if isinstance(cidr, tuple):
        cidr = f"{cidr[0]}/{cidr[1]}"
    net = ipaddress.ip_network(cidr, strict=False) if not isinstance(
        cidr, (ipaddress.IPv4Network, ipaddress.IPv6Network)) else cidr
    bits = net.max_prefixlen
    plen = net.prefixlen
    return bits, plen, int(net.network_address) >> (bits - plen) if plen else 0


def _fmt(bits, plen, prefix) -> str:
    value = prefix << (bits - plen) if plen else 0
    addr = ipaddress.IPv4Address(value) if bits == 32 else ipaddress.IPv6Address(value)
    return f"{addr}/{plen}"


class _Family:
    __slots__ = ("bits", "tables", "order")

    def __init__(self, bits):
        self.bits = bits
        self.tables = {}  # plen -> {prefix: peer}
        self.order = ()   # ((shift, table), ...) longest prefix first

    def reorder(self):
        self.tables = {p: t for p, t in self.tables.items() if t}
        self.order = tuple((self.bits - p, self.tables[p]) for p in sorted(self.tables, reverse=True))

    def lookup(self, value: int):
        for shift, table in self.order:
            peer = table.get(value >> shift)
            if peer is not None:
                return peer
        return None


class AllowedIPs:
    def __init__(self):
        self._v4 = _Family(32)
        self._v6 = _Family(128)
        self.version = 0  # bumped on every change, so a mirror knows when to resync

    def items(self):
        """Every (family bits, prefix length, network as int, peer)."""
        for fam in (self._v4, self._v6):
            for plen, table in fam.tables.items():
                for prefix, peer in table.items():
                    yield fam.bits, plen, prefix, peer

    def _fam(self, bits):
        return self._v4 if bits == 32 else self._v6

    def insert(self, cidr, peer) -> None:
        bits, plen, prefix = _parse(cidr)
        fam = self._fam(bits)
        new = plen not in fam.tables
        fam.tables.setdefault(plen, {})[prefix] = peer
        self.version += 1
        if new:
            fam.reorder()

    def remove(self, cidr, peer=None) -> None:
        """Remove a prefix (only if it belongs to `peer`, when given)."""
        bits, plen, prefix = _parse(cidr)
        fam = self._fam(bits)
        table = fam.tables.get(plen)
        if table is not None and prefix in table and (peer is None or table[prefix] is peer):
            del table[prefix]
            self.version += 1
            if not table:
                fam.reorder()

    def remove_peer(self, peer) -> None:
        for fam in (self._v4, self._v6):
            for table in fam.tables.values():
                for k in [k for k, v in table.items() if v is peer]:
                    del table[k]
            fam.reorder()
        self.version += 1

    def entries(self, peer) -> list[str]:
        out = []
        for fam in (self._v4, self._v6):
            for plen, table in sorted(fam.tables.items(), reverse=True):
                out.extend(_fmt(fam.bits, plen, k) for k, v in table.items() if v is peer)
        return out

    def lookup(self, addr: bytes):
        """The peer for a 4- or 16-byte address, or None."""
        if len(addr) == 4:
            return self._v4.lookup(int.from_bytes(addr, "big"))
        if len(addr) == 16:
            return self._v6.lookup(int.from_bytes(addr, "big"))
        return None

    def lookup_v4(self, value: int):
        return self._v4.lookup(value)

    def lookup_v6(self, value: int):
        return self._v6.lookup(value)


def packet_source(pkt) -> bytes | None:
    """The inner source address of an IP packet, or None if it is not IP."""
    if len(pkt) >= 20 and pkt[0] >> 4 == 4:
        return bytes(pkt[12:16])
    if len(pkt) >= 40 and pkt[0] >> 4 == 6:
        return bytes(pkt[8:24])
    return None


def packet_destination(pkt) -> bytes | None:
    if len(pkt) >= 20 and pkt[0] >> 4 == 4:
        return bytes(pkt[16:20])
    if len(pkt) >= 40 and pkt[0] >> 4 == 6:
        return bytes(pkt[24:40])
    return None
