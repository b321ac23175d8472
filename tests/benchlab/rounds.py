"""The cost of one data-plane round (Batch.receive / Batch.send) as one
call into C (native/wg_rounds.c) and as the same steps composed in Python,
on loopback UDP and a datagram socketpair standing for the TUN:

    python3 -m tests.benchlab.rounds [--rounds 2000] [--sizes 1,16,64] [--length 1400]

Only the round itself is timed (process CPU time and wall time per round);
making the datagrams, writing the TUN side's packets and draining what was
written happen between rounds.  A benchmark, not a test: the figures are
noisy on a shared machine; run it on a quiet one."""

from __future__ import annotations

import argparse
import socket
import struct
import time
from typing import Any

from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket
from vpncrypt.transport import Session, new_table
from vpncrypt.transport.native import NativeTable

KEY_AB = bytes(range(1, 33))
KEY_BA = bytes(range(101, 133))


class _ComposedUdp(UdpBatchSocket):
    """Overrides recv/send, so the rounds are composed in Python."""

    def recv(self) -> Any:
        return super().recv()

    def send(self, buf: Any, off: Any, lens: Any, ep: Any, n: int) -> Any:
        return super().send(buf, off, lens, ep, n)


class _ComposedTun(TunBatch):
    def read(self) -> Any:
        return super().read()

    def write(self, buf: Any, off: Any, lens: Any, n: int) -> Any:
        return super().write(buf, off, lens, n)


def _packet(src: str, dst: str, length: int) -> bytes:
    """An IPv4 UDP packet of `length` bytes (checksums are not the table's business)."""
    payload = bytes(length - 28)
    udp = struct.pack("!HHHH", 1000, 2000, 8 + len(payload), 0) + payload
    return (
        struct.pack("!BBHHHBBH", 0x45, 0, length, 0, 0x4000, 64, 17, 0)
        + socket.inet_aton(src)
        + socket.inet_aton(dst)
        + udp
    )


def _table(initiator: bool, route: str, endpoint: Any = None) -> tuple[NativeTable, int]:
    t = new_table("native")
    assert isinstance(t, NativeTable)
    pid = t.add_peer()
    t.route_add(pid, route)
    if endpoint is not None:
        t.set_endpoint(pid, endpoint)
    local, remote = (5, 7) if initiator else (7, 5)
    t.reserve_index(local, pid)
    send, recv = (KEY_AB, KEY_BA) if initiator else (KEY_BA, KEY_AB)
    t.install(pid, Session(local, remote, send, recv, initiator), 0.0)
    return t, pid


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            return


def _udp() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    return s


class _Rig:
    """One side's UDP socket, a socketpair for its TUN (far: the kernel's
    end) and a batch of `table`, with the objects of one kind of round."""

    def __init__(self, table: NativeTable, composed: bool, size: int) -> None:
        self.sock = _udp()
        self.near, self.far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (self.near, self.far):
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.udp = (_ComposedUdp if composed else UdpBatchSocket)(self.sock, batch=size, gro=False)
        self.tun = (_ComposedTun if composed else TunBatch)(self.near.fileno(), mtu=1500, batch=size)
        self.batch = table.batch(size, 2048)

    def close(self) -> None:
        for s in (self.sock, self.near, self.far):
            s.close()


def _timed(fn: Any) -> tuple[int, int, int]:
    """(fn's result, process CPU ns, wall ns)."""
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    n = fn()
    return n, time.process_time_ns() - c0, time.perf_counter_ns() - w0


def receive_cost(composed: bool, size: int, length: int, rounds: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per receive round of `size` datagrams."""
    b, _ = _table(False, "10.0.0.1/32")
    rig = _Rig(b, composed, size)
    src = _udp()
    a, _ = _table(True, "10.0.0.2/32", rig.sock.getsockname())
    pkt = _packet("10.0.0.1", "10.0.0.2", length)
    cpu = wall = 0
    for _ in range(rounds):
        for d, _addr in a.seal([pkt] * size, 1.0).datagrams:
            src.sendto(d, rig.sock.getsockname())
        n, c, w = _timed(lambda: rig.batch.receive(rig.udp, rig.tun, 1.0))
        cpu, wall = cpu + c, wall + w
        assert n == size and rig.batch.io.written == size, (n, rig.batch.io.written)
        _drain(rig.far)
    rig.close()
    src.close()
    return cpu / rounds / 1e3, wall / rounds / 1e3


def send_cost(composed: bool, size: int, length: int, rounds: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per send round of `size` packets."""
    sink = _udp()
    sink.setblocking(False)
    a, _ = _table(True, "10.0.0.2/32", sink.getsockname())
    rig = _Rig(a, composed, size)
    pkt = _packet("10.0.0.1", "10.0.0.2", length)
    cpu = wall = 0
    for _ in range(rounds):
        for _i in range(size):
            rig.far.send(pkt)
        n, c, w = _timed(lambda: rig.batch.send(rig.tun, rig.udp, 1.0))
        cpu, wall = cpu + c, wall + w
        assert n == size and rig.batch.io.sent == size, (n, rig.batch.io.sent)
        _drain(sink)
    rig.close()
    sink.close()
    return cpu / rounds / 1e3, wall / rounds / 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python3 -m tests.benchlab.rounds", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--sizes", default="1,16,64", help="messages per round")
    ap.add_argument("--length", type=int, default=1400, help="inner packet bytes")
    args = ap.parse_args(argv)
    print(f"{'round':8} {'batch':>5} {'C cpu µs':>9} {'Py cpu µs':>9} {'C wall µs':>9} {'Py wall µs':>10}")
    for name, fn in (("receive", receive_cost), ("send", send_cost)):
        for size in (int(x) for x in args.sizes.split(",")):
            c_cpu, c_wall = fn(False, size, args.length, args.rounds)
            p_cpu, p_wall = fn(True, size, args.length, args.rounds)
            print(f"{name:8} {size:5} {c_cpu:9.2f} {p_cpu:9.2f} {c_wall:9.2f} {p_wall:10.2f}")


if __name__ == "__main__":
    main()
