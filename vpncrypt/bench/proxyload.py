"""Load through `vpncrypt proxy` for `vpncrypt bench tunnel`: iperf3 speaks no
SOCKS5, so these are the two ends of the proxy pairings' tests, run in the
lab's namespaces (the senders in A, where the proxy listens; the sinks in B,
behind the tunnel):

    python -m vpncrypt.bench.proxyload sink tcp PORT
    python -m vpncrypt.bench.proxyload sink udp PORT
    python -m vpncrypt.bench.proxyload send tcp HOST PORT SECONDS [--socks H:P]
    python -m vpncrypt.bench.proxyload send udp HOST PORT SECONDS --socks H:P [--size N]
    python -m vpncrypt.bench.proxyload echo PORT
    python -m vpncrypt.bench.proxyload conns HOST PORT COUNT --socks H:P

sink prints {"listening": true} once bound, then one result line: TCP, the
bytes of one connection from its first to its last byte and the receiving
socket's TCP_INFO (RTT, window scales, SACK); UDP, the datagrams of one
stream (each starts with its 8-byte sequence number) until SILENCE seconds
without any once traffic flows: received, distinct, lost.  send writes as fast
as the kernel takes it for SECONDS (TCP: through a SOCKS5 CONNECT, or straight
to HOST:PORT, e.g. a port forward; UDP: through a SOCKS5 UDP ASSOCIATE) and
prints what it sent.  conns opens COUNT SOCKS5 CONNECTs to an echo server,
has each carry 8 bytes there and back, prints {"open": N, "errors": [...]},
holds them until SIGTERM (or not, with --no-hold), then closes them and exits.

The SOCKS5 client is RFC 1928 with no authentication, written here so that
the bench does not reuse the proxy's own code to judge it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import socket
import struct
import time

CHUNK = 256 << 10  # bytes per TCP send
SEQ = struct.Struct("!Q")
SILENCE = 1.0  # seconds without a UDP datagram (once they flow) that end a sink
FIRST_WAIT = 60.0  # seconds a sink waits for its first byte
TCP_INFO_U32 = struct.Struct("=8B24I")  # struct tcp_info up to tcpi_total_retrans
TCPI_OPT_SACK, TCPI_OPT_WSCALE = 2, 4


def _out(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _socks_request(cmd: int, host: str, port: int) -> bytes:
    """RFC 1928 section 4: VER CMD RSV ATYP DST.ADDR DST.PORT."""
    if ":" in host:
        addr = b"\x04" + socket.inet_pton(socket.AF_INET6, host)
    else:
        addr = b"\x01" + socket.inet_aton(host)
    return bytes([5, cmd, 0]) + addr + struct.pack("!H", port)


def _parse_reply(head: bytes, rest: bytes) -> tuple[str, int]:
    """The bound address of a SOCKS5 reply (head: its first 4 bytes)."""
    if head[0] != 5 or head[1] != 0:
        raise OSError(f"SOCKS5 reply {head[1]} (RFC 1928 section 6)")
    if head[3] == 1:
        return socket.inet_ntoa(rest[:4]), struct.unpack("!H", rest[4:6])[0]
    return socket.inet_ntop(socket.AF_INET6, rest[:16]), struct.unpack("!H", rest[16:18])[0]


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("the SOCKS5 server closed the connection")
        buf += chunk
    return buf


def socks_open(
    socks: tuple[str, int], cmd: int, host: str, port: int
) -> tuple[socket.socket, tuple[str, int]]:
    """A SOCKS5 control connection after CONNECT (1) or UDP ASSOCIATE (3),
    and the address the server bound."""
    s = socket.create_connection(socks, timeout=30)
    s.sendall(b"\x05\x01\x00")
    if _recv_exact(s, 2) != b"\x05\x00":
        raise OSError("the SOCKS5 server refused no-authentication")
    s.sendall(_socks_request(cmd, host, port))
    head = _recv_exact(s, 4)
    rest = _recv_exact(s, 6 if head[3] == 1 else 18)
    bound = _parse_reply(head, rest)
    s.settimeout(None)
    return s, bound


# ---------------------------------------------------------------- TCP


def _tcp_info(s: socket.socket) -> dict:
    """The receiving socket's view of the connection (linux/tcp.h struct tcp_info)."""
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_U32.size)
    f = TCP_INFO_U32.unpack(raw[: TCP_INFO_U32.size])
    options, wscales, u = f[5], f[6], f[8:]
    return {
        "sack": bool(options & TCPI_OPT_SACK),
        "window_scaling": bool(options & TCPI_OPT_WSCALE),
        "snd_wscale": wscales & 0x0F,
        "rcv_wscale": wscales >> 4,
        "rcv_rtt_ms": u[21] / 1000.0,  # the receiver's RTT estimate (tcpi_rcv_rtt, us)
        "rcv_space": u[22],
        "rcv_mss": u[3],
    }


def sink_tcp(port: int) -> None:
    ls = socket.create_server(("0.0.0.0", port))
    _out({"listening": True})
    ls.settimeout(FIRST_WAIT)
    c, _ = ls.accept()
    total, first, last = 0, None, None
    buf = bytearray(CHUNK)
    while True:
        n = c.recv_into(buf)
        if not n:
            break
        last = time.monotonic()
        if first is None:
            first = last
        total += n
    info = _tcp_info(c)
    c.close()
    seconds = (last - first) if first is not None and last is not None else 0.0
    _out({"proto": "tcp", "bytes": total, "seconds": seconds, "tcp_info": info})


