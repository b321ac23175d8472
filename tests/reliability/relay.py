"""A hostile UDP path for the reliability tests: a relay between two WireGuard
endpoints that drops, duplicates, reorders, delays, truncates and bit-flips
datagrams at given rates, and counts exactly what it did to each direction.

It runs in its own process, so that it keeps up with the traffic:

    relay = HostileRelay(Impairments(), seed=1)
    port_for_a, port_for_b = relay.start(a_port, b_port)   # A sends to port_for_a, B to port_for_b
    ...
    relay.snapshot()          # {"pending": N, "to_a": {...}, "to_b": {...}}: the counts so far
    relay.freeze()            # forwards nothing more: what it still held or receives is "late"
    stats = relay.stop()      # {"to_a": {...}, "to_b": {...}}: what happened to datagrams bound for A / B
                              # and "handshakes": every handshake message, in order, as
                              # [seconds, direction, type, sender index, receiver index, fate],
                              # fate "forwarded" (sent intact), "dropped", "tampered" or "late"

Each side sees its peer at the relay port it was told to use.  All traffic
stays on 127.0.0.1.
"""

import heapq
import json
import os
import random
import select
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from vpncrypt.dataplane.sockopts import force_buffers, socket_drops


@dataclass
class Impairments:
    drop: float = 0.02
    duplicate: float = 0.02
    reorder: float = 0.05  # held back until 1..reorder_depth later datagrams have passed
    reorder_depth: int = 64
    # instead of `reorder`, a pattern: every reorder_every-th datagram of a
    # direction held back until exactly reorder_depth later ones have passed
    # (0: off).  A path that reorders by a fixed pattern, not at random.
    reorder_every: int = 0
    delay: float = 0.02  # delayed by up to max_delay seconds
    max_delay: float = 0.050
    corrupt: float = 0.01  # truncated or one bit flipped (half each)
    handshake_drop: float = 0.0  # extra loss for handshake messages only,
    handshake_drop_streak: int = 1_000_000  # but at most this many in a row in one direction


