"""The HTTP front: CONNECT (RFC 9110, 9.3.6) and absolute-URI requests for
plain http:// (RFC 9112, 3.2.2), with Basic proxy authentication (RFC 7617).
h11 parses and writes the messages (sans-I/O HTTP/1.1, the server role
towards the client, the client role towards an absolute-URI's target).

    a head that h11 refuses, not HTTP/1.x, a bad target 400 Bad Request
    a head over 16 KiB                                  431
    a Transfer-Encoding other than chunked              501 (h11's hint)
    missing or wrong Proxy-Authorization               407 with Proxy-Authenticate
    a method other than CONNECT with an origin-form
    target, or a scheme other than http                400
    a target outside every AllowedIPs, not resolved    502 Bad Gateway
    no answer from the target (the dial timed out)     504 Gateway Timeout
    a target that closes before its answer, or
    answers what h11 cannot parse                      502 (a reset if the answer had begun)
    a request body h11 cannot parse                    400 (a reset if the answer had begun)

An absolute-URI request is sent on in origin form with "Connection: close"
(one request per connection: the next one may name another host), its body
re-framed by h11 (Content-Length or chunked as the client sent it), the
response streamed back through h11 (so an HTTP/1.0 client never gets chunks).
Bytes the client sends past that one request are read and dropped.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import http
import logging
import urllib.parse

import h11

from vpncrypt.proxy.dialer import DialError, TunnelDialer, close_writer, splice
from vpncrypt.proxy.settings import parse_host_port
from vpncrypt.proxy.socks5 import HANDSHAKE_TIMEOUT

log = logging.getLogger("vpncrypt.proxy")

MAX_HEAD = 16 << 10
READ = 1 << 16
# RFC 9110, 7.6.1 (and Proxy-Authorization, which is ours): not passed on.
# Transfer-Encoding is, for h11 to frame the body it writes by it.
_HOP_BY_HOP = {b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive", b"te", b"upgrade"}
Headers = list[tuple[bytes, bytes]]
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Refused(Exception):
    def __init__(self, status: int, why: str, extra: Headers | None = None) -> None:
        super().__init__(why)
        self.status, self.extra = status, extra or []

    def response(self, conn: h11.Connection) -> bytes:
        """The refusal, written by h11 (which lets a server answer a
        request it could not parse: only the client's side is in ERROR)."""
        reason = http.HTTPStatus(self.status).phrase
        body = f"{self.status} {reason}\n".encode()
        headers = [
            *self.extra,
            (b"Content-Type", b"text/plain"),
            (b"Connection", b"close"),
            (b"Content-Length", str(len(body)).encode()),
        ]
        return (
            conn.send(h11.Response(status_code=self.status, reason=reason.encode(), headers=headers))
            + (conn.send(h11.Data(data=body)) or b"")
            + (conn.send(h11.EndOfMessage()) or b"")
        )


def _bad(why: str) -> Refused:
    return Refused(400, why)


def _server() -> h11.Connection:
    # h11 refuses a buffer over the limit that holds no complete head: with
    # 16 KiB - 1, a head not complete in its first 16 KiB (16384 bytes)
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD - 1)


def _why(e: h11.RemoteProtocolError) -> str:
    """h11's reason without the bytes it quotes (a bad line may be a
    Proxy-Authorization one: no password in the log)."""
    return str(e).partition(": ")[0]


def _with_host(head: bytes) -> bytes:
    """A CONNECT head with a Host field after its request line.  h11 refuses
    an HTTP/1.1 request without Host (RFC 9112, 3.2), which clients of CONNECT
    often leave out and which Go's net/http (wireproxy) exempts CONNECT from:
    the target is the authority."""
    line, nl, rest = head.partition(b"\n")
    return line + nl + b"Host: connect\r\n" + rest


