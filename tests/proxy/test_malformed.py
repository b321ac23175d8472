"""What a client that breaks the protocol gets (RFC 1928, 6; RFC 1929, 2;
RFC 9110), each exchange a connection of its own to the proxy in the lab.
The bytes are spelled out from the RFCs: VER=5, methods 0 (none) and 2
(username/password), commands 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE, address
types 1 IPv4, 3 domain, 4 IPv6."""

import base64
import struct

from tests.proxy.conftest import AUTH_HTTP_PORT, AUTH_SOCKS_PORT, HTTP_PORT, PASSWORD, SOCKS_PORT, USER

NO_AUTH_OK = bytes([5, 0])
FAILED = bytes([1, 0, 0, 0, 0, 0, 0])  # ATYP 1, BND.ADDR 0.0.0.0, BND.PORT 0


def request(cmd, atyp, addr, port=80, ver=5, rsv=0):
    return bytes([ver, cmd, rsv, atyp]) + addr + struct.pack("!H", port)


def socks_reply(code):
    return bytes([5, code, 0]) + FAILED


def test_socks5_replies(lab, proxy):
    greet = bytes([5, 1, 0])
    v4_outside = bytes([192, 0, 2, 1])  # TEST-NET-1: in no AllowedIPs (10.77.0.0/24, fd77::/64)
    cases = [
        # (what is sent, what must come back)
        (greet + request(2, 1, bytes([10, 77, 0, 1])), NO_AUTH_OK + socks_reply(0x07)),  # BIND
        (greet + request(9, 1, bytes([10, 77, 0, 1])), NO_AUTH_OK + socks_reply(0x07)),  # unknown
        (greet + request(1, 2, bytes([10, 77, 0, 1])), NO_AUTH_OK + socks_reply(0x08)),  # ATYP 2
        (greet + request(1, 5, bytes([10, 77, 0, 1])), NO_AUTH_OK + socks_reply(0x08)),  # ATYP 5
        (greet + request(1, 1, bytes([10, 77, 0, 1]), ver=4), NO_AUTH_OK + socks_reply(0x01)),  # VER 4
        (greet + request(1, 1, bytes([10, 77, 0, 1]), rsv=1), NO_AUTH_OK + socks_reply(0x01)),  # RSV != 0
        (greet + request(1, 3, bytes([0])), NO_AUTH_OK + socks_reply(0x01)),  # an empty domain name
        (greet + request(1, 1, v4_outside), NO_AUTH_OK + socks_reply(0x04)),  # outside AllowedIPs
        (greet + request(1, 4, bytes.fromhex("20010db8" + "00" * 12)), NO_AUTH_OK + socks_reply(0x04)),
        (greet + request(1, 3, bytes([9]) + b"peer.test", port=1), NO_AUTH_OK + socks_reply(0x05)),  # refused
        (greet + request(1, 3, bytes([10]) + b"nope.test."), NO_AUTH_OK + socks_reply(0x04)),  # NXDOMAIN
        (bytes([5, 1, 2]), bytes([5, 0xFF])),  # only username/password offered to a no-auth proxy
        (bytes([5, 0]), b""),  # no method at all: closed
        (bytes([4, 1, 0, 80, 10, 77, 0, 1, 0]), b""),  # a SOCKS4 request: closed unanswered
        (greet + request(1, 1, bytes([10, 77])), NO_AUTH_OK),  # cut short: closed after the method
    ]
    answers = lab.probe([(SOCKS_PORT, sent) for sent, _ in cases])
    for (sent, want), (got, closed) in zip(cases, answers):
        assert (got, closed) == (want, True), f"sent {sent.hex()}: got {got.hex()}\n{proxy.log()[-2000:]}"


def userpass(user: bytes, password: bytes) -> bytes:
    return bytes([1, len(user)]) + user + bytes([len(password)]) + password


