"""Byte-checked streams through a tunnel, for the offload tests: run inside a
namespace as `python -m tests.interop.streams ROLE ...`.

    recv tcp HOST PORT BYTES SEED [MSS]      prints {"listening": true}, then a result
    send tcp HOST PORT BYTES SEED [MSS]      writes in odd-sized chunks
    recv udp HOST PORT COUNT SEED            prints {"listening": true}, then a result
    send udp HOST PORT COUNT SEED GSO        UDP_SEGMENT super-datagrams of segments
                                             of GSO bytes (0: plain datagrams), sizes
                                             varied so that some end in a short segment

TCP: the receiver compares every byte in order with the stream from SEED.
UDP: every datagram carries (sequence, length, crc-free pattern from SEED and
sequence); the receiver checks each one and counts lost and duplicated ones.
The result line: {"bytes", "datagrams", "corrupt", "duplicates", "lost", "ok"}.
"""
import json
import random
import socket
import struct
import sys
import time

SOL_UDP = 17
UDP_SEGMENT = 103
TCP_MAXSEG = getattr(socket, "TCP_MAXSEG", 2)


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def pattern(seed: int, seq: int, n: int) -> bytes:
    return random.Random(seed * 1_000_003 + seq).randbytes(n)


def recv_tcp(host, port, nbytes, seed, mss):
    data = random.Random(seed).randbytes(nbytes)
    ls = socket.socket(family(host), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if mss:
        ls.setsockopt(socket.IPPROTO_TCP, TCP_MAXSEG, mss)
    ls.bind((host, port))
    ls.listen(1)
    print(json.dumps({"listening": True}), flush=True)
    ls.settimeout(60)
    c, _ = ls.accept()
    c.settimeout(60)
    pos = corrupt = 0
    buf = bytearray(1 << 18)
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        if pos + n > nbytes or buf[:n] != data[pos:pos + n]:
            corrupt += 1
        pos += n
    c.sendall(b"k")
    c.close()
    return {"bytes": pos, "corrupt": corrupt, "lost": max(0, nbytes - pos),
            "ok": corrupt == 0 and pos == nbytes}


def send_tcp(host, port, nbytes, seed, mss):
    data = random.Random(seed).randbytes(nbytes)
    s = socket.socket(family(host), socket.SOCK_STREAM)
    if mss:
        s.setsockopt(socket.IPPROTO_TCP, TCP_MAXSEG, mss)
    s.settimeout(60)
    s.connect((host, port))
    rng = random.Random(seed + 1)
    pos = 0
    while pos < nbytes:
        n = rng.choice([1, 17, 1000, 1448, 4097, 65536, 200_000])
        s.sendall(data[pos:pos + n])
        pos += n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
    return {"sent": nbytes}


def datagram(seed: int, seq: int, n: int) -> bytes:
    return struct.pack("!IH", seq, n) + pattern(seed, seq, n - 6)


def send_udp(host, port, count, seed, gso):
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.connect((host, port))
    rng = random.Random(seed + 2)
    seq = 0
    while seq < count:
        if gso:
            k = min(count - seq, rng.choice([1, 2, 7, 16, 40]))
            # all segments of one size but the last, which may be shorter
            sizes = [gso] * (k - 1) + [rng.choice([gso, gso - 1, 6 + rng.randrange(gso - 6)])]
            buf = b"".join(datagram(seed, seq + i, n) for i, n in enumerate(sizes))
            s.setsockopt(SOL_UDP, UDP_SEGMENT, gso)
            s.send(buf)
            seq += k
            time.sleep(0.0005)        # paced: a working tunnel loses nothing
        else:
            s.send(datagram(seed, seq, rng.choice([6, 100, 1000, 1300])))
            seq += 1
            if seq % 32 == 0:
                time.sleep(0.0005)
    for _ in range(3):             # end markers (the receiver leaves at the first)
        try:
            s.send(b"END")
        except ConnectionRefusedError:
            break
        time.sleep(0.05)
    s.close()
    return {"sent": count}


def recv_udp(host, port, count, seed):
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((host, port))
    print(json.dumps({"listening": True}), flush=True)
    s.settimeout(30)
    seen = bytearray(count)
    corrupt = dups = nbytes = 0
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if d == b"END":
            break
        s.settimeout(3)
        if len(d) < 6:
            corrupt += 1
            continue
        seq, n = struct.unpack("!IH", d[:6])
        if seq >= count or n != len(d) or d != datagram(seed, seq, n):
            corrupt += 1
        elif seen[seq]:
            dups += 1
        else:
            seen[seq] = 1
            nbytes += n
    lost = count - sum(seen)
    return {"bytes": nbytes, "datagrams": sum(seen), "corrupt": corrupt, "duplicates": dups,
            "lost": lost, "ok": corrupt == 0 and dups == 0}


def main(argv):
    role, proto, host, port, n, seed = argv[:6]
    extra = int(argv[6]) if len(argv) > 6 else 0
    port, n, seed = int(port), int(n), int(seed)
    if proto == "tcp":
        res = (recv_tcp if role == "recv" else send_tcp)(host, port, n, seed, extra)
    elif role == "recv":
        res = recv_udp(host, port, n, seed)
    else:
        res = send_udp(host, port, n, seed, extra)
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
