"""Loopback datagram rate of the batch UDP paths vs a plain Python loop.

    python3 -m tests.benchlab.iobench [--size 1500] [--count 200000] [--runs 5] [--batch 64]

One thread sends a batch to 127.0.0.1 and then receives it (loopback delivers
during the send), so each figure is the combined send+receive cost per
datagram on one core.  Prints the median of --runs runs, datagrams/s.
"""

import argparse
import socket
import statistics
import time

from vpncrypt._native import ffi
from vpncrypt.dataplane.io import UdpBatchSocket, endpoint_from_addr
from vpncrypt.dataplane.sockopts import force_buffers


def _pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        force_buffers(s, 16 << 20)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
    return a, b


def run_python(size, count, batch):
    a, b = _pair()
    dst = b.getsockname()
    data = bytes(size)
    buf = bytearray(65536)
    sendto, recv_into = a.sendto, b.recv_into
    got = 0
    t = time.perf_counter()
    while got < count:
        for _ in range(batch):
            sendto(data, dst)
        for _ in range(batch):
            try:
                recv_into(buf)
            except BlockingIOError:
                break
            got += 1
    dt = time.perf_counter() - t
    a.close(), b.close()
    return got / dt


def run_native(size, count, batch, gso, gro):
    a, b = _pair()
    tx = UdpBatchSocket(a, batch=batch, gso=gso, gro=False, mtu=size)
    rx = UdpBatchSocket(b, batch=batch, gro=gro, mtu=size)
    if gso and not tx.gso or gro and not rx.gro:
        raise SystemExit("UDP GSO/GRO not available")
    slab = ffi.new("uint8_t[]", size * batch)
    off = ffi.new("uint32_t[]", [i * size for i in range(batch)])
    lens = ffi.new("uint32_t[]", [size] * batch)
    eps = ffi.new("vc_endpoint[]", batch)
    for i in range(batch):
        endpoint_from_addr(b.getsockname(), eps + i)
    send, recv = tx.send, rx.recv
    got = 0
    t = time.perf_counter()
    while got < count:
        sent, _ = send(slab, off, lens, eps, batch)
        want = got + sent
        while got < want:
            n = recv()[0]
            if n == 0:
                break
            got += n
    dt = time.perf_counter() - t
    a.close(), b.close()
    return got / dt


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m tests.benchlab.iobench", description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1500)
    p.add_argument("--count", type=int, default=200000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    o = p.parse_args(argv)
    modes = [
        ("python sendto/recv_into loop", lambda: run_python(o.size, o.count, o.batch)),
        ("sendmmsg -> recvmmsg", lambda: run_native(o.size, o.count, o.batch, False, False)),
        ("GSO sendmmsg -> recvmmsg", lambda: run_native(o.size, o.count, o.batch, True, False)),
        ("GSO sendmmsg -> GRO recvmmsg", lambda: run_native(o.size, o.count, o.batch, True, True)),
    ]
    print(f"{o.size}-byte datagrams on 127.0.0.1, batch {o.batch}, {o.count} per run, median of {o.runs}")
    base = None
    for name, fn in modes:
        rates = [fn() for _ in range(o.runs)]
        med = statistics.median(rates)
        base = base or med
        gbit = med * o.size * 8 / 1e9
        print(f"  {name:32s} {med / 1e3:9.0f} kdgram/s  {gbit:6.2f} Gbit/s  x{med / base:.1f}")


if __name__ == "__main__":
    main()