def test_socks5_username_password_replies(lab, proxy):
    offer = bytes([5, 2, 0, 2])
    cases = [
        (offer + userpass(b"alice", b"wrong"), bytes([5, 2, 1, 1])),  # RFC 1929: status 1, closed
        (offer + userpass(b"bob", PASSWORD.encode()), bytes([5, 2, 1, 1])),
        (bytes([5, 1, 0]), bytes([5, 0xFF])),  # no-auth offered to a proxy that wants credentials
        (
            offer + userpass(USER.encode(), PASSWORD.encode()) + request(2, 1, bytes([10, 77, 0, 1])),
            bytes([5, 2, 1, 0]) + socks_reply(0x07),
        ),
    ]
    answers = lab.probe([(AUTH_SOCKS_PORT, sent) for sent, _ in cases])
    for (sent, want), (got, closed) in zip(cases, answers):
        assert (got, closed) == (want, True), f"sent {sent.hex()}: got {got.hex()}"


def status(reply: bytes) -> bytes:
    return reply.split(b"\r\n", 1)[0]


def test_http_statuses(lab, proxy):
    cases = [
        (b"CONNECT 10.77.0.1 HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request"),  # no port
        (b"CONNECT 10.77.0.1:8000 HTTP/2.0\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GARBAGE\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET /blob HTTP/1.1\r\nHost: 10.77.0.1\r\n\r\n", b"HTTP/1.1 400 Bad Request"),  # origin form
        (b"GET ftp://10.77.0.1/ HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"CONNECT 10.77.0.1:8000 HTTP/1.1\r\nBad Header\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"CONNECT 192.0.2.1:80 HTTP/1.1\r\n\r\n", b"HTTP/1.1 502 Bad Gateway"),  # outside AllowedIPs
        (b"CONNECT 10.77.0.1:1 HTTP/1.1\r\n\r\n", b"HTTP/1.1 502 Bad Gateway"),  # refused
        (
            b"CONNECT 10.77.0.1:8000 HTTP/1.1\r\nX: " + b"a" * (17 << 10) + b"\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large",
        ),
    ]
    answers = lab.probe([(HTTP_PORT, sent) for sent, _ in cases])
    for (sent, want), (got, closed) in zip(cases, answers):
        assert (status(got), closed) == (want, True), f"sent {sent[:60]!r}: got {got[:200]!r}"


def test_http_proxy_authentication(lab, proxy):
    good = base64.b64encode(f"{USER}:{PASSWORD}".encode())
    bad = base64.b64encode(f"{USER}:nope".encode())
    connect = b"CONNECT 10.77.0.1:8000 HTTP/1.1\r\n"
    cases = [
        (connect + b"\r\n", b"HTTP/1.1 407 Proxy Authentication Required"),
        (
            connect + b"Proxy-Authorization: Basic " + bad + b"\r\n\r\n",
            b"HTTP/1.1 407 Proxy Authentication Required",
        ),
        (connect + b"Proxy-Authorization: Basic !!!\r\n\r\n", b"HTTP/1.1 407 Proxy Authentication Required"),
        (
            connect + b"Proxy-Authorization: Bearer " + good + b"\r\n\r\n",
            b"HTTP/1.1 407 Proxy Authentication Required",
        ),
        (
            connect + b"Proxy-Authorization: Basic " + good + b"\r\n\r\n",
            b"HTTP/1.1 200 Connection established",
        ),
    ]
    answers = lab.probe([(AUTH_HTTP_PORT, sent) for sent, _ in cases])
    for (sent, want), (got, _closed) in zip(cases, answers):
        assert status(got) == want, f"sent {sent!r}: got {got[:200]!r}"
    assert b'Proxy-Authenticate: Basic realm="vpncrypt proxy"' in answers[0][0]


MIRROR = (
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"  # tests.proxy.servers' mirror on the peer, port 8001
)


