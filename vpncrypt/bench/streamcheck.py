"""Byte-checked TCP and UDP streams through a tunnel (iperf3 checks nothing it
carries), for `vpncrypt bench tunnel` and the offload tests.  Run in the two
network namespaces:

    python -m vpncrypt.bench.streamcheck recv|send tcp HOST PORT BYTES SEED [--mss N]
    python -m vpncrypt.bench.streamcheck recv|send udp HOST PORT DATAGRAMS SEED
                                         [--size N] [--gso N]
    (recv also takes --timeout S: how long to wait for the first byte; default 60)

Both ends derive the same pseudo-random bytes from SEED.  TCP: the sender
writes BYTES in odd-sized chunks, the receiver compares every byte in order.
UDP: datagram i is (i: 4 bytes, its length: 2 bytes, then bytes derived from
SEED and i); every datagram is --size bytes, or by default a mix of 6, 100,
1000 and 1300.  With --gso N the sender hands the kernel UDP_SEGMENT
super-datagrams of N-byte segments, some ending in a shorter one.  The
receiver checks each datagram it gets (no corruption, no duplicate) and counts
the missing ones and those that came after a later one of the stream
("reordered": one flow, which a tunnel carries in order); the sender paces
itself so that a working tunnel loses next to none.

recv prints {"listening": true} once bound, then one result line:
{"proto", "expected", "checked", "datagrams", "corrupt", "duplicates", "lost", "reordered", "ok"}
(expected and lost count bytes for TCP, datagrams for UDP; checked is bytes).
"""

import argparse
import json
import random
import socket
import struct
import sys
import time

SOL_UDP = 17
UDP_SEGMENT = 103
TCP_MAXSEG = getattr(socket, "TCP_MAXSEG", 2)
HEAD = struct.Struct("!IH")
UDP_SIZES = (6, 100, 1000, 1300)
PACE_EVERY = 32  # datagrams (or super-datagrams) between pauses
PACE_SECONDS = 0.0005
SILENCE = 3.0  # once traffic flows, this long without any ends a UDP receive


def _family(host: str):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class TcpPattern:
    """The TCP stream's bytes, made a block at a time (never the whole stream
    in memory: any count works), the same on both sides for one seed."""

    BLOCK = 1 << 20

    def __init__(self, nbytes: int, seed: int):
        self.nbytes, self.seed = nbytes, seed
        self._blocks: dict = {}

    def _block(self, i: int) -> bytes:
        b = self._blocks.get(i)
        if b is None:
            if len(self._blocks) > 2:
                self._blocks.clear()
            n = min(self.BLOCK, self.nbytes - i * self.BLOCK)
            b = self._blocks[i] = random.Random(self.seed * 1_000_003 + i).randbytes(n)
        return b

    def read(self, pos: int, n: int) -> bytes:
        """Bytes pos .. pos+n of the stream (fewer at its end)."""
        end = min(pos + n, self.nbytes)
        out = []
        while pos < end:
            i, o = divmod(pos, self.BLOCK)
            chunk = self._block(i)[o : o + end - pos]
            out.append(chunk)
            pos += len(chunk)
        return b"".join(out)


def tcp_stream(nbytes: int, seed: int) -> bytes:
    return TcpPattern(nbytes, seed).read(0, nbytes)


def datagram(seed: int, seq: int, n: int) -> bytes:
    return HEAD.pack(seq, n) + random.Random(seed * 1_000_003 + seq).randbytes(n - HEAD.size)


def _result(proto, expected, checked, datagrams, corrupt, dups, lost, reordered=0):
    return {
        "proto": proto,
        "expected": expected,
        "checked": checked,
        "datagrams": datagrams,
        "corrupt": corrupt,
        "duplicates": dups,
        "lost": lost,
        "reordered": reordered,
        # UDP may lose datagrams on the way (it is counted, not a failure),
        # but a stream of which not one datagram arrived checked nothing
        "ok": corrupt == 0 and dups == 0 and (lost == 0 if proto == "tcp" else datagrams > 0),
    }