def send_tcp(host: str, port: int, seconds: float, socks: tuple[str, int] | None) -> None:
    if socks:
        s, _bound = socks_open(socks, 1, host, port)
    else:
        s = socket.create_connection((host, port), timeout=30)
        s.settimeout(None)
    data = b"\x5a" * CHUNK
    sent, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(data)
        sent += len(data)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # until the sink has read it all and closed
    s.close()
    _out({"proto": "tcp", "sent_bytes": sent})


# ---------------------------------------------------------------- UDP


def sink_udp(port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    _out({"listening": True})
    seen: set[int] = set()
    received, nbytes, first, last, top = 0, 0, None, None, -1
    s.settimeout(FIRST_WAIT)
    while True:
        try:
            data = s.recv(65535)
        except socket.timeout:
            break
        last = time.monotonic()
        if first is None:
            first = last
            s.settimeout(SILENCE)
        received += 1
        nbytes += len(data)
        if len(data) >= SEQ.size:
            n = SEQ.unpack_from(data)[0]
            seen.add(n)
            top = max(top, n)
    seconds = (last - first) if first is not None and last is not None else 0.0
    _out(
        {
            "proto": "udp",
            "datagrams": received,
            "distinct": len(seen),
            "highest": top,
            "bytes": nbytes,
            "seconds": seconds,
        }
    )


def _udp_header(host: str, port: int) -> bytes:
    """RFC 1928 section 7: RSV RSV FRAG, then the address as in a request."""
    return b"\x00\x00\x00" + _socks_request(0, host, port)[3:]


def send_udp(host: str, port: int, seconds: float, socks: tuple[str, int], size: int) -> None:
    ctl, relay = socks_open(socks, 3, "0.0.0.0", 0)
    u = socket.socket(socket.AF_INET6 if ":" in relay[0] else socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    u.connect(relay)
    head = _udp_header(host, port)
    pad = b"\xa5" * max(0, size - SEQ.size)
    sent, dropped, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(64):
            try:
                u.send(head + SEQ.pack(sent) + pad)
                sent += 1
            except OSError:
                dropped += 1  # refused or full: not counted as sent
    time.sleep(0.2)
    ctl.close()
    _out({"proto": "udp", "sent": sent, "send_errors": dropped, "size": size})


# ---------------------------------------------------------------- many connections


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def _echo(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Echo, "0.0.0.0", port, backlog=4096)
    _out({"listening": True})
    async with server:
        await server.serve_forever()


async def _one_conn(socks: tuple[str, int], host: str, port: int, k: int) -> asyncio.StreamWriter:
    r, w = await asyncio.open_connection(*socks)
    w.write(b"\x05\x01\x00" + _socks_request(1, host, port))
    if await r.readexactly(2) != b"\x05\x00":
        raise OSError("no-authentication refused")
    head = await r.readexactly(4)
    _parse_reply(head, await r.readexactly(6 if head[3] == 1 else 18))
    probe = struct.pack("!Q", k)
    w.write(probe)
    if await r.readexactly(8) != probe:
        raise OSError("the echo came back wrong")
    return w


async def _conns(host: str, port: int, count: int, socks: tuple[str, int], hold: bool) -> None:
    # a few at a time, as clients arrive, rather than 1,000 SYNs at once
    gate = asyncio.Semaphore(64)

    async def one(k: int) -> asyncio.StreamWriter:
        async with gate:
            return await asyncio.wait_for(_one_conn(socks, host, port, k), 60)

    t0 = time.monotonic()
    results = await asyncio.gather(*(one(k) for k in range(count)), return_exceptions=True)
    open_ = [w for w in results if isinstance(w, asyncio.StreamWriter)]
    errors = sorted({f"{type(e).__name__}: {e}" for e in results if isinstance(e, BaseException)})
    _out({"open": len(open_), "errors": errors, "seconds": time.monotonic() - t0})
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    if hold:
        await done.wait()
    for w in open_:
        w.close()
    _out({"closed": len(open_)})


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m vpncrypt.bench.proxyload")
    p.add_argument("role", choices=("sink", "send", "echo", "conns"))
    p.add_argument("args", nargs="+")
    p.add_argument("--socks", type=_host_port, default=None)
    p.add_argument("--size", type=int, default=1200)
    p.add_argument("--no-hold", action="store_true", help="conns: close them at once")
    a = p.parse_args(argv)
    if a.role == "sink":
        (sink_tcp if a.args[0] == "tcp" else sink_udp)(int(a.args[1]))
    elif a.role == "send" and a.args[0] == "tcp":
        send_tcp(a.args[1], int(a.args[2]), float(a.args[3]), a.socks)
    elif a.role == "send":
        send_udp(a.args[1], int(a.args[2]), float(a.args[3]), a.socks, a.size)
    elif a.role == "echo":
        _raise_nofile(8192)
        asyncio.run(_echo(int(a.args[0])))
    else:
        _raise_nofile(int(a.args[2]) + 256)
        asyncio.run(_conns(a.args[0], int(a.args[1]), int(a.args[2]), a.socks, not a.no_hold))


if __name__ == "__main__":
    main()
