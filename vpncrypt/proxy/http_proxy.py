"""The HTTP front: CONNECT (RFC 9110, 9.3.6) and absolute-URI requests for
plain http:// (RFC 9112, 3.2.2), with Basic proxy authentication (RFC 7617).

    a head that is not HTTP/1.x, or a bad target      400 Bad Request
    a head over 16 KiB                                 431
    missing or wrong Proxy-Authorization              407 with Proxy-Authenticate
    a method other than CONNECT with an origin-form
    target, or a scheme other than http               400
    a target outside every AllowedIPs, not resolved   502 Bad Gateway
    no answer from the target                          504 Gateway Timeout

An absolute-URI request is sent on in origin form with "Connection: close"
(one request per connection: the next one may name another host).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import urllib.parse

from vpncrypt.proxy.dialer import DialError, TunnelDialer, close_writer, splice
from vpncrypt.proxy.settings import parse_host_port
from vpncrypt.proxy.socks5 import HANDSHAKE_TIMEOUT

log = logging.getLogger("vpncrypt.proxy")

MAX_HEAD = 16 << 10
_HOP_BY_HOP = {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive"}


class Refused(Exception):
    def __init__(self, status: int, reason: str, why: str, extra: bytes = b"") -> None:
        super().__init__(why)
        self.status, self.reason, self.extra = status, reason, extra

    def response(self) -> bytes:
        body = f"{self.status} {self.reason}\n".encode()
        return (
            f"HTTP/1.1 {self.status} {self.reason}\r\n".encode()
            + self.extra
            + b"Content-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


def _bad(why: str) -> Refused:
    return Refused(400, "Bad Request", why)


def parse_head(head: bytes) -> tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]]:
    """(method, target, version, [(name, value)]) of a request head."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if (
        len(parts) != 3
        or not parts[0].isalpha()
        or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1")
        or not parts[1]
    ):
        raise _bad("a malformed request line")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or b" " in name:
            raise _bad("a malformed header line")
        headers.append((name, value.strip()))
    return parts[0], parts[1], parts[2], headers


class HttpFront:
    """Serves one [http] section's connections."""

    def __init__(self, dialer: TunnelDialer, username: str | None, password: str | None) -> None:
        self.dialer = dialer
        self.credentials = (
            f"{username}:{password}".encode() if username is not None and password is not None else None
        )

    def _check_auth(self, headers: list[tuple[bytes, bytes]]) -> None:
        if self.credentials is None:
            return
        for name, value in headers:
            if name.lower() == b"proxy-authorization":
                scheme, _, token = value.partition(b" ")
                try:
                    given = base64.b64decode(token.strip(), validate=True)
                except (binascii.Error, ValueError):
                    given = b""
                if scheme.lower() == b"basic" and hmac.compare_digest(given, self.credentials):
                    return
        raise Refused(
            407,
            "Proxy Authentication Required",
            "missing or wrong credentials",
            b'Proxy-Authenticate: Basic realm="vpncrypt proxy"\r\n',
        )

    async def _read_head(self, r: asyncio.StreamReader) -> bytes:
        try:
            return await r.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise Refused(431, "Request Header Fields Too Large", "a head over 16 KiB") from None

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        peer = w.get_extra_info("peername")
        try:
            try:
                head = await asyncio.wait_for(self._read_head(r), HANDSHAKE_TIMEOUT)
                method, target, version, headers = parse_head(head)
                self._check_auth(headers)
                host, port, forward = self._route(method, target, version, headers)
                remote = await self._dial(host, port)
            except Refused as e:
                log.info("HTTP %s: %d %s", peer, e.status, e)
                w.write(e.response())
                return
            if forward is None:
                w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                remote[1].write(forward)
            await splice((r, w), remote)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, OSError):
            pass
        finally:
            await close_writer(w)

    async def _dial(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await self.dialer.connect(host, port)
        except DialError as e:
            if e.timed_out:
                raise Refused(504, "Gateway Timeout", str(e)) from None
            raise Refused(502, "Bad Gateway", str(e)) from None

    @staticmethod
    def _route(
        method: bytes, target: bytes, version: bytes, headers: list[tuple[bytes, bytes]]
    ) -> tuple[str, int, bytes | None]:
        """(host, port, the head to send on: None for CONNECT)."""
        if method == b"CONNECT":
            try:
                hp = parse_host_port(target.decode("ascii"), need_host=True)
            except (ValueError, UnicodeDecodeError):
                raise _bad("CONNECT needs HOST:PORT") from None
            return hp.host, hp.port, None
        try:
            url = urllib.parse.urlsplit(target.decode("ascii"))
            port = url.port or 80
        except (ValueError, UnicodeDecodeError):
            raise _bad("a malformed target") from None
        if url.scheme.lower() != "http" or not url.hostname:
            raise _bad(f"{method.decode(errors='replace')} needs an absolute http:// target")
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        kept = [(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP]
        head = method + b" " + path.encode() + b" " + version + b"\r\n"
        head += b"".join(n + b": " + v + b"\r\n" for n, v in kept) + b"Connection: close\r\n\r\n"
        return url.hostname, port, head
