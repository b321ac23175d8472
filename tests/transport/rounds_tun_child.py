"""Run by tests/transport/test_rounds.py as `unshare --net python3 THIS`: a
namespace of its own (it goes away with this process), a TUN rt0 with
offloads (10.0.0.2/24, the peer 10.0.0.1 behind it), and the rounds in C
against the rounds composed in Python:
  - receive: one TCP flow's segments from the peer, opened and written to
    the TUN coalesced into one super-packet by both paths;
  - send: a UDP GSO burst from this side's kernel read from the TUN (one
    super-packet, split), sealed and sent, the same by both paths;
  - send errors on a path of a veth with a slow qdisc and an MTU of 1280: a
    partial send (EAGAIN: the socket's buffer is full) and GSO segments
    above the path MTU (EMSGSIZE: sent again without GSO, and GSO turned off
    on the socket), the same by both paths.
Prints "ok" at the end; any mismatch is an AssertionError."""

import errno
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.getcwd())

from vpncrypt._native import ffi, lib  # noqa: E402
from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket, open_tun  # noqa: E402
from vpncrypt.transport import new_table  # noqa: E402

from tests.dataplane.tun_child import csum, ipv4  # noqa: E402
from tests.transport.helpers import KEY_AB, KEY_BA, install, message  # noqa: E402
from tests.transport.test_rounds import ComposedTun, ComposedUdp, received, udp_socket  # noqa: E402

UDP_SEGMENT = 103


def tcp_segment(seq: int, payload: bytes, ident: int) -> bytes:
    src, dst = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
    tcp = struct.pack("!HHIIBBHHH", 40000, 5001, seq, 1, 5 << 4, 0x10, 65535, 0, 0) + payload
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    return ipv4(6, "10.0.0.1", "10.0.0.2", tcp, ident)


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def table(initiator: bool, endpoint=None, route="10.0.0.1/32"):
    t = new_table("native")
    pid = t.add_peer()
    t.route_add(pid, route)
    if endpoint:
        t.set_endpoint(pid, endpoint)
    if initiator:
        install(t, pid, 5, 7, KEY_AB, KEY_BA, True)
    else:
        install(t, pid, 7, 5, KEY_BA, KEY_AB, False)
    return t


def main() -> None:
    sh("ip", "link", "set", "lo", "up")
    fd, name = open_tun("rt0", vnet_hdr=True)
    sh("ip", "addr", "add", "10.0.0.2/24", "dev", name)
    sh("ip", "link", "set", name, "up", "mtu", "1500")
    native_tun = TunBatch(fd, mtu=1500, batch=64)
    assert native_tun.vnet_hdr and native_tun.gro_flags, native_tun.offloads
    composed_tun = ComposedTun(fd, mtu=1500, batch=64, _granted=native_tun.offloads)

    # receive: 8 in-flow TCP segments -> one coalesced write on both paths
    segs = [tcp_segment(1000 + 1000 * i, bytes([i]) * 1000, 77 + i) for i in range(8)]
    src = udp_socket()
    results = []
    for tun, cls in ((native_tun, UdpBatchSocket), (composed_tun, ComposedUdp)):
        b_table = table(False)
        sock = udp_socket()
        udp = cls(sock, batch=64)
        batch = b_table.batch(64, 2048)
        for c, p in enumerate(segs):
            src.sendto(message(KEY_AB, 7, c, p), sock.getsockname())
        before = (tun.tx_stats.writes, tun.tx_stats.coalesced)
        n = batch.receive(udp, tun, 1.0)
        io = batch.io
        after = (tun.tx_stats.writes, tun.tx_stats.coalesced)
        results.append(
            (n, io.delivered, io.written, io.write_errno, after[0] - before[0], after[1] - before[1])
        )
        assert batch._rx_native == (cls is UdpBatchSocket)
        sock.close()
    assert results[0] == results[1], results
    assert results[0] == (8, 8, 8, 0, 1, 7), results

    # send: one UDP GSO burst of 3 segments from the kernel, read, split, sealed
    sink = udp_socket()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("10.0.0.2", 40001))
    sent = []
    for tun, cls in ((native_tun, UdpBatchSocket), (composed_tun, ComposedUdp)):
        a_table = table(True, sink.getsockname())
        sock = udp_socket()
        udp = cls(sock, batch=64)
        batch = a_table.batch(64, 2048)
        drain_tun(native_tun)
        sender.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 500)
        sender.sendto(b"s" * 1500, ("10.0.0.1", 9))
        n = 0
        for _ in range(50):
            n += batch.send(tun, udp, 2.0)
            if n >= 3:
                break
            os.sched_yield()
        io = batch.io
        got = [d for d, _ in received(sink)]
        sent.append((n, io.sealed, io.sent, [len(d) for d in got]))
        if tun.offloads & lib.VC_TUN_OFFLOAD_USO:  # the kernel wrote one super-packet; the round split it
            assert tun.rx_stats.superpackets == 1 and tun.rx_stats.segments == 3
        opened = table(False, route="10.0.0.2/32").open([(d, ("127.0.0.1", 1)) for d in got], 2.0).packets
        assert [p[28:] for p in opened] == [b"s" * 500] * 3, opened
        for p in opened:  # the split completed each segment's checksum
            pseudo = p[12:20] + struct.pack("!BBH", 0, 17, len(p) - 20)
            assert csum(pseudo + p[20:]) == 0
        sock.close()
    assert sent[0] == sent[1], sent
    assert sent[0][0] == 3, sent
    send_errors()
    print("ok")


