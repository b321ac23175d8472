"""A timed packet queue between two AF_UNIX datagram sockets, for the stack lab.

Each datagram is one IP packet. The relay holds each one for DELAY_MS (one way),
drops it with probability LOSS, and never reorders, so the round trip is 2 x delay.
It is shared by the stack prototypes in this folder; nothing of it is product code.
"""

from __future__ import annotations

import collections
import random
import select
import socket
import time
from collections.abc import Callable
from typing import Any


def link() -> tuple[socket.socket, socket.socket]:
    """A packet link: SOCK_SEQPACKET keeps datagram boundaries, and unlike SOCK_DGRAM it is
    not held to net.unix.max_dgram_qlen (10 here), which dropped bursts of 11 packets."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return a, b


def relay(
    a: socket.socket,
    b: socket.socket,
    delay_ms: float,
    loss: float,
    seed: int = 1,
    keep: Callable[[Any], bool] | None = None,
    seconds: float = 1e9,
) -> int:
    """Forward datagrams a<->b with a fixed one-way delay and random loss until either
    closes or SECONDS pass; return the number forwarded. KEEP(address) filters what is read."""
    rng = random.Random(seed)
    delay = delay_ms / 1000.0
    queues: dict[socket.socket, collections.deque[tuple[float, bytes]]] = {
        a: collections.deque(),
        b: collections.deque(),
    }
    peer = {a: b, b: a}
    for s in (a, b):
        s.setblocking(False)
    blocked: set[socket.socket] = set()
    end = time.monotonic() + seconds
    forwarded = 0
    while time.monotonic() < end:
        now = time.monotonic()
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - now) if due else 1.0
        if blocked:
            timeout = min(timeout, 0.001)
        blocked.clear()
        readable, _, _ = select.select([a, b], [], [], timeout)
        now = time.monotonic()
        for s in readable:
            for _ in range(256):
                try:
                    pkt, addr = s.recvfrom(65536)
                except BlockingIOError:
                    break
                except OSError:
                    return forwarded
                if not pkt:
                    return forwarded
                if keep is not None and not keep(addr):
                    continue
                if loss and rng.random() < loss:
                    continue
                queues[peer[s]].append((now + delay, pkt))
        for dst, q in queues.items():
            while q and q[0][0] <= now:
                try:
                    dst.send(q[0][1])
                except BlockingIOError:
                    # The receiver's socket is full: wait for room rather than drop, so the
                    # only losses are LOSS's (tail drops here cost a big window whole bursts).
                    blocked.add(dst)
                    break
                except OSError:
                    return forwarded
                q.popleft()
                forwarded += 1
    return forwarded
