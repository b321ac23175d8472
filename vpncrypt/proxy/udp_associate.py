"""SOCKS5 UDP ASSOCIATE (RFC 1928, 7): datagrams between a client on the host
and targets through the tunnel, for as long as the client's TCP connection.

The relay socket the client sends to is in the host's namespace (made by the
host-side helper, bound to the address the client reached the proxy on); the
datagrams leave from sockets inside the namespace, one per address family.
Each datagram from the client carries RSV(2) FRAG ATYP DST.ADDR DST.PORT DATA;
an answer goes back with the same header naming its source.  Dropped, as the
RFC allows: fragments (FRAG != 0), datagrams from anyone but the client (its
address, and its port once the first datagram fixed it, or the port it named
in the request), malformed headers, targets outside every AllowedIPs or whose
name does not resolve.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
from typing import Any

from vpncrypt.proxy.dialer import DialError, IPAddress, TunnelDialer

log = logging.getLogger("vpncrypt.proxy")

ATYP_V4, ATYP_DOMAIN, ATYP_V6 = 1, 3, 4
# Datagrams of one association waiting for a name's lookup or a socket; more
# are dropped (a client that floods names must not grow the proxy without bound).
MAX_PENDING = 256


def parse_datagram(data: bytes) -> tuple[str, int, bytes] | None:
    """(host, port, payload) of a client's datagram, None if it is to be dropped."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0:
        return None  # RSV must be 0; FRAG != 0: fragmentation is not supported
    atyp, rest = data[3], data[4:]
    if atyp == ATYP_V4 and len(rest) >= 6:
        host, rest = str(ipaddress.IPv4Address(rest[:4])), rest[4:]
    elif atyp == ATYP_V6 and len(rest) >= 18:
        host, rest = str(ipaddress.IPv6Address(rest[:16])), rest[16:]
    elif atyp == ATYP_DOMAIN and len(rest) >= 1 and rest[0] and len(rest) >= 1 + rest[0] + 2:
        try:
            host = rest[1 : 1 + rest[0]].decode("ascii")
        except UnicodeDecodeError:
            return None
        rest = rest[1 + rest[0] :]
    else:
        return None
    (port,) = struct.unpack("!H", rest[:2])
    return host, port, rest[2:]


def datagram_header(addr: IPAddress, port: int) -> bytes:
    atyp = ATYP_V4 if addr.version == 4 else ATYP_V6
    return bytes((0, 0, 0, atyp)) + addr.packed + struct.pack("!H", port)


class _Side(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Any) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for an earlier datagram: UDP drops it, so does the relay


class Association:
    """One client's relay.  start() -> (BND.ADDR, BND.PORT) for the reply."""

    def __init__(self, dialer: TunnelDialer, client: tuple[str, int]) -> None:
        self.dialer = dialer
        self.client_ip = ipaddress.ip_address(client[0].split("%", 1)[0])
        self.client_port = client[1]  # 0: fixed by the first datagram
        self.relay: asyncio.DatagramTransport | None = None
        # family -> the tunnel side's socket, being made or made (one per family,
        # however many datagrams ask for it at once)
        self.out: dict[int, asyncio.Future[asyncio.DatagramTransport]] = {}
        self.pending: set[asyncio.Task[None]] = set()

    async def start(self, relay_sock: socket.socket) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        relay_sock.setblocking(False)
        transport, _ = await loop.create_datagram_endpoint(lambda: _Side(self._from_client), sock=relay_sock)
        self.relay = transport
        host, port = relay_sock.getsockname()[:2]
        return host, port

    def _from_client(self, data: bytes, addr: Any) -> None:
        src = ipaddress.ip_address(addr[0].split("%", 1)[0])
        if src != self.client_ip or (self.client_port and addr[1] != self.client_port):
            return
        self.client_port = addr[1]
        parsed = parse_datagram(data)
        if parsed is None:
            return
        host, port, payload = parsed
        if len(self.pending) >= MAX_PENDING:
            return
        task = asyncio.ensure_future(self._send(host, port, payload))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _send(self, host: str, port: int, payload: bytes) -> None:
        try:
            addresses = await self.dialer.resolve(host)
        except DialError as e:
            log.debug("UDP ASSOCIATE %s: %s", self.client_ip, e)
            return
        target = next((a for a in addresses if self.dialer.routable(a)), None)
        if target is None or port == 0:
            return
        out = await self._out(target.version)
        out.sendto(payload, (str(target), port))

    async def _out(self, version: int) -> asyncio.DatagramTransport:
        family = socket.AF_INET if version == 4 else socket.AF_INET6
        made = self.out.get(family)
        if made is None:
            made = self.out[family] = asyncio.ensure_future(self._make_out(family))
        return await asyncio.shield(made)

    async def _make_out(self, family: int) -> asyncio.DatagramTransport:
        loop = asyncio.get_running_loop()
        local = "0.0.0.0" if family == socket.AF_INET else "::"
        out, _ = await loop.create_datagram_endpoint(
            lambda: _Side(self._from_target), local_addr=(local, 0), family=family
        )
        return out

    def _from_target(self, data: bytes, addr: Any) -> None:
        if self.relay is None or not self.client_port:
            return
        src = ipaddress.ip_address(addr[0].split("%", 1)[0])
        self.relay.sendto(datagram_header(src, addr[1]) + data, (str(self.client_ip), self.client_port))

    def close(self) -> None:
        for task in self.pending:
            task.cancel()
        for made in self.out.values():
            if made.done() and not made.cancelled() and made.exception() is None:
                made.result().close()
            else:
                made.cancel()
        if self.relay is not None:
            self.relay.close()
        self.out.clear()
        self.relay = None
