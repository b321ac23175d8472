"""Outgoing connections of the proxy, and the splice that joins two streams.

TunnelDialer connects inside the namespace (so through the tunnel): a name is
resolved with the config's DNS servers (A and AAAA, asked through the tunnel
with dnspython), an address outside every peer's AllowedIPs is refused before
any packet (host unreachable).  Failures are DialError with the SOCKS5 reply
code that says them (RFC 1928, 6), which the HTTP front maps to its statuses.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
from collections.abc import Callable, Sequence

import dns.asyncresolver
import dns.exception
import dns.resolver

log = logging.getLogger("vpncrypt.proxy")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 1928, 6: the reply codes
GENERAL_FAILURE = 0x01
NOT_ALLOWED = 0x02
NETWORK_UNREACHABLE = 0x03
HOST_UNREACHABLE = 0x04
CONNECTION_REFUSED = 0x05
TTL_EXPIRED = 0x06
COMMAND_NOT_SUPPORTED = 0x07
ADDRESS_TYPE_NOT_SUPPORTED = 0x08

CONNECT_TIMEOUT = 30.0  # seconds for one address; the kernel's own gives up after about 130
_ERRNO_REPLY = {
    errno.ECONNREFUSED: CONNECTION_REFUSED,
    errno.ENETUNREACH: NETWORK_UNREACHABLE,
    errno.EHOSTUNREACH: HOST_UNREACHABLE,
    errno.ETIMEDOUT: HOST_UNREACHABLE,
    errno.EACCES: NOT_ALLOWED,
    errno.EPERM: NOT_ALLOWED,
}


class DialError(Exception):
    """reply: the SOCKS5 reply code; timed_out: no answer came (HTTP's 504)."""

    def __init__(self, reply: int, why: str, timed_out: bool = False) -> None:
        super().__init__(why)
        self.reply = reply
        self.timed_out = timed_out


def as_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class TunnelDialer:
    """connect(host, port) through the tunnel.  routable(address): whether
    some peer's AllowedIPs hold it (asked at each connect: the UAPI may
    change them)."""

    def __init__(self, dns_servers: Sequence[IPAddress], routable: Callable[[IPAddress], bool]) -> None:
        self.routable = routable
        self.resolver: dns.asyncresolver.Resolver | None = None
        if dns_servers:
            self.resolver = dns.asyncresolver.Resolver(configure=False)
            self.resolver.nameservers = [str(a) for a in dns_servers]
            self.resolver.lifetime = 10.0

    async def resolve(self, host: str) -> list[IPAddress]:
        """The addresses of `host` (an IP literal is its own), IPv4 first."""
        literal = as_address(host)
        if literal is not None:
            return [literal]
        if self.resolver is None:
            raise DialError(HOST_UNREACHABLE, f"{host}: no DNS servers in [Interface] to resolve it with")
        found: list[IPAddress] = []
        for rdtype in ("A", "AAAA"):
            try:
                answer = await self.resolver.resolve(host, rdtype, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
                continue
            except dns.exception.Timeout:
                raise DialError(HOST_UNREACHABLE, f"{host}: no answer from the DNS servers", True) from None
            except dns.exception.DNSException as e:
                raise DialError(
                    HOST_UNREACHABLE, f"{host}: DNS lookup failed ({e.__class__.__name__})"
                ) from None
            found += [ipaddress.ip_address(r.to_text()) for r in answer]
        if not found:
            raise DialError(HOST_UNREACHABLE, f"{host}: no such name")
        return found

    async def connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        addresses = await self.resolve(host)
        inside = [a for a in addresses if self.routable(a)]
        if not inside:
            raise DialError(HOST_UNREACHABLE, f"{host}: outside every peer's AllowedIPs")
        last: DialError | None = None
        for addr in inside:
            try:
                return await asyncio.wait_for(asyncio.open_connection(str(addr), port), CONNECT_TIMEOUT)
            except asyncio.TimeoutError:
                last = DialError(HOST_UNREACHABLE, f"{addr}:{port}: no answer in {CONNECT_TIMEOUT:g} s", True)
            except OSError as e:
                code = _ERRNO_REPLY.get(e.errno or 0, GENERAL_FAILURE)
                last = DialError(code, f"{addr}:{port}: {e.strerror or e}")
        assert last is not None
        raise last


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """src to dst until EOF, then half-close dst (so each direction ends on its own)."""
    while True:
        data = await src.read(1 << 16)
        if not data:
            break
        dst.write(data)
        await dst.drain()
    if dst.can_write_eof():
        dst.write_eof()


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    """Join two connections both ways until both directions ended; an error
    on either (a reset) aborts both."""
    tasks = [asyncio.ensure_future(_copy(a[0], b[1])), asyncio.ensure_future(_copy(b[0], a[1]))]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        if any(t.exception() is not None for t in done):
            for w in (a[1], b[1]):
                w.transport.abort()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for t in tasks:
            t.cancel()
        for w in (a[1], b[1]):
            w.close()


async def close_writer(w: asyncio.StreamWriter) -> None:
    """Flush what is written (a reply) and close, whatever the peer did."""
    try:
        if not w.is_closing():
            await w.drain()
        w.close()
        await w.wait_closed()
    except OSError:
        pass
