"""The outer path's delay and loss for `vpncrypt bench tunnel` (this kernel
has no netem qdisc): a UDP relay between one WireGuard peer and another.

    python -m vpncrypt.bench.delayrelay LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT DELAY_MS LOSS [SEED]

It listens on LISTEN_PORT (all addresses), sends what arrives there to
UPSTREAM from a socket of its own, and what comes back on that socket to the
last sender it heard; each datagram is held DELAY_MS (one way, so the round
trip is twice that) and dropped with probability LOSS, each direction alike,
in order (no reordering), like tests/lab_stack/timed_relay.py's queue but
over UDP sockets.  Prints {"listening": true} once bound; on SIGTERM one line
{"forwarded": N, "dropped": N}.
"""

from __future__ import annotations

import collections
import json
import random
import select
import signal
import socket
import sys
import time

BUF = 8 << 20  # socket buffers: 50 ms of 1 Gbit/s is 6 MB in flight


def _socket(bind: tuple[str, int]) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        s.setsockopt(socket.SOL_SOCKET, opt, BUF)
    s.bind(bind)
    s.setblocking(False)
    return s


def relay(listen_port: int, upstream: tuple[str, int], delay_ms: float, loss: float, seed: int) -> dict:
    front, back = _socket(("0.0.0.0", listen_port)), _socket(("0.0.0.0", 0))
    back.connect(upstream)
    rng, delay = random.Random(seed), delay_ms / 1000.0
    # queue per destination socket: (due time, datagram); the front's
    # destination is the client last heard
    queues: dict[socket.socket, collections.deque] = {front: collections.deque(), back: collections.deque()}
    client: tuple | None = None
    counts = {"forwarded": 0, "dropped": 0}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(json.dumps({"listening": True}), flush=True)
    while not stop:
        now = time.monotonic()
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - now) if due else 0.5
        try:
            readable, _, _ = select.select([front, back], [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for s in readable:
            for _ in range(256):
                try:
                    data, addr = s.recvfrom(65535)
                except (BlockingIOError, ConnectionRefusedError):
                    break
                if s is front:
                    client = addr
                if loss and rng.random() < loss:
                    counts["dropped"] += 1
                    continue
                queues[back if s is front else front].append((now + delay, data))
        for dst, q in queues.items():
            while q and q[0][0] <= now:
                try:
                    if dst is back:
                        dst.send(q[0][1])
                    elif client is not None:
                        dst.sendto(q[0][1], client)
                except BlockingIOError:
                    break  # full: keep it for the next turn
                except OSError:
                    pass  # refused (the peer not up yet): as a lost datagram
                q.popleft()
                counts["forwarded"] += 1
    return counts


def main() -> None:
    port, host, uport, delay_ms, loss = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    counts = relay(int(port), (host, int(uport)), float(delay_ms), float(loss), seed)
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