def send_tcp(a):
    data = TcpPattern(a.count, a.seed)
    s = socket.socket(_family(a.host), socket.SOCK_STREAM)
    if a.mss:
        s.setsockopt(socket.IPPROTO_TCP, TCP_MAXSEG, a.mss)
    s.settimeout(60)
    s.connect((a.host, a.port))
    rng, pos = random.Random(a.seed + 1), 0
    while pos < a.count:
        n = rng.choice((1, 17, 1000, 1448, 4097, 65536, 200_000))
        s.sendall(data.read(pos, n))
        pos += n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the receiver answers once it has checked everything
    s.close()


def recv_tcp(a):
    data = TcpPattern(a.count, a.seed)
    ls = socket.socket(_family(a.host), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.mss:
        ls.setsockopt(socket.IPPROTO_TCP, TCP_MAXSEG, a.mss)
    ls.bind((a.host, a.port))
    ls.listen(1)
    print(json.dumps({"listening": True}), flush=True)
    ls.settimeout(a.timeout)
    c, _ = ls.accept()
    c.settimeout(a.timeout)
    pos = corrupt = 0
    buf = bytearray(1 << 20)
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        if pos + n > a.count or buf[:n] != data.read(pos, n):
            corrupt += 1
        pos += n
    c.sendall(b"k")
    c.close()
    ls.close()
    return _result("tcp", a.count, min(pos, a.count), 0, corrupt, 0, max(0, a.count - pos))


def send_udp(a):
    s = socket.socket(_family(a.host), socket.SOCK_DGRAM)
    s.connect((a.host, a.port))
    rng = random.Random(a.seed + 2)
    seq = sends = 0
    while seq < a.count:
        if a.gso:
            k = min(a.count - seq, rng.choice((1, 2, 7, 16, 40)))
            # every segment a full a.gso bytes but the last, which may be shorter
            last = rng.choice((a.gso, a.gso - 1, HEAD.size + rng.randrange(a.gso - HEAD.size)))
            sizes = [a.gso] * (k - 1) + [last]
            s.setsockopt(SOL_UDP, UDP_SEGMENT, a.gso)
            s.send(b"".join(datagram(a.seed, seq + i, n) for i, n in enumerate(sizes)))
        else:
            k = 1
            s.send(datagram(a.seed, seq, a.size or rng.choice(UDP_SIZES)))
        seq += k
        sends += 1
        if a.gso or sends % PACE_EVERY == 0:
            time.sleep(PACE_SECONDS)
    for _ in range(3):  # end markers (the receiver leaves at the first)
        try:
            s.send(b"END")
        except ConnectionRefusedError:
            break
        time.sleep(0.05)
    s.close()


def recv_udp(a):
    s = socket.socket(_family(a.host), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((a.host, a.port))
    print(json.dumps({"listening": True}), flush=True)
    s.settimeout(a.timeout)
    seen = bytearray(a.count)
    corrupt = dups = checked = reordered = 0
    highest = -1
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if d == b"END":
            break
        s.settimeout(SILENCE)
        if len(d) < HEAD.size:
            corrupt += 1
            continue
        seq, n = HEAD.unpack_from(d)
        if seq >= a.count or n != len(d) or d != datagram(a.seed, seq, n):
            corrupt += 1
        elif seen[seq]:
            dups += 1
        else:
            seen[seq] = 1
            checked += n
            if seq < highest:
                reordered += 1
            highest = max(highest, seq)
    s.close()
    got = sum(seen)
    return _result("udp", a.count, checked, got, corrupt, dups, a.count - got, reordered)


def _args(argv):
    p = argparse.ArgumentParser(
        prog="python -m vpncrypt.bench.streamcheck", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("role", choices=("recv", "send"))
    p.add_argument("proto", choices=("tcp", "udp"))
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("count", type=int, help="bytes (tcp) or datagrams (udp)")
    p.add_argument("seed", type=int)
    p.add_argument("--mss", type=int, default=0)
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--gso", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args(argv)
    if a.size and not HEAD.size <= a.size <= 65507:
        p.error(f"--size must be {HEAD.size}..65507")
    if a.gso and not HEAD.size < a.gso <= 65507:
        p.error(f"--gso must be {HEAD.size + 1}..65507")
    return a


def main(argv):
    a = _args(argv)
    if a.role == "send":
        (send_tcp if a.proto == "tcp" else send_udp)(a)
        return 0
    res = (recv_tcp if a.proto == "tcp" else recv_udp)(a)
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
