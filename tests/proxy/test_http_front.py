"""The [http] front's HTTP against targets that misbehave, in one process:
the front (vpncrypt.proxy.http_proxy.HttpFront) with a dialer that connects
to a local server answering raw bytes, a client writing raw bytes.  No lab,
no tunnel: what is checked is the front's HTTP, not the path."""

import asyncio
import logging

from vpncrypt.proxy.http_proxy import HttpFront


class LocalDialer:
    """Any target is the local server on `port`."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def connect(self, host: str, port: int):
        return await asyncio.open_connection("127.0.0.1", self.port)


def exchange(answer: bytes | None, sent: bytes) -> tuple[bytes, bytes]:
    """(what the client got, what the target got) for `sent` through the
    front, the target answering `answer` once the request's head is in
    (None: it reads to the end and never answers)."""

    async def run() -> tuple[bytes, bytes]:
        got = bytearray()

        async def target(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            if answer is None:
                got.extend(await r.read())
            else:
                got.extend(await r.readuntil(b"\r\n\r\n"))
                w.write(answer)
                await w.drain()
            w.close()

        server = await asyncio.start_server(target, "127.0.0.1", 0)
        front = HttpFront(LocalDialer(server.sockets[0].getsockname()[1]), None, None)
        proxy = await asyncio.start_server(front.handle, "127.0.0.1", 0)
        r, w = await asyncio.open_connection("127.0.0.1", proxy.sockets[0].getsockname()[1])
        w.write(sent)
        await w.drain()
        w.write_eof()
        reply = await asyncio.wait_for(r.read(), 20)
        w.close()
        for s in (proxy, server):
            s.close()
        return reply, bytes(got)

    return asyncio.run(run())


GET = b"GET http://peer.test/x HTTP/1.1\r\nHost: peer.test\r\n\r\n"


def test_a_target_answering_garbage_is_a_502():
    """A fix: the old front streamed a target's bytes back whatever they were."""
    reply, _ = exchange(b"garbage\r\n\r\n", GET)
    assert reply.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), reply


def test_a_target_closing_without_an_answer_is_a_502():
    """A fix: the old front closed the client's connection with no answer."""
    reply, _ = exchange(b"", GET)
    assert reply.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), reply


def test_a_malformed_chunked_body_is_a_400_and_not_sent_on():
    """A fix: the old front passed the body on raw, the bad chunk too
    ("zz" is no chunk size: RFC 9112, 7.1)."""
    sent = b"POST http://peer.test/ HTTP/1.1\r\nHost: peer.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    reply, got = exchange(None, sent)
    assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n"), reply
    assert (
        got
        == b"POST / HTTP/1.1\r\nHost: peer.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )


def test_a_transfer_coding_other_than_chunked_is_a_501():
    """A fix: the old front sent it on (a body it could not frame).  RFC
    9112, 6.1: a server that does not understand a transfer coding answers 501."""
    sent = b"POST http://peer.test/ HTTP/1.1\r\nHost: peer.test\r\nTransfer-Encoding: gzip\r\n\r\n"
    reply, got = exchange(None, sent)
    assert reply.startswith(b"HTTP/1.1 501 Not Implemented\r\n") and got == b"", (reply, got)


def test_an_http10_client_gets_no_chunks():
    """A chunked answer comes to an HTTP/1.0 client unchunked, to its end at
    the close (1.0 has no chunked coding).  Needed now: the front sends on
    its own version, HTTP/1.1 (RFC 9110, 6.2), where the old front kept the
    client's 1.0, and passed whatever came back raw (so this fails on it)."""
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    reply, _ = exchange(answer, b"GET http://peer.test/ HTTP/1.0\r\n\r\n")
    assert reply == b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello"


def test_100_continue_comes_through():
    """Coverage: the target's 100 (Continue) reaches the client before its
    200 (it fails on the old front only for the "Connection: close" the
    new one adds to the answer: the old one passed the target's raw)."""
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    sent = (
        b"POST http://peer.test/ HTTP/1.1\r\nHost: peer.test\r\n"
        b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"
    )
    reply, _ = exchange(answer, sent)
    assert (
        reply
        == b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    )


def test_a_refused_head_is_logged_without_its_bytes(caplog):
    """Coverage (the old front's reasons quoted nothing; h11's quote the bad
    line): a malformed Proxy-Authorization line (a space before the colon,
    RFC 9112, 5.1) is a 400, and its credentials stay out of the log."""
    secret = b"YWxpY2U6czNjcmV0IHBhc3M="  # base64 of "alice:s3cret pass"
    sent = b"CONNECT peer.test:80 HTTP/1.1\r\nHost: peer.test\r\nProxy-Authorization : Basic " + secret
    with caplog.at_level(logging.DEBUG, logger="vpncrypt.proxy"):
        reply, _ = exchange(None, sent + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n"), reply
    assert "400 illegal header line" in caplog.text and secret.decode() not in caplog.text, caplog.text
