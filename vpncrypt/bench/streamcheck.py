"""Byte-checked TCP and UDP streams for `vpncrypt bench tunnel` (iperf3 checks
nothing it carries).  Run in the two network namespaces of the bench:

    python -m vpncrypt.bench.streamcheck recv tcp|udp HOST PORT BYTES SEED [TIMEOUT]
    python -m vpncrypt.bench.streamcheck send tcp|udp HOST PORT BYTES SEED

The payload is a pseudo-random byte stream from SEED (random.Random), the
same on both ends.  TCP: the receiver compares every byte in order.  UDP: each
datagram carries its sequence number and UDP_PAYLOAD bytes of the stream at
that sequence number; the receiver checks each one it gets (no corruption, no
duplicate) and counts the lost ones; the sender paces itself so that a
working tunnel loses none.  The receiver prints one JSON line:
{"proto", "bytes", "checked", "corrupt", "duplicates", "lost", "ok"}.
"""
import json
import random
import socket
import struct
import sys
import time

UDP_PAYLOAD = 1200          # fits any tunnel MTU the bench allows (576 + ...)
UDP_BURST = 32              # datagrams between pacing pauses


def stream(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _family(host: str):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def send_tcp(host, port, data):
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)                     # the receiver closes once it has checked


def recv_tcp(host, port, data, timeout):
    ls = socket.socket(_family(host), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    print("listening", file=sys.stderr, flush=True)
    ls.settimeout(timeout)
    c, _ = ls.accept()
    c.settimeout(timeout)
    view, pos, corrupt = memoryview(data), 0, 0
    buf = bytearray(1 << 20)
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        end = min(pos + n, len(data))
        if bytes(buf[:end - pos]) != view[pos:end] or pos + n > len(data):
            corrupt += 1
        pos += n
    c.close()
    ls.close()
    return {"proto": "tcp", "bytes": len(data), "checked": min(pos, len(data)),
            "corrupt": corrupt, "duplicates": 0, "lost": max(0, len(data) - pos),
            "ok": corrupt == 0 and pos == len(data)}


def _datagrams(data):
    count = (len(data) + UDP_PAYLOAD - 1) // UDP_PAYLOAD
    return count, lambda i: struct.pack("!I", i) + data[i * UDP_PAYLOAD:(i + 1) * UDP_PAYLOAD]


def send_udp(host, port, data):
    count, gram = _datagrams(data)
    with socket.socket(_family(host), socket.SOCK_DGRAM) as s:
        for i in range(count):
            s.sendto(gram(i), (host, port))
            if i % UDP_BURST == UDP_BURST - 1:
                time.sleep(0.0005)
        for _ in range(3):            # end markers (lost ones are harmless)
            s.sendto(b"END", (host, port))
            time.sleep(0.05)


def recv_udp(host, port, data, timeout):
    count, gram = _datagrams(data)
    s = socket.socket(_family(host), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((host, port))
    print("listening", file=sys.stderr, flush=True)
    seen = bytearray(count)
    corrupt = dups = checked = 0
    s.settimeout(timeout)
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            break
        if d == b"END":
            break
        s.settimeout(2.0)            # once traffic flows, a silence of 2 s ends it
        if len(d) < 4:
            corrupt += 1
            continue
        i = struct.unpack("!I", d[:4])[0]
        if i >= count or d != gram(i):
            corrupt += 1
        elif seen[i]:
            dups += 1
        else:
            seen[i] = 1
            checked += len(d) - 4
    s.close()
    lost = count - sum(seen)
    return {"proto": "udp", "bytes": len(data), "checked": checked, "corrupt": corrupt,
            "duplicates": dups, "lost": lost, "ok": corrupt == 0 and dups == 0}


def main(argv):
    if len(argv) < 6 or argv[0] not in ("send", "recv") or argv[1] not in ("tcp", "udp"):
        print(__doc__, file=sys.stderr)
        return 2
    role, proto, host, port, nbytes, seed = argv[:6]
    timeout = float(argv[6]) if len(argv) > 6 else 60.0
    data = stream(int(nbytes), int(seed))
    if role == "send":
        (send_tcp if proto == "tcp" else send_udp)(host, int(port), data)
        return 0
    res = (recv_tcp if proto == "tcp" else recv_udp)(host, int(port), data, timeout)
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
