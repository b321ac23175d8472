"""vpncrypt.bench.streamcheck, the byte check of `bench tunnel`, on loopback:
an intact stream passes; a flipped byte, a short stream, a duplicated or
foreign datagram fail it; UDP loss is counted, not failed."""
import socket
import struct
import threading
import time

import pytest

from vpncrypt.bench import streamcheck as sc

N = 300_000


def free_port(kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive(proto, port, data):
    out = {}
    fn = sc.recv_tcp if proto == "tcp" else sc.recv_udp
    t = threading.Thread(target=lambda: out.update(fn("127.0.0.1", port, data, 10)))
    t.start()
    time.sleep(0.3)
    return t, out


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_intact_stream_passes(proto):
    data = sc.stream(N, 7)
    port = free_port(socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    t, out = receive(proto, port, data)
    (sc.send_tcp if proto == "tcp" else sc.send_udp)("127.0.0.1", port, data)
    t.join(15)
    assert out == {"proto": proto, "bytes": N, "checked": N, "corrupt": 0, "duplicates": 0,
                   "lost": 0, "ok": True}


def test_tcp_flipped_byte_or_short_stream_fails():
    data = sc.stream(N, 7)
    for bad, want in ((data[:1000] + bytes([data[1000] ^ 1]) + data[1001:], {"corrupt": 1}),
                      (data[:-1], {"lost": 1})):
        port = free_port(socket.SOCK_STREAM)
        t, out = receive("tcp", port, data)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(bad)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
        t.join(15)
        assert out["ok"] is False
        for k, v in want.items():
            assert out[k] == v, out


def test_udp_loss_duplicates_and_corruption_are_counted():
    data = sc.stream(N, 3)
    count = -(-N // 1200)                      # 1200-byte datagrams
    port = free_port(socket.SOCK_DGRAM)
    t, out = receive("udp", port, data)

    def gram(i):
        return struct.pack("!I", i) + data[i * 1200:(i + 1) * 1200]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(count):
            if i == 5:
                continue                                       # lost
            g = gram(i)
            if i == 9:
                g = g[:-1] + bytes([g[-1] ^ 0x80])             # corrupted
            s.sendto(g, ("127.0.0.1", port))
            if i == 11:
                s.sendto(g, ("127.0.0.1", port))               # duplicated
            time.sleep(0.0002)
        s.sendto(struct.pack("!I", count + 3) + b"x" * 10, ("127.0.0.1", port))   # foreign
        s.sendto(b"END", ("127.0.0.1", port))
    t.join(15)
    assert out["ok"] is False
    assert (out["corrupt"], out["duplicates"], out["lost"]) == (2, 1, 2)
