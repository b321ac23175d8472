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
