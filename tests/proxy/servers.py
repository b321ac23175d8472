"""The far ends the proxy tests reach, one process per namespace.

    python -m tests.proxy.servers peer BLOB V4 NAME   # in the peer's namespace
        HTTP on [::]:8000 (IPv4 and IPv6) serving the file BLOB as /blob,
        DNS on V4:53 answering NAME with V4 (A) and the peer's IPv6 (AAAA), and
        UDP echo on [::]:7 (IPv4 and IPv6), and on [::]:8001 (TCP) a mirror:
        it reads a connection to its end and answers an HTTP/1.1 200 whose
        body is every byte it read (what a proxy sent on, seen raw)
    python -m tests.proxy.servers echo PORT           # in the proxy's namespace
        TCP on 127.0.0.1:PORT echoing each connection's bytes back

Each prints "ready" once it listens.
"""

import functools
import http.server
import socket
import socketserver
import sys
import threading


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(1 << 16)
            if not data:
                return
            self.request.sendall(data)


class _Mirror(socketserver.BaseRequestHandler):
    def handle(self):
        got = b""
        while data := self.request.recv(1 << 16):
            got += data
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(got) + got)


class _DualStack:
    """IPv4 and IPv6 on one socket (a mixin for socketserver's TCP servers)."""

    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _DualStackTCP(_DualStack, socketserver.ThreadingTCPServer):
    pass


class _DualStackHTTP(_DualStack, http.server.ThreadingHTTPServer):
    pass


def _dns(v4: str, v6: str, name: str):
    from dnslib import AAAA, QTYPE, RR, A
    from dnslib.server import BaseResolver, DNSServer

    class Answers(BaseResolver):
        def resolve(self, request, handler):
            reply = request.reply()
            q = request.q
            if str(q.qname).rstrip(".") == name:
                if q.qtype == QTYPE.A:
                    reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(v4), ttl=5))
                elif q.qtype == QTYPE.AAAA:
                    reply.add_answer(RR(q.qname, QTYPE.AAAA, rdata=AAAA(v6), ttl=5))
            else:
                reply.header.rcode = 3  # NXDOMAIN
            return reply

    server = DNSServer(Answers(), address=v4, port=53)
    server.start_thread()
    return server


def _udp_echo() -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 7))
    while True:
        data, addr = s.recvfrom(65535)
        s.sendto(data, addr)


def main() -> None:
    if sys.argv[1] == "peer":
        blob, v4, v6, name = sys.argv[2:6]
        directory = blob.rsplit("/", 1)[0]
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
        handler.log_message = lambda *a: None
        httpd = _DualStackHTTP(("::", 8000), handler)
        _dns(v4, v6, name)
        threading.Thread(target=_udp_echo, daemon=True).start()
        threading.Thread(target=_DualStackTCP(("::", 8001), _Mirror).serve_forever, daemon=True).start()
        print("ready", flush=True)
        httpd.serve_forever()
    else:
        server = socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[2])), _Echo)
        server.daemon_threads = True
        print("ready", flush=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        sys.stdin.read()  # until the test closes it (or dies)


if __name__ == "__main__":
    main()
