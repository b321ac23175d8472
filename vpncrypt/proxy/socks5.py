"""The SOCKS5 front: RFC 1928 (CONNECT) with RFC 1929's username/password.

A small strict parser of our own: the SOCKS libraries on PyPI and in Debian
are clients (socksio, python-socks, PySocks, aiohttp-socks) or whole servers
with their own loop and policy (asocks, pproxy), none a server-side message
parser to drive from asyncio streams.

What a client gets (RFC 1928, 6), with BND.ADDR 0.0.0.0:0 on every failure:
    a version other than 5 in the greeting      the connection closed (no reply
                                                 is defined for another version)
    no acceptable method                        05 FF, closed
    bad credentials (RFC 1929)                  01 01, closed
    a malformed request (VER, RSV, lengths)     0x01 general failure
    BIND or another command                     0x07 command not supported
    (UDP ASSOCIATE: udp_associate.py)
    an ATYP other than 1, 3, 4                  0x08 address type not supported
    a target outside every AllowedIPs           0x04 host unreachable
    the connect's own failure                   0x03/0x04/0x05 by its errno
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import struct

from vpncrypt.proxy.host_connector import HostConnector
from vpncrypt.proxy.udp_associate import Association
from vpncrypt.proxy.dialer import (
    ADDRESS_TYPE_NOT_SUPPORTED,
    COMMAND_NOT_SUPPORTED,
    GENERAL_FAILURE,
    DialError,
    TunnelDialer,
    close_writer,
    splice,
)

log = logging.getLogger("vpncrypt.proxy")

VERSION = 5
NO_AUTH, USERPASS, NO_ACCEPTABLE = 0x00, 0x02, 0xFF
AUTH_VERSION = 1  # RFC 1929's sub-negotiation
CMD_CONNECT, CMD_UDP_ASSOCIATE = 1, 3
ATYP_V4, ATYP_DOMAIN, ATYP_V6 = 1, 3, 4
HANDSHAKE_TIMEOUT = 30.0  # seconds a client has to say what it wants


class Malformed(Exception):
    """A request that breaks the RFC: answered with `reply` (None: closed unanswered)."""

    def __init__(self, reply: int | None, why: str) -> None:
        super().__init__(why)
        self.reply = reply


def reply(code: int, bound: tuple[str, int] | None = None) -> bytes:
    """A reply message: VER REP RSV ATYP BND.ADDR BND.PORT."""
    host, port = bound or ("0.0.0.0", 0)
    addr = ipaddress.ip_address(host.split("%", 1)[0])
    atyp = ATYP_V4 if addr.version == 4 else ATYP_V6
    return bytes((VERSION, code, 0, atyp)) + addr.packed + struct.pack("!H", port)


async def read_greeting(r: asyncio.StreamReader) -> bytes:
    """The methods the client offers (RFC 1928, 3)."""
    ver, n = await r.readexactly(2)
    if ver != VERSION:
        raise Malformed(None, f"version {ver} in the greeting")
    if n == 0:
        raise Malformed(None, "no methods offered")
    return await r.readexactly(n)


async def read_credentials(r: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """RFC 1929's request: VER=1 ULEN UNAME PLEN PASSWD (lengths 1 to 255)."""
    ver, ulen = await r.readexactly(2)
    if ver != AUTH_VERSION or ulen == 0:
        raise Malformed(None, "a malformed username/password request")
    user = await r.readexactly(ulen)
    (plen,) = await r.readexactly(1)
    if plen == 0:
        raise Malformed(None, "an empty password")
    return user, await r.readexactly(plen)


