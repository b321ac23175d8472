"""vpncrypt.bench.streamcheck, the byte check of `bench tunnel` and of the
offload tests, on loopback: an intact stream passes (TCP in odd chunks, UDP
in fixed and mixed sizes and as UDP_SEGMENT super-datagrams); a flipped byte,
a short stream, a duplicated, foreign or mislabelled datagram fail it; UDP
loss is counted, not failed."""

import socket
import struct
import threading
import time

import pytest

from vpncrypt.bench import streamcheck as sc


def free_port(kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def args(role, proto, port, count, seed, *extra):
    return sc._args([role, proto, "127.0.0.1", str(port), str(count), str(seed), "--timeout", "10", *extra])


def receive(proto, count, seed, *extra):
    port = free_port(socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    out = {}
    fn = sc.recv_tcp if proto == "tcp" else sc.recv_udp
    t = threading.Thread(target=lambda: out.update(fn(args("recv", proto, port, count, seed, *extra))))
    t.start()
    time.sleep(0.3)
    return port, t, out


def test_intact_tcp_stream_passes():
    port, t, out = receive("tcp", 300_000, 7)
    sc.send_tcp(args("send", "tcp", port, 300_000, 7))
    t.join(15)
    assert out == {
        "proto": "tcp",
        "expected": 300_000,
        "checked": 300_000,
        "datagrams": 0,
        "corrupt": 0,
        "duplicates": 0,
        "lost": 0,
        "reordered": 0,
        "ok": True,
    }


@pytest.mark.parametrize("extra", [(), ("--size", "1200"), ("--gso", "1000")])
def test_intact_udp_stream_passes(extra):
    port, t, out = receive("udp", 400, 5, *extra)
    sc.send_udp(args("send", "udp", port, 400, 5, *extra))
    t.join(15)
    assert (out["ok"], out["corrupt"], out["duplicates"], out["lost"], out["datagrams"]) == (
        True,
        0,
        0,
        0,
        400,
    ), out
    if extra[:1] == ("--size",):
        assert out["checked"] == 400 * 1200


def test_tcp_stream_across_pattern_blocks_passes():
    count = 3 * 1024 * 1024 + 5  # the pattern is made a MiB at a time
    port, t, out = receive("tcp", count, 9)
    sc.send_tcp(args("send", "tcp", port, count, 9))
    t.join(15)
    assert (out["ok"], out["checked"], out["corrupt"]) == (True, count, 0), out


def test_a_huge_tcp_count_is_checked_not_refused():
    # 2**30 bytes: more than one call can make at once; a short stream of it
    # is reported as lost bytes, its first bytes checked
    count = 2**30
    port, t, out = receive("tcp", count, 4)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(sc.tcp_stream(1000, 4))
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
    t.join(15)
    assert (out["checked"], out["corrupt"], out["lost"], out["ok"]) == (1000, 0, 2**30 - 1000, False), out


def test_tcp_flipped_byte_or_short_stream_fails():
    data = sc.tcp_stream(300_000, 7)
    for bad, want in (
        (data[:1000] + bytes([data[1000] ^ 1]) + data[1001:], {"corrupt": 1}),
        (data[:-1], {"lost": 1}),
        (data + b"x", {"corrupt": 1}),
    ):
        port, t, out = receive("tcp", 300_000, 7)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(bad)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
        t.join(15)
        assert out["ok"] is False
        for k, v in want.items():
            assert out[k] == v, out


def test_udp_loss_duplicates_and_corruption_are_counted():
    count = 40
    port, t, out = receive("udp", count, 3)
    dst = ("127.0.0.1", port)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(count):
            if i in (5, 6):
                continue  # lost
            g = sc.datagram(3, i, 500)
            if i == 9:
                g = g[:-1] + bytes([g[-1] ^ 0x80])  # corrupted
            if i == 10:
                g = g[:4] + struct.pack("!H", 499) + g[6:]  # length field wrong
            s.sendto(g, dst)
            if i == 11:
                s.sendto(g, dst)  # duplicated
            time.sleep(0.0002)
        s.sendto(sc.datagram(3, count + 3, 50), dst)  # beyond the stream
        s.sendto(b"x" * 5, dst)  # too short for a header
        s.sendto(b"END", dst)
    t.join(15)
    assert out["ok"] is False
    # 9, 10, the foreign and the short one are corrupt; 5, 6, 9, 10 never arrived intact
    assert (out["corrupt"], out["duplicates"], out["lost"]) == (4, 1, 4), out


def test_udp_datagrams_out_of_order_are_counted_not_failed():
    """Datagram 3 after 4 and 5, and 8 after 9: two came after a later one."""
    count = 12
    port, t, out = receive("udp", count, 4)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in (0, 1, 2, 4, 5, 3, 6, 7, 9, 8, 10, 11):
            s.sendto(sc.datagram(4, i, 200), ("127.0.0.1", port))
            time.sleep(0.0002)
        s.sendto(b"END", ("127.0.0.1", port))
    t.join(15)
    assert (out["ok"], out["reordered"], out["lost"], out["datagrams"]) == (True, 2, 0, 12), out


def test_udp_stream_of_which_nothing_arrived_is_not_ok():
    """Every datagram lost (a tunnel that carries no UDP, a receiver on the
    wrong side): nothing was checked, so the check fails (it said ok before:
    outside review); some loss alone is counted, not a failure."""
    port, t, out = receive("udp", 20, 5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"END", ("127.0.0.1", port))
    t.join(15)
    assert (out["ok"], out["datagrams"], out["lost"]) == (False, 0, 20), out
    port, t, out = receive("udp", 20, 5)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(20):
            if i != 7:
                s.sendto(sc.datagram(5, i, 300), ("127.0.0.1", port))
                time.sleep(0.0002)
        s.sendto(b"END", ("127.0.0.1", port))
    t.join(15)
    assert (out["ok"], out["datagrams"], out["lost"]) == (True, 19, 1), out