async def _next_event(
    conn: h11.Connection, r: asyncio.StreamReader, status: int | None = None
) -> object:  # an h11.Event or h11.PAUSED
    """The peer's next event, reading as h11 needs (any split of the bytes
    across TCP segments gives the same events); a protocol error is refused
    with `status`, or h11's hint for it (400, 431 for a head over the limit)."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as e:
            raise Refused(status or e.error_status_hint, _why(e)) from None
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await r.read(READ))


def _end_to_end(headers: Headers) -> Headers:
    """The fields passed on: not the hop-by-hop ones nor those the Connection
    field names (RFC 9110, 7.6.1), nor Content-Length beside Transfer-Encoding
    (RFC 9112, 6.3: the sender removes it; h11 frames by the chunks)."""
    named = {t.strip().lower() for n, v in headers if n.lower() == b"connection" for t in v.split(b",")}
    chunked = any(n.lower() == b"transfer-encoding" for n, _v in headers)
    return [
        (n, v)
        for n, v in headers
        if n.lower() not in _HOP_BY_HOP | named and not (chunked and n.lower() == b"content-length")
    ]


async def _copy_body(
    src: h11.Connection,
    r: asyncio.StreamReader,
    dst: h11.Connection,
    w: asyncio.StreamWriter,
    status: int | None,
) -> None:
    """One message's body from src (read from r) to dst (written to w): h11
    takes the framing off and puts dst's on."""
    while True:
        event = await _next_event(src, r, status)
        if not isinstance(event, (h11.Data, h11.EndOfMessage)):
            raise Refused(status or 400, f"{type(event).__name__} in a body")
        w.write(dst.send(event) or b"")
        await w.drain()
        if isinstance(event, h11.EndOfMessage):
            return


class _Client:
    """The client's side: h11 as the server, fed from the stream."""

    def __init__(self, r: asyncio.StreamReader) -> None:
        self.r, self.conn = r, _server()

    async def request(self) -> h11.Request | None:
        """The request (None: closed before a byte); a CONNECT's end too."""
        request = await self._head()
        if request is not None and request.method == b"CONNECT":
            if not isinstance(await _next_event(self.conn, self.r), h11.EndOfMessage):
                raise _bad("CONNECT with a body")
        return request

    async def _head(self) -> h11.Request | None:
        # the head's bytes are kept (16 KiB and a read at most) for a CONNECT
        # that h11 refused for want of Host: parsed again with one
        head, retried = bytearray(), False  # (a bytearray: 16 KiB in 1-byte segments stays linear)
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as e:
                if e.error_status_hint != 400 or not head.startswith(b"CONNECT ") or retried:
                    raise Refused(e.error_status_hint, _why(e)) from None
                head, retried = bytearray(_with_host(bytes(head))), True
                self.conn = _server()
                self.conn.receive_data(bytes(head))
                continue
            if event is h11.NEED_DATA:
                # h11 checks its limit on a head still incomplete: fed no
                # more than 16 KiB before it has one, it refuses one that is
                # not complete in 16 KiB (see _server)
                data = await self.r.read(max(1, MAX_HEAD - len(head)))
                head += data
                self.conn.receive_data(data)
            else:
                return event if isinstance(event, h11.Request) else None


def _route(request: h11.Request) -> tuple[str, int, h11.Request | None]:
    """(host, port, the request to send on: None for CONNECT)."""
    method, target = request.method, request.target
    if request.http_version not in (b"1.0", b"1.1"):
        raise _bad(f"HTTP/{request.http_version.decode()}")
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
    # RFC 9110, 7.2: a proxy makes Host from the absolute target, not the client's Host
    authority = url.netloc.rpartition("@")[2]
    kept = [(n, v) for n, v in _end_to_end(list(request.headers.raw_items())) if n.lower() != b"host"]
    headers = [(b"Host", authority.encode()), *kept, (b"Connection", b"close")]
    return url.hostname, port, h11.Request(method=method, target=path.encode(), headers=headers)