async def read_request(r: asyncio.StreamReader, commands: tuple[int, ...]) -> tuple[int, str, int]:
    """The request (RFC 1928, 4): (command, host, port), the command one of
    `commands`; else Malformed."""
    ver, cmd, rsv, atyp = await r.readexactly(4)
    if ver != VERSION or rsv != 0:
        raise Malformed(GENERAL_FAILURE, f"version {ver}, reserved byte {rsv}")
    if atyp == ATYP_V4:
        host = str(ipaddress.IPv4Address(await r.readexactly(4)))
    elif atyp == ATYP_V6:
        host = str(ipaddress.IPv6Address(await r.readexactly(16)))
    elif atyp == ATYP_DOMAIN:
        (n,) = await r.readexactly(1)
        raw = await r.readexactly(n)
        try:
            host = raw.decode("ascii")
        except UnicodeDecodeError:
            raise Malformed(GENERAL_FAILURE, "a domain name that is not ASCII") from None
        if not host or any(c.isspace() or c in "/\\%" for c in host) or len(host) > 253:
            raise Malformed(GENERAL_FAILURE, "an empty or malformed domain name")
    else:
        raise Malformed(ADDRESS_TYPE_NOT_SUPPORTED, f"address type {atyp}")
    (port,) = struct.unpack("!H", await r.readexactly(2))
    if cmd not in commands:
        raise Malformed(COMMAND_NOT_SUPPORTED, f"command {cmd}")
    return cmd, host, port


class Socks5Front:
    """Serves one [Socks5] section's connections."""

    def __init__(
        self,
        dialer: TunnelDialer,
        username: str | None,
        password: str | None,
        host: HostConnector | None = None,
    ) -> None:
        self.dialer = dialer
        self.host = host  # for UDP ASSOCIATE's relay socket, in the host's namespace
        self.commands = (CMD_CONNECT,) if host is None else (CMD_CONNECT, CMD_UDP_ASSOCIATE)
        self.credentials = (
            (username.encode(), password.encode()) if username is not None and password is not None else None
        )

    async def _negotiate(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> tuple[int, str, int]:
        methods = await read_greeting(r)
        want = USERPASS if self.credentials else NO_AUTH
        if want not in methods:
            w.write(bytes((VERSION, NO_ACCEPTABLE)))
            raise Malformed(None, "no acceptable authentication method offered")
        w.write(bytes((VERSION, want)))
        if self.credentials is not None:
            user, password = await read_credentials(r)
            good = hmac.compare_digest(user, self.credentials[0]) & hmac.compare_digest(
                password, self.credentials[1]
            )
            w.write(bytes((AUTH_VERSION, 0 if good else 1)))
            if not good:
                raise Malformed(None, "wrong username or password")
        return await read_request(r, self.commands)

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        peer = w.get_extra_info("peername")
        try:
            try:
                cmd, host, port = await asyncio.wait_for(self._negotiate(r, w), HANDSHAKE_TIMEOUT)
            except Malformed as e:
                log.info("SOCKS5 %s: %s", peer, e)
                if e.reply is not None:
                    w.write(reply(e.reply))
                return
            if cmd == CMD_UDP_ASSOCIATE:
                await self._associate(r, w, host, port)
                return
            try:
                remote = await self.dialer.connect(host, port)
            except DialError as e:
                log.info("SOCKS5 %s: CONNECT %s port %d: %s", peer, host, port, e)
                w.write(reply(e.reply))
                return
            bound = remote[1].get_extra_info("sockname")
            w.write(reply(0, (bound[0], bound[1])))
            await splice((r, w), remote)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, OSError):
            pass
        finally:
            await close_writer(w)

    async def _associate(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, host: str, port: int
    ) -> None:
        """UDP ASSOCIATE: the relay lives until the client closes its TCP
        connection.  DST.ADDR/DST.PORT name where the client will send from
        (zeros: not known yet); only the TCP connection's address may."""
        assert self.host is not None
        peer, local = w.get_extra_info("peername"), w.get_extra_info("sockname")
        assoc = Association(self.dialer, (peer[0], port))
        try:
            relay = await self.host.udp_socket(local[0])
            bound = await assoc.start(relay)
        except OSError as e:
            log.info("SOCKS5 %s: UDP ASSOCIATE: %s", peer, e.strerror or e)
            w.write(reply(GENERAL_FAILURE))
            assoc.close()
            return
        w.write(reply(0, bound))
        try:
            while await r.read(1 << 12):
                pass  # the RFC gives the control connection nothing more to carry
        finally:
            assoc.close()
