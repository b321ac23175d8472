"""Checked UDP streams for the reliability tests (run inside namespaces):

    python3 -m tests.reliability.traffic send HOST PORT RATE SECONDS SIZE [SEED]
    python3 -m tests.reliability.traffic recv PORT SECONDS [SEED]

Datagram i carries i (8 bytes) and then SHA-256(seed, i) repeated to SIZE,
so the receiver proves every byte of every datagram.  It reports how many
arrived, how many distinct, corrupted (any byte wrong) and duplicated (a
sequence number seen before), and the gaps (> 0.2 s without a datagram,
on CLOCK_MONOTONIC, which the test shares) in the stream.  RATE 0: as fast
as it goes.  Each prints one JSON line at the end (recv prints
{"listening": true} first).
"""

import hashlib
import json
import socket
import struct
import sys
import time


def command(*args: object) -> list[str]:
    """The argv that runs this module with `args` (for lab.popen_in / lab.run_in)."""
    return [sys.executable, "-m", "tests.reliability.traffic", *map(str, args)]


def start_recv(lab, side: str, port: int, seconds: float, *seed: object):
    """A receiver in namespace `side`, returned once it listens."""
    p = lab.popen_in(side, *command("recv", port, seconds, *seed))
    assert "listening" in p.stdout.readline(), p.stderr.read()
    return p


def start_send(lab, side: str, host: str, port: int, rate: float, seconds: float, size: int, *seed: object):
    """A sender in namespace `side` (its JSON line comes at the end)."""
    return lab.popen_in(side, *command("send", host, port, rate, seconds, size, *seed))


def body(seq: int, size: int, seed: int) -> bytes:
    head = struct.pack("!Q", seq)
    h = hashlib.sha256(struct.pack("!QQ", seed, seq)).digest()
    rest = size - len(head)
    return head + (h * (rest // 32 + 1))[:rest]


def send(host, port, rate, seconds, size, seed="1"):
    rate, seconds, size, seed = float(rate), float(seconds), int(size), int(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dst = (host, int(port))
    t0 = time.monotonic()
    sent = errors = seq = 0
    while True:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        if rate and seq >= rate * (now - t0):
            time.sleep(min(0.001, seq / rate - (now - t0)))
            continue
        try:
            s.sendto(body(seq, size, seed), dst)
            sent += 1
        except OSError:  # no route while a daemon restarts, ENOBUFS: not sent
            errors += 1
        seq += 1
    print(
        json.dumps(
            {
                "offered": seq,
                "sent": sent,
                "send_errors": errors,
                "seconds": time.monotonic() - t0,
                "first": t0,
            }
        ),
        flush=True,
    )


def recv(port, seconds, seed="1"):
    seconds, seed = float(seconds), int(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("0.0.0.0", int(port)))
    s.settimeout(0.05)
    print(json.dumps({"listening": True}), flush=True)
    seen = set()
    received = corrupted = duplicated = 0
    gaps, last, first = [], None, None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data = s.recv(65535)
        except socket.timeout:
            continue
        now = time.monotonic()
        received += 1
        if len(data) < 8 or data != body(struct.unpack_from("!Q", data)[0], len(data), seed):
            corrupted += 1
            continue
        seq = struct.unpack_from("!Q", data)[0]
        if seq in seen:
            duplicated += 1
            continue
        seen.add(seq)
        if first is None:
            first = now
        if last is not None and now - last > 0.2:
            gaps.append([last, now])
        last = now
    print(
        json.dumps(
            {
                "received": received,
                "unique": len(seen),
                "corrupted": corrupted,
                "duplicated": duplicated,
                "gaps": gaps,
                "first": first,
                "last": last,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    {"send": send, "recv": recv}[sys.argv[1]](*sys.argv[2:])