class HttpFront:
    """Serves one [http] section's connections."""

    def __init__(self, dialer: TunnelDialer, username: str | None, password: str | None) -> None:
        self.dialer = dialer
        self.credentials = (
            f"{username}:{password}".encode() if username is not None and password is not None else None
        )

    def _check_auth(self, headers: Headers) -> None:
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
        challenge = (b"Proxy-Authenticate", b'Basic realm="vpncrypt proxy"')
        raise Refused(407, "missing or wrong credentials", [challenge])

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        peer = w.get_extra_info("peername")
        client = _Client(r)
        try:
            try:
                request = await asyncio.wait_for(client.request(), HANDSHAKE_TIMEOUT)
                if request is None:
                    return
                self._check_auth(list(request.headers.raw_items()))
                host, port, forward = _route(request)
                remote = await self._dial(host, port)
                if forward is None:
                    await _tunnel(client, w, remote)
                else:
                    await _forward(client, w, remote, forward)
            except Refused as e:
                log.info("HTTP %s: %d %s", peer, e.status, e)
                _refuse(client.conn, w, e)
        except (asyncio.TimeoutError, OSError):
            pass
        finally:
            await close_writer(w)

    async def _dial(self, host: str, port: int) -> Stream:
        try:
            return await self.dialer.connect(host, port)
        except DialError as e:
            if e.timed_out:
                raise Refused(504, str(e)) from None
            raise Refused(502, str(e)) from None


def _refuse(conn: h11.Connection, w: asyncio.StreamWriter, e: Refused) -> None:
    try:
        w.write(e.response(conn))
    except h11.LocalProtocolError:
        # the response had begun (a body cut short, a target's bad framing):
        # a reset is all that is left to tell the client
        w.transport.abort()


async def _tunnel(client: _Client, w: asyncio.StreamWriter, remote: Stream) -> None:
    conn = client.conn
    w.write(conn.send(h11.Response(status_code=200, reason=b"Connection established", headers=[])) or b"")
    # a 2xx to CONNECT ends HTTP on the connection (h11 switches protocol);
    # what the client sent past the head (a TLS ClientHello, say) was read
    # into h11's buffer: it goes first
    assert conn.our_state is h11.SWITCHED_PROTOCOL
    data, _closed = conn.trailing_data
    remote[1].write(data)
    await splice((client.r, w), remote)


async def _forward(client: _Client, w: asyncio.StreamWriter, remote: Stream, request: h11.Request) -> None:
    """The request to the target (its body while the response comes: a
    target may answer early, or send 100 Continue), the response back."""
    up = h11.Connection(h11.CLIENT)
    remote[1].write(up.send(request) or b"")
    body = asyncio.ensure_future(_request_body(client, up, remote[1]))
    response = asyncio.ensure_future(_response(client.conn, up, remote[0], w))
    try:
        done, _pending = await asyncio.wait((body, response), return_when=asyncio.FIRST_COMPLETED)
        if response not in done:
            body.result()  # the body's error, if it had one
        await response
    finally:
        for t in (body, response):
            t.cancel()
        await asyncio.gather(body, response, return_exceptions=True)
        remote[1].transport.abort()


async def _request_body(client: _Client, up: h11.Connection, w: asyncio.StreamWriter) -> None:
    await _copy_body(client.conn, client.r, up, w, None)
    # past the one request (a pipelined one may be for another host): dropped;
    # the client's end of sending is passed on, as for a tunnel
    while await client.r.read(READ):
        pass
    if w.can_write_eof():
        w.write_eof()


async def _response(
    conn: h11.Connection, up: h11.Connection, r: asyncio.StreamReader, w: asyncio.StreamWriter
) -> None:
    while True:
        event = await _next_event(up, r, 502)
        if isinstance(event, h11.InformationalResponse):
            w.write(
                conn.send(
                    h11.InformationalResponse(
                        status_code=event.status_code,
                        headers=_end_to_end(list(event.headers.raw_items())),
                        reason=event.reason,
                    )
                )
                or b""
            )
        elif isinstance(event, h11.Response):
            headers = [*_end_to_end(list(event.headers.raw_items())), (b"Connection", b"close")]
            w.write(
                conn.send(h11.Response(status_code=event.status_code, headers=headers, reason=event.reason))
                or b""
            )
            break
        else:
            raise Refused(502, "the target closed without a response")
    await _copy_body(up, r, conn, w, 502)