def test_http_absolute_uri_sends_on_one_clean_request(lab, proxy):
    """A fix (the old front passed all of this on as the client wrote it):
    what the target gets for an absolute-URI POST with a chunked body.  Host
    is made from the target (RFC 9110, 7.2), the fields the Connection field
    names are dropped with it (7.6.1), Content-Length beside
    Transfer-Encoding too (RFC 9112, 6.3), the body is chunked again (7.1),
    and a second request pipelined after the first, for another path, is not
    sent on: one request per connection."""
    sent = (
        b"POST http://10.77.0.1:8001/in?x=1 HTTP/1.1\r\nHost: elsewhere.test\r\n"
        b"Connection: close, X-Hop\r\nX-Hop: 1\r\nProxy-Connection: keep-alive\r\nX-End: 2\r\n"
        b"Transfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n"
        b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
        b"GET http://10.77.0.1:8001/second HTTP/1.1\r\nHost: 10.77.0.1:8001\r\n\r\n"
    )
    ((got, closed),) = lab.probe([(HTTP_PORT, sent)])
    head, _, body = got.partition(b"\r\n\r\n")
    assert status(head) == b"HTTP/1.1 200 OK" and closed, got
    request_head, _, request_body = body.partition(b"\r\n\r\n")
    lines = request_head.split(b"\r\n")
    assert lines[0] == b"POST /in?x=1 HTTP/1.1"
    fields = sorted((n.lower(), v) for n, _, v in (line.partition(b": ") for line in lines[1:]))
    assert fields == [
        (b"connection", b"close"),
        (b"host", b"10.77.0.1:8001"),
        (b"transfer-encoding", b"chunked"),
        (b"x-end", b"2"),
    ]
    assert request_body == b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"


def test_http_bytes_past_the_head_and_small_writes(lab, proxy):
    """Coverage (the old front read with readuntil, which handled these
    too; the h11 front feeds its parser from 64 KiB reads): bytes the client
    sends right after a CONNECT head reach the target first; a head sent a
    byte per TCP segment parses as in one; so does a CONNECT without Host
    (accepted, as Go's net/http does) and a Content-Length body."""
    connect = b"CONNECT 10.77.0.1:8001 HTTP/1.1\r\nHost: 10.77.0.1:8001\r\n\r\n"
    post = b"POST http://10.77.0.1:8001/ HTTP/1.1\r\nHost: 10.77.0.1:8001\r\nContent-Length: 5\r\n\r\nhello"
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    cases = [
        (connect + b"past the head", established + MIRROR % 13 + b"past the head"),
        (connect + b"past the head", established + MIRROR % 13 + b"past the head", 1),
        (b"CONNECT 10.77.0.1:8001 HTTP/1.1\r\n\r\nno Host", established + MIRROR % 7 + b"no Host", 1),
        (b"CONNECT 10.77.0.1:8001 HTTP/1.1\r\n\r\nno Host", established + MIRROR % 7 + b"no Host", 3),
    ]
    answers = lab.probe([(HTTP_PORT, sent, *n) for sent, _want, *n in cases])
    for (sent, want, *n), (got, closed) in zip(cases, answers):
        assert (got, closed) == (want, True), f"sent {sent!r} {n}: got {got!r}"
    forwarded = (
        b"POST / HTTP/1.1\r\nHost: 10.77.0.1:8001\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    )
    for n in (1, 7):
        ((got, closed),) = lab.probe([(HTTP_PORT, post, n)])
        head, _, body = got.partition(b"\r\n\r\n")
        assert (status(head), body, closed) == (b"HTTP/1.1 200 OK", forwarded, True), (
            f"{n} at a time: {got!r}"
        )


def test_http_head_size_limit(lab, proxy):
    """A head (request line, fields, the blank line) of 16384 bytes is taken,
    one of 16385 is answered 431 (RFC 6585, 5), whether it comes in one
    segment or in 1000-byte ones.  A fix: the old front's readuntil, its
    limit 16 KiB to the separator's start, took 16385 bytes."""
    connect = b"CONNECT 10.77.0.1:8001 HTTP/1.1\r\nHost: 10.77.0.1:8001\r\nX: "

    def head(size):
        return connect + b"a" * (size - len(connect) - 4) + b"\r\n\r\n"

    assert len(head(16384)) == 16384
    cases = [(head(16384), 0), (head(16384), 1000), (head(16385), 0), (head(16385), 1000)]
    answers = lab.probe([(HTTP_PORT, sent, n) for sent, n in cases])
    got = [status(reply) for reply, _closed in answers]
    assert (
        got
        == [b"HTTP/1.1 200 Connection established"] * 2
        + [b"HTTP/1.1 431 Request Header Fields Too Large"] * 2
    )