class HostileRelay:
    """The parent side: starts the relay process and collects its counts."""

    def __init__(self, impairments: Impairments, seed: int = 1):
        self.imp = impairments
        self.seed = seed
        self.proc = None
        self.stats = None

    cwd: str | None = None  # where the relay process runs (None: here)

    def argv(self) -> list[str]:
        """The relay process's command line."""
        return [sys.executable, "-m", "tests.reliability.relay"]

    def start(self, a_port: int, b_port: int):
        cfg = {"a": a_port, "b": b_port, "seed": self.seed, "imp": asdict(self.imp)}
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.proc.stdin.write(json.dumps(cfg) + "\n")
        self.proc.stdin.flush()
        ports = json.loads(self.proc.stdout.readline())
        return ports["for_a"], ports["for_b"]

    def freeze(self):
        """Stop forwarding, so that what the endpoints count afterwards is final:
        what the relay still held back or delays is counted "late" and never
        sent, and what it receives from now on is counted "after_freeze" and
        dropped unexamined."""
        self.proc.stdin.write("freeze\n")
        self.proc.stdin.flush()
        if json.loads(self.proc.stdout.readline()) != {"frozen": True}:
            raise RuntimeError("the relay did not freeze")

    def snapshot(self):
        """The counts so far, and how many datagrams the relay still holds
        back, delays or has yet to send ("pending")."""
        self.proc.stdin.write("snapshot\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self):
        if self.proc is None:
            return self.stats
        try:
            self.proc.stdin.close()  # tells the relay to flush and report
            line = self.proc.stdout.readline()
            self.stats = json.loads(line) if line else None
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        return self.stats


def handshakes_through(log) -> int:
    """How many handshakes the relay's log (stop()["handshakes"]) shows the
    path let complete: an initiation that was forwarded intact, answered by a
    response forwarded intact before its initiator sent the next initiation
    (which replaces the one answered)."""
    latest = {}  # direction an initiator's messages take -> its latest initiation's index
    intact = set()
    through = set()
    for _, direction, kind, sender, receiver, fate in log:
        if kind == 1:
            latest[direction] = sender
            if fate == "forwarded":
                intact.add(sender)
        elif kind == 2 and fate == "forwarded":
            back = "to_a" if direction == "to_b" else "to_b"
            if receiver in intact and latest.get(back) == receiver:
                through.add(receiver)
    return len(through)


# ============================================================ the relay process


class _Direction:
    def __init__(self, name, rx, tx, dest):
        self.name, self.rx, self.tx, self.dest = name, rx, tx, dest
        self.c = dict.fromkeys(
            [
                "received",
                "received_data",
                "received_handshake",
                "dropped",
                "dropped_data",
                "dropped_handshake",
                "duplicated",
                "duplicated_data",
                "duplicated_handshake",
                "tampered",
                "tampered_data",
                "tampered_handshake",
                "truncated",
                "flipped",
                "reordered",
                "delayed",
                "forwarded",
                "send_errors",
                "late",
                "after_freeze",
            ],
            0,
        )
        self.seen = 0
        self.handshake_streak = 0  # handshake messages lost to handshake_drop in a row
        self.awaiting = {}  # handshake message -> its log entry, until it is sent
        self.held = []  # heap of (release at count, release at time, seq, data)
        self.out = []


def _relay_main():
    cfg = json.loads(sys.stdin.readline())
    # The relay stands in for a network, which does not share the endpoints'
    # CPU: ahead of them (and of any background load) it forwards as it
    # receives, instead of holding a second of traffic in its socket buffers
    # while it waits for a core.  (That backlog is a path whose round trip
    # exceeds the test timers' 0.5 s REKEY_TIMEOUT: every answer would then
    # come after its initiator had sent the next initiation.)
    if os.geteuid() == 0:
        os.nice(-15)
    imp = Impairments(**cfg["imp"])
    rng = random.Random(cfg["seed"])
    r = rng.random

    def sock():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        force_buffers(s, 16 << 20)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        return s

    for_a, for_b = sock(), sock()
    to_b = _Direction("to_b", for_a, for_b, ("127.0.0.1", cfg["b"]))
    to_a = _Direction("to_a", for_b, for_a, ("127.0.0.1", cfg["a"]))
    print(json.dumps({"for_a": for_a.getsockname()[1], "for_b": for_b.getsockname()[1]}), flush=True)
    delayed = []  # heap of (time, seq, direction name, data)
    seq = 0
    by_name = {"to_a": to_a, "to_b": to_b}
    handshakes = []  # [seconds since start, direction, message type, sender, receiver, fate]
    started = time.monotonic()
    readers = [for_a, for_b, sys.stdin]
    running, frozen = True, False
    while running:
        timeout = 0.005
        ready, _, _ = select.select(readers, [], [], timeout)
        now = time.monotonic()
        for s in ready:
            if s is sys.stdin:
                line = sys.stdin.readline()
                if not line:
                    running = False
                elif line.strip() == "freeze" and not frozen:
                    frozen = True
                    for d in (to_a, to_b):
                        d.awaiting.clear()
                        d.c["late"] += len(d.held)
                        d.held = []
                    for _, _, name, _ in delayed:
                        by_name[name].c["late"] += 1
                    delayed = []
                    for d in (to_a, to_b):
                        _flush(d)
                    print(json.dumps({"frozen": True}), flush=True)
                elif line.strip() == "snapshot":
                    pending = len(delayed) + sum(len(d.held) + len(d.out) for d in (to_a, to_b))
                    print(json.dumps({"pending": pending, "to_a": to_a.c, "to_b": to_b.c}), flush=True)
                continue
            d = to_b if s is for_a else to_a
            c = d.c
            for _ in range(512):
                try:
                    data = s.recv(65535)
                except BlockingIOError:
                    break
                if frozen:
                    c["after_freeze"] += 1
                    continue
                kind = "_data" if data[:1] == b"\x04" else "_handshake"
                c["received"] += 1
                c["received" + kind] += 1
                d.seen += 1
                entry = None
                if kind == "_handshake":
                    entry = [round(now - started, 4), d.name, data[0], *_indices(data), "late"]
                    handshakes.append(entry)
                lost = r() < imp.drop
                if kind == "_handshake" and not lost and imp.handshake_drop:
                    # handshake_drop, but never more than handshake_drop_streak in a row
                    if d.handshake_streak < imp.handshake_drop_streak and r() < imp.handshake_drop:
                        d.handshake_streak += 1
                        lost = True
                    else:
                        d.handshake_streak = 0
                if lost:
                    c["dropped"] += 1
                    c["dropped" + kind] += 1
                    if entry:
                        entry[-1] = "dropped"
                    continue
                if r() < imp.corrupt:
                    b = bytearray(data)
                    if r() < 0.5 and len(b) > 1:
                        b = b[: rng.randrange(1, len(b))]
                        c["truncated"] += 1
                    else:
                        # not in a handshake message's mac2: a receiver not
                        # under load ignores mac2 (as WireGuard does), so such
                        # a flip is no damage that anyone should count
                        span = len(b) - 16 if (b[0], len(b)) in ((1, 148), (2, 92)) else len(b)
                        bit = rng.randrange(span * 8)
                        b[bit // 8] ^= 1 << (bit % 8)
                        c["flipped"] += 1
                    data = bytes(b)
                    c["tampered"] += 1
                    c["tampered" + kind] += 1
                    if entry:
                        entry[-1] = "tampered"
                elif entry:
                    d.awaiting[data] = entry  # "forwarded" once it is sent, else "late"
                copies = 1
                if r() < imp.duplicate:
                    copies = 2
                    c["duplicated"] += 1
                    c["duplicated" + kind] += 1
                for _ in range(copies):
                    seq += 1
                    if imp.reorder_every and d.seen % imp.reorder_every == 0:
                        c["reordered"] += 1
                        heapq.heappush(d.held, (d.seen + imp.reorder_depth, now + imp.max_delay, seq, data))
                    elif not imp.reorder_every and r() < imp.reorder:
                        c["reordered"] += 1
                        heapq.heappush(
                            d.held,
                            (d.seen + rng.randint(1, imp.reorder_depth), now + imp.max_delay, seq, data),
                        )
                    elif r() < imp.delay:
                        c["delayed"] += 1
                        heapq.heappush(delayed, (now + rng.uniform(0, imp.max_delay), seq, d.name, data))
                    else:
                        d.out.append(data)
        # releases: held back by count (or for too long), delayed by time
        for d in (to_a, to_b):
            keep = []
            for entry in d.held:
                if entry[0] <= d.seen or entry[1] <= now:
                    d.out.append(entry[3])
                else:
                    keep.append(entry)
            if len(keep) != len(d.held):
                heapq.heapify(keep)
                d.held = keep
        while delayed and delayed[0][0] <= now:
            _, _, name, data = heapq.heappop(delayed)
            by_name[name].out.append(data)
        for d in (to_a, to_b):
            _flush(d)
    # stdin closed: deliver everything still held, then report.  The endpoints
    # have stopped counting by now, so these are counted apart ("late"): a
    # starved relay can leave a few (held back 50 ms at most while it runs).
    for d in (to_a, to_b):
        d.awaiting.clear()  # what is sent from here on is "late": it stays so in the log
        d.c["late"] += len(d.held)
        d.out.extend(e[3] for e in sorted(d.held))
        d.held = []
    for _, _, name, data in sorted(delayed):
        by_name[name].c["late"] += 1
        by_name[name].out.append(data)
    for d in (to_a, to_b):
        _flush(d)
        d.c["kernel_dropped"] = socket_drops(d.rx)  # lost at the relay's own socket
    print(json.dumps({"to_a": to_a.c, "to_b": to_b.c, "handshakes": handshakes}), flush=True)


def _indices(data):
    """A handshake message's sender and receiver index (0 where it has none)."""
    sender = int.from_bytes(data[4:8], "little") if data[0] in (1, 2) and len(data) >= 8 else 0
    receiver_at = {2: 8, 3: 4}.get(data[0])
    receiver = (
        int.from_bytes(data[receiver_at : receiver_at + 4], "little")
        if receiver_at and len(data) >= receiver_at + 4
        else 0
    )
    return sender, receiver


def _flush(d):
    for data in d.out:
        try:
            d.tx.sendto(data, d.dest)
        except BlockingIOError:
            select.select([], [d.tx], [], 1.0)
            try:
                d.tx.sendto(data, d.dest)
            except OSError:
                d.c["send_errors"] += 1
                continue
        except OSError:
            d.c["send_errors"] += 1
            continue
        d.c["forwarded"] += 1
        if data[0] != 4 and d.awaiting:
            entry = d.awaiting.pop(data, None)
            if entry is not None:
                entry[-1] = "forwarded"
    d.out = []


if __name__ == "__main__":
    _relay_main()