def send_errors() -> None:
    sh("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
    sh("ip", "link", "set", "v1", "up")
    sh("ip", "link", "set", "v0", "up", "mtu", "1280")
    sh("ip", "addr", "add", "10.1.0.1/24", "dev", "v0")
    sh("ip", "neigh", "add", "10.1.0.9", "lladdr", "02:00:00:00:00:09", "dev", "v0")
    res = []
    for cls in (UdpBatchSocket, ComposedUdp):
        out = []
        for size, count, gso in ((1000, 20, False), (1400, 4, True)):
            # 8 kbit/s: what the socket sends stays queued (and charged to its buffer);
            # a new one for each case, so each starts alike
            sh(
                "tc",
                "qdisc",
                "replace",
                "dev",
                "v0",
                "root",
                "tbf",
                "rate",
                "8kbit",
                "burst",
                "1600",
                "limit",
                "10000000",
            )
            a_table = table(True, ("10.1.0.9", 9), route="10.1.0.0/24")
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("10.1.0.1", 0))
            if not gso:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            udp = cls(sock, batch=64)
            udp.gso = gso and udp.gso
            batch = a_table.batch(64, 2048)
            packets = [ipv4(17, "10.0.0.2", "10.1.0.9", bytes(size - 20), 1) for _ in range(count)]
            slab = ffi.new("uint8_t[]", b"".join(packets))
            off = ffi.new("uint32_t[]", [i * size for i in range(count)])
            lens = ffi.new("uint32_t[]", [size] * count)
            k = batch.seal_send(slab, memoryview(ffi.buffer(slab)), off, lens, count, udp, 2.0)
            io = batch.io
            out.append((k, io.sealed, io.sent, io.send_errno, io.gso_off, udp.gso))
            sock.close()
        res.append(out)
    # how many go before the buffer is full depends on when the qdisc lets
    # the first one out: the same outcome, not the same count
    for (k, sealed, sent, err, gso_off, gso), gso_case in res:
        assert k == sealed == 20 and 0 < sent < 20 and err == errno.EAGAIN and not gso_off, res
        assert gso_case == (4, 4, 4, errno.EMSGSIZE, 1, False), res


def drain_tun(tun):
    """What the kernel sent on its own (router solicitations and the like)."""
    while tun.read()[0]:
        pass


if __name__ == "__main__":
    main()
