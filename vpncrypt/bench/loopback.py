"""vpncrypt loopback-bench: how fast is vpncrypt on this machine, and is it right?

Two real vpncrypt devices, each in its own process with its own event loop,
generate keys, do a real WireGuard handshake over UDP on 127.0.0.1, then carry
a stream of IP packets through the production data plane: the same sockets,
batching (recvmmsg/sendmmsg, GSO/GRO), batch sealing and opening, replay
window and AllowedIPs routing.  Only the inner side differs: an in-memory
source and sink of IP packets stands in for the TUN device, so no root is
needed.  Every payload carries a sequence number, a send timestamp and a
pattern, so the sink proves each delivered byte and measures latency.

The same run also measures a baseline: the same two processes forwarding the
same packets over the same batched sockets without encryption (the I/O
ceiling), and reports what fraction of it the encrypted path reaches.

Exit status: 0 if the handshake completed and nothing delivered was corrupted
or duplicated; 1 otherwise.
"""

import argparse
import asyncio
import json
import os
import queue
import random
import resource
import socket
import subprocess
import sys
import threading
import time

from vpncrypt.bench.machine import cpu_model
from vpncrypt.dataplane.sockopts import force_buffers, socket_drops
from vpncrypt.selfcmd import python_command

IMIX = [(40, 7), (576, 4), (1500, 1)]  # (IP packet size, weight): the classic simple IMIX
HEADER = 28  # IPv4 + UDP
# Unpaced rows are closed-loop: the source keeps at most this many batches in
# flight (sent, not yet counted by the peer's sink), as a TCP sender keeps a
# window; see SendWindow.
WINDOW_BATCHES = 16
# A window that has not moved for this long lost packets: they are written off.
WINDOW_STALL_S = 0.05
# How long the source sleeps when its window is full (the peer is behind).
WINDOW_WAIT_S = 50e-6


_CHOICES = {  # option: (its choices, the first the default; help)
    "--mix": (
        ["fixed", "imix", "random"],
        "packet sizes: fixed (--size), imix (7:4:1 of 52/576/1500-byte packets), "
        "or random payloads from [64, 1088)",
    ),
    "--crypto": (
        ["native", "pynacl", "both"],
        "native: the batch fast path; pynacl: each packet sealed through pynacl, "
        "as a naive daemon would; both: a row for each, in one run",
    ),
    "--progress": (["auto", "on", "off"], "live progress line on stderr (auto: when stderr is a terminal)"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    def choice(flag: str) -> None:
        choices, text = _CHOICES[flag]
        p.add_argument(flag, choices=choices, default=choices[0], help=text)

    p.add_argument(
        "--size",
        type=int,
        default=1472,
        help="UDP payload bytes of each inner packet (default 1472: a full 1500-byte IP packet)",
    )
    choice("--mix")
    p.add_argument("--bidirectional", action="store_true", help="traffic both ways at once")
    p.add_argument("--peers", type=int, default=1, help="peers (devices on the receiving side)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--duration", type=float, default=None, help="seconds of traffic per row (default 10)")
    g.add_argument("--packets", type=int, default=None, help="packets to send per direction, per row")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="pace the source at this many packets/s per direction (default: as fast as it goes)",
    )
    p.add_argument(
        "--window",
        type=int,
        default=None,
        metavar="BATCHES",
        help="unpaced rows: at most this many batches sent and not yet delivered to the peer's sink "
        f"(default {WINDOW_BATCHES}; 0: open loop, the sender overruns the receiver's socket buffer)",
    )
    choice("--crypto")
    p.add_argument("--batch", type=int, default=64, help="packets per batch (default 64)")
    p.add_argument(
        "--threads",
        default="1",
        metavar="N[,N]",
        help="the engine's data-plane threads (1 or 2; a list runs the native row "
        "once per value, to show the scaling; default 1)",
    )
    p.add_argument(
        "--cpus",
        default="auto",
        metavar="auto|off|A,B",
        help="where the two worker processes run: auto (default): each on a CPU of its own, "
        "the first two this command may use, when there are two and a row has 1 thread; "
        "off: wherever the scheduler puts them; A,B: on these CPUs",
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the unencrypted baseline row")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    choice("--progress")


# ======================================================================= parent


def _payload_sizes(args, n=4096, seed=1):
    rng = random.Random(seed)
    if args.mix == "fixed":
        return [args.size]
    if args.mix == "imix":
        # the 40-byte packets grow to 52: the smallest that holds seq, time and stream
        table = [max(size - HEADER, 24) for size, w in IMIX for _ in range(w)]
        rng.shuffle(table)
        return table
    return [rng.randrange(64, 1088) for _ in range(n)]


def _inner_addr(i: int) -> str:
    return f"10.1.{i >> 8}.{i & 255}" if i else "10.0.0.1"


def pair_configs(args, mode, crypto):
    """Worker configs: A holds one device with N peers; B holds N devices."""
    from vpncrypt.protocol import keys

    a_key = keys.genkey()
    b_keys = [keys.genkey() for _ in range(args.peers)]
    sizes = _payload_sizes(args)
    total = args.packets
    duration = args.duration if args.duration is not None else (None if total else 10.0)
    common = dict(
        mode=mode,
        crypto=crypto,
        batch=args.batch,
        sizes=sizes,
        threads=getattr(args, "threads_now", 1),
        duration=duration,
        packets=total,
        rate=args.rate,
        window=window_packets(args),
        timers=getattr(args, "timers", None),
    )
    cpu_a, cpu_b = worker_cpus(
        getattr(args, "cpus", "off"), os.sched_getaffinity(0), getattr(args, "threads_now", 1)
    )
    a = dict(
        common,
        name="A",
        cpu=cpu_a,
        send=True,
        devices=[
            dict(
                private_key=a_key,
                address=_inner_addr(0),
                peers=[
                    dict(public_key=keys.pubkey(k), allowed_ips=[_inner_addr(i + 1) + "/32"])
                    for i, k in enumerate(b_keys)
                ],
            )
        ],
    )
    b = dict(
        common,
        name="B",
        cpu=cpu_b,
        send=args.bidirectional,
        devices=[
            dict(
                private_key=k,
                address=_inner_addr(i + 1),
                peers=[dict(public_key=keys.pubkey(a_key), allowed_ips=[_inner_addr(0) + "/32"])],
            )
            for i, k in enumerate(b_keys)
        ],
    )
    return a, b


def worker_cpus(spec: str, allowed, threads: int = 1):
    """(CPU of worker A, CPU of worker B) for --cpus `spec`, or (None, None):
    leave them to the scheduler.  `allowed`: the CPUs this process may use.

    Pinned apart, the two never share a core: left to the scheduler, both
    were running on one CPU in about 7% of the samples of a run on 2 cores
    (a loopback socket's wake-up is a synchronous one, which draws the woken
    receiver to the sender's CPU), the receiver waiting while the sender
    keeps sending.  Not with data-plane threads (a worker's threads would
    share its one CPU)."""
    allowed = sorted(allowed)
    if spec == "off":
        return None, None
    if spec == "auto":
        if threads > 1 or len(allowed) < 2:
            return None, None
        return allowed[0], allowed[1]
    try:
        cpus = [int(c) for c in spec.split(",")]
    except ValueError:
        raise ValueError(f"--cpus takes auto, off or two CPU numbers A,B, not {spec!r}") from None
    if len(cpus) != 2:
        raise ValueError(f"--cpus takes auto, off or two CPU numbers A,B, not {spec!r}")
    if any(c not in allowed for c in cpus):
        raise ValueError(f"--cpus {spec}: this command may use CPUs {allowed} only")
    return cpus[0], cpus[1]


def window_packets(args) -> int:
    """The source's window in packets (0: open loop): --window batches of
    --batch, for unpaced rows only.  A paced row stays open-loop, so that its
    latency counts every queue the data plane builds (a packet held back by a
    window would be stamped late and its wait not counted)."""
    if getattr(args, "rate", 0.0):
        return 0
    batches = getattr(args, "window", None)
    return max(0, WINDOW_BATCHES if batches is None else int(batches)) * args.batch


class SendWindow:
    """A closed-loop source's window: how many packets it may send now.

    `sent` is what this source has sent, `received` what the peer's sink has
    counted of them (read from the memory the two processes share).  At most
    `packets` may be in flight.  Packets can be lost (a full socket buffer, a
    packet without a session during a rekey): when the peer's count has not
    moved for `stall` seconds while the window is full, what is still in
    flight is written off and the window opens again.  A written-off packet
    that arrives after all only makes the window larger by one for a while."""

    def __init__(self, packets: int, stall: float = WINDOW_STALL_S):
        if packets <= 0:
            raise ValueError("a window holds at least one packet")
        self.packets = packets
        self.stall = stall
        self.written_off = 0  # packets counted as lost
        self.waits = 0  # times room() found the window full
        self._seen = -1  # the peer's count when the window was first found full
        self._since = 0.0

    def in_flight(self, sent: int, received: int) -> int:
        return max(0, sent - received - self.written_off)

    def room(self, sent: int, received: int, now: float) -> int:
        """Packets that may be sent now (0: wait)."""
        room = self.packets - self.in_flight(sent, received)
        if room > 0:
            self._seen = -1
            return room
        self.waits += 1
        if received != self._seen:
            self._seen, self._since = received, now
            return 0
        if now - self._since >= self.stall:
            self.written_off = sent - received
            self._seen = -1
            return self.packets
        return 0


class Pacer:
    """A paced source's schedule: packet k is due at t0 + k / rate.  It also
    keeps how far behind the source fell (a late source then sends what is
    due at once: a burst, that the receiver queues)."""

    def __init__(self, rate: float, t0: float):
        if rate <= 0:
            raise ValueError("a pacer needs a rate above 0")
        self.rate = rate
        self.t0 = t0
        self.late = 0.0  # the most it was behind (s)
        self.late_at: float | None = None  # when, in seconds from t0
        self.late_batches = 0  # batches sent more than 1 ms behind

    def wait(self, sent: int, now: float) -> float:
        """Seconds until the next packet (number `sent`) is due; <= 0: now
        (and how late it is is counted)."""
        wait = self.t0 + sent / self.rate - now
        if wait < 0:
            if -wait > self.late:
                self.late, self.late_at = -wait, now - self.t0
            if -wait > 0.001:
                self.late_batches += 1
        return wait

    def report(self) -> dict:
        return {"late_s": self.late, "late_at_s": self.late_at, "batches_over_1ms_late": self.late_batches}


class SharedCounts:
    """The two workers' sinks (vc_traffic_sink), in one memory block the
    parent makes (a memfd) and both workers map: each sink counts into its own
    slot, and each source reads its peer's count for its window (no messages,
    no system calls)."""

    SLOTS = {"A": 0, "B": 1}

    def __init__(self, fd: int):
        import mmap

        from vpncrypt._native import ffi

        self.ffi = ffi
        self.size = self.slot_bytes()
        self.map = mmap.mmap(fd, 2 * self.size)
        self.base = ffi.from_buffer(self.map)

    @staticmethod
    def slot_bytes() -> int:
        from vpncrypt._native import ffi

        return (ffi.sizeof("vc_traffic_sink") + 63) & ~63

    @classmethod
    def make_fd(cls) -> int:
        fd = os.memfd_create("vpncrypt-loopback-counts", os.MFD_CLOEXEC)
        os.ftruncate(fd, 2 * cls.slot_bytes())
        return fd

    def sink(self, name: str):
        """The vc_traffic_sink * of worker `name`."""
        return self.ffi.cast("vc_traffic_sink *", self.base + self.SLOTS[name] * self.size)

    def peer(self, name: str) -> str:
        return "B" if name == "A" else "A"


class Worker:
    """One worker process; its JSON lines arrive through a reader thread into
    a queue shared by the workers of a run (so waiting on several is simple).

    Each worker is a session of its own, as two daemons would be: with the
    scheduler's autogroups (kernel.sched_autogroup_enabled, the default on
    desktop and many server kernels) the processes of one session share one
    group's CPU time, so two workers in the bench's session would share one
    fair share between them against every other session on the machine.  It
    still ends with the bench: it exits when its stdin closes."""

    def __init__(self, cfg, inbox=None, pass_fds=()):
        self.cfg = cfg
        self.inbox = inbox if inbox is not None else queue.Queue()
        self.mine = queue.Queue()
        # the installed vpncrypt, whatever the working directory is
        self.proc = subprocess.Popen(
            python_command("from vpncrypt.bench.loopback import _worker; _worker()"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            pass_fds=pass_fds,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        self.send(cfg)

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            self.mine.put(msg)
            self.inbox.put((self, msg))
        self.mine.put(None)
        self.inbox.put((self, None))

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout=120.0):
        """The next message from this worker (progress messages skipped)."""
        while True:
            try:
                msg = self.mine.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"worker {self.cfg['name']} stopped reporting") from None
            if msg is None:
                raise RuntimeError(f"worker {self.cfg['name']} exited ({self.proc.wait()})")
            if "progress" not in msg and "sent_done" not in msg:
                return msg

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _progress(enabled, text):
    if enabled:
        sys.stderr.write("\r\033[K" + text)
        sys.stderr.flush()


def _run_row(args, mode, show_progress, crypto="none"):
    row, _, _ = run_pair(args, mode, crypto, show_progress=show_progress)
    return row


def run_pair(args, mode, crypto, *, path=None, show_progress=False, drain=0.3, before_stop=None):
    """Run the two worker processes once; returns (summary row, raw A, raw B).
    `path(a_ports, b_ports) -> (ports A sends to, ports B sends to)` puts
    something between them (the reliability tests' hostile relay);
    `before_stop()` runs after the drain, before the workers stop counting."""
    a_cfg, b_cfg = pair_configs(args, mode, crypto)
    if path is not None:  # what the relay drops would only stall the window
        a_cfg["window"] = b_cfg["window"] = 0
    counts = SharedCounts.make_fd()
    a_cfg["counts_fd"] = b_cfg["counts_fd"] = counts
    inbox = queue.Queue()
    try:
        a = Worker(a_cfg, inbox, pass_fds=(counts,))
        try:
            b = Worker(b_cfg, inbox, pass_fds=(counts,))
        except BaseException:
            a.close()
            raise
    finally:
        os.close(counts)
    try:
        pa, pb = a.recv()["ports"], b.recv()["ports"]
        to_b, to_a = path(pa, pb) if path else (pb, pa)
        a.send({"peer_ports": to_b})
        b.send({"peer_ports": to_a})
        ready = [a.recv(), b.recv()]
        if not all(r.get("ready") for r in ready):
            row = {"mode": mode, "handshake": False, "error": [r.get("error") for r in ready]}
            return row, None, None
        # both sinks count from now on, before either source starts (a packet
        # a sink did not count would stay in its source's window)
        a.send({"arm": True})
        b.send({"arm": True})
        a.recv(), b.recv()
        a.send({"go": True})
        b.send({"go": True})
        senders = [w for w in (a, b) if w.cfg["send"]]
        done = 0
        while done < len(senders):
            try:
                w, msg = inbox.get(timeout=120)
            except queue.Empty:
                raise RuntimeError("the workers stopped reporting") from None
            if msg is None:
                raise RuntimeError(f"worker {w.cfg['name']} exited ({w.proc.wait()})")
            if "progress" in msg:
                p = msg["progress"]
                _progress(show_progress, f"{mode}: {p['sent']:,} packets sent, {p['elapsed']:.1f} s")
            elif "sent_done" in msg:
                done += 1
        time.sleep(drain)  # let the last batches land
        if before_stop is not None:
            before_stop()
        a.send({"stop": True})
        b.send({"stop": True})
        ra, rb = a.recv(), b.recv()
        _progress(show_progress, "")
        return _summarise(mode, crypto, ra, rb), ra, rb
    finally:
        a.close()
        b.close()


def _kernels(rows):
    """The kernels this machine selects, and those that served the native rows'
    data paths in the workers (as they reported them)."""
    from vpncrypt import crypto

    served = sorted({tuple(k) for r in rows for k in (r.get("kernels_served") or {}).values() if k})
    return {
        "chacha": crypto.active_implementation(),
        "poly1305": crypto.active_poly1305_implementation(),
        "served": [list(k) for k in served],
    }


def _summarise(mode, crypto, ra, rb):
    sinks = [ra["sink"], rb["sink"]]
    sent = ra["sent"] + rb["sent"]
    received = sum(s["received"] for s in sinks)
    payload = sum(s["bytes"] for s in sinks)
    # the receive window of each sink: first to last packet
    spans = [s["last"] - s["first"] for s in sinks if s["received"] > 1]
    elapsed = max(spans) if spans else 0.0
    lat = [s for s in sinks if s["received"]]
    row = {
        "mode": mode,
        "crypto": crypto,
        "handshake": True,
        "sent": sent,
        "delivered": received,
        "delivered_pct": 100.0 * received / sent if sent else 0.0,
        "elapsed_s": elapsed,
        "pps": received / elapsed if elapsed else 0.0,
        "gbit_s": payload * 8 / elapsed / 1e9 if elapsed else 0.0,
        "latency_p50_us": max(s["p50_ns"] for s in lat) / 1e3 if lat else None,
        "latency_p99_us": max(s["p99_ns"] for s in lat) / 1e3 if lat else None,
        "corrupted": sum(s["corrupted"] for s in sinks),
        "duplicated": sum(s["duplicated"] for s in sinks),
        "cpu_s_per_packet": {
            "A": ra["cpu_s"] / max(1, ra["sent"] + ra["sink"]["received"]),
            "B": rb["cpu_s"] / max(1, rb["sent"] + rb["sink"]["received"]),
        },
        "cpu_s": {"A": ra["cpu_s"], "B": rb["cpu_s"]},
        # the share of a core each worker had while the row ran: well under 1
        # for a sender means the machine was busy (others took its core)
        "cpu_share": {"A": ra.get("core_share"), "B": rb.get("core_share")},
        "pinned_cpu": {"A": ra.get("pinned_cpu"), "B": rb.get("pinned_cpu")},
        "gc": {"A": ra.get("gc"), "B": rb.get("gc")},
        "pacing": {"A": ra.get("pacing"), "B": rb.get("pacing")},
        "switches": {"A": ra.get("switches"), "B": rb.get("switches")},
        "window": {"A": ra.get("window"), "B": rb.get("window")},
        "drops": {"A": ra["drops"], "B": rb["drops"]},
        "rss_kb": {"A": ra["rss_kb"], "B": rb["rss_kb"]},
        "rss_growth": {"A": ra["rss_growth"], "B": rb["rss_growth"]},
        "kernels_served": {"A": ra.get("kernels"), "B": rb.get("kernels")},
    }
    row["intact"] = row["corrupted"] == 0 and row["duplicated"] == 0
    return row


def run(args) -> int:
    if args.peers < 1 or args.peers > 1000:
        print("vpncrypt loopback-bench: --peers must be from 1 to 1000", file=sys.stderr)
        return 2
    if args.mix == "fixed" and not 24 <= args.size <= 65000:
        print("vpncrypt loopback-bench: --size must be from 24 to 65000", file=sys.stderr)
        return 2
    try:
        thread_counts = [int(t) for t in str(args.threads).split(",") if t]
    except ValueError:
        thread_counts = []
    if not thread_counts or any(t not in (1, 2) for t in thread_counts):
        print("vpncrypt loopback-bench: --threads takes 1, 2 or 1,2", file=sys.stderr)
        return 2
    try:
        worker_cpus(args.cpus, os.sched_getaffinity(0))
    except ValueError as e:
        print(f"vpncrypt loopback-bench: {e}", file=sys.stderr)
        return 2
    show = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    rows = []
    if not args.no_baseline:
        rows.append(_run_row(args, "baseline", show))
    cryptos = ["native", "pynacl"] if args.crypto == "both" else [args.crypto]
    for crypto in cryptos:
        for n in thread_counts if crypto == "native" else [1]:
            args.threads_now = n
            row = _run_row(args, "wireguard", show, crypto)
            row["threads"] = n
            rows.append(row)
    wg = next(r for r in rows if r["mode"] == "wireguard")
    base = rows[0] if not args.no_baseline else None
    by = {r["crypto"]: r for r in rows}
    # the encrypted row's own limit: the baseline's CPU per packet plus the
    # table's seal of one packet, measured now, in this run (bench/limit.py)
    limit = None
    if base is not None and base.get("pps") and args.mix == "fixed" and wg.get("handshake"):
        from vpncrypt.bench.limit import fraction_by_cpu, fraction_of_limit, measure_limit

        limit = measure_limit(base, size=args.size, batch=args.batch)
        limit["fraction"] = fraction_of_limit(wg, limit) if wg.get("pps") else None
        limit["fraction_by_cpu"] = fraction_by_cpu(wg, limit) if wg.get("pps") else None
    result = {
        "command": "vpncrypt loopback-bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_model(),
        "settings": {
            "size": args.size,
            "mix": args.mix,
            "bidirectional": args.bidirectional,
            "peers": args.peers,
            "crypto": args.crypto,
            "batch": args.batch,
            "duration": args.duration,
            "packets": args.packets,
            "rate": args.rate,
            "window_packets": window_packets(args),
            "cpus": args.cpus,
            "threads": thread_counts,
        },
        "rows": rows,
        "kernels": _kernels(rows),
        "fraction_of_baseline": (wg.get("pps", 0) / base["pps"]) if base and base.get("pps") else None,
        "limit": limit,
        "native_over_pynacl": (by["native"]["pps"] / by["pynacl"]["pps"])
        if {"native", "pynacl"} <= by.keys() and by["pynacl"].get("pps")
        else None,
        "ok": all(r.get("handshake") for r in rows)
        and all(r.get("intact", False) for r in rows)
        and all(r.get("delivered", 0) > 0 for r in rows),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    return 0 if result["ok"] else 1


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _print_table(result):
    s = result["settings"]
    print(
        f"vpncrypt loopback-bench: {s['mix']} payload {s['size']} B, "
        f"{'both directions' if s['bidirectional'] else 'one direction'}, {s['peers']} peer(s), "
        f"crypto {s['crypto']}, on {result['cpu']}"
    )
    head = (
        f"{'row':<22}{'packets/s':>12}{'Gbit/s':>9}{'delivered':>11}{'p50 us':>9}{'p99 us':>9}"
        f"{'cpu us/pkt A':>14}{'B':>7}{'core A':>8}{'B':>5}{'intact':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        if not r.get("handshake"):
            print(f"{r['mode']:<22}handshake FAILED: {r.get('error')}")
            continue
        name = "baseline (no crypto)" if r["mode"] == "baseline" else f"wireguard ({r['crypto']})"
        if r.get("threads", 1) > 1:
            name = f"wireguard (native, {r['threads']}t)"
        cpu = r["cpu_s_per_packet"]
        print(
            f"{name:<22}{r['pps']:>12,.0f}{r['gbit_s']:>9.2f}{r['delivered_pct']:>10.1f}%"
            f"{r['latency_p50_us'] or 0:>9.0f}{r['latency_p99_us'] or 0:>9.0f}"
            f"{cpu['A'] * 1e6:>14.2f}{cpu['B'] * 1e6:>7.2f}"
            f"{_pct(r['cpu_share']['A']):>8}{_pct(r['cpu_share']['B']):>5}{'yes' if r['intact'] else 'NO':>8}"
        )
    print(
        "core: the share of a core each worker process had (a sender: while it sent; well under "
        "100% with few window waits: the machine was busy)"
    )
    if result["fraction_of_baseline"] is not None:
        print(
            f"encrypted path reaches {100 * result['fraction_of_baseline']:.0f}% of the "
            f"unencrypted baseline (packets/s)"
        )
    if result.get("limit") is not None:
        from vpncrypt.bench.limit import describe

        wg = next((r for r in result["rows"] if r["mode"] == "wireguard"), None)
        print(describe(result["limit"], wg))
    if result["native_over_pynacl"] is not None:
        print(
            f"native fast path: {result['native_over_pynacl']:.1f}x the packets/s of sealing each "
            f"packet through pynacl"
        )
    print(
        "result: "
        + (
            "OK, every delivered payload matched byte for byte"
            if result["ok"]
            else "FAILED (see the rows above)"
        )
    )


# ======================================================================= worker


class _Source:
    """Fills batches of IPv4/UDP packets natively (vc_traffic_fill)."""

    def __init__(self, sizes, batch, src, dsts, stream):
        from vpncrypt._native import ffi

        self.ffi = ffi
        self.batch = batch
        self.stride = 2048 if max(sizes) + HEADER <= 2048 else (max(sizes) + HEADER + 63) & ~63
        self.slab = ffi.new("uint8_t[]", batch * self.stride)
        self.view = memoryview(ffi.buffer(self.slab))
        self.off = ffi.new("uint32_t[]", batch)
        self.len = ffi.new("uint32_t[]", batch)
        # a ring of payload sizes, long enough to take any batch from any start
        ring = list(sizes) * (1 + (2 * batch) // len(sizes))
        self.ring = ffi.new("uint32_t[]", ring + ring[:batch])
        self.ring_n = len(ring)
        self.src = ffi.new("uint8_t[4]", socket.inet_aton(src))
        self.dsts = [ffi.new("uint8_t[4]", socket.inet_aton(d)) for d in dsts]
        self.stream = stream
        self.seq = 0

    def fill(self, n, now_ns):
        from vpncrypt._native import lib

        per = max(1, n // len(self.dsts))
        done = 0
        for j, dst in enumerate(self.dsts):
            k = n - done if j == len(self.dsts) - 1 else min(per, n - done)
            if k <= 0:
                break
            start = (self.seq + done) % self.ring_n
            if (
                lib.vc_traffic_fill(
                    self.slab + done * self.stride,
                    self.stride,
                    done * self.stride,
                    self.off + done,
                    self.len + done,
                    self.ring + start,
                    k,
                    self.src,
                    dst,
                    self.stream,
                    self.seq + done,
                    now_ns,
                )
                < 0
            ):
                raise ValueError("a packet does not fit the source stride")
            done += k
        self.seq += n
        return n


class _Sink:
    """Checks delivered packets natively (vc_traffic_check); the `inner` side of the engine."""

    fd = None

    def __init__(self, streams, state=None):
        """`state`: the vc_traffic_sink to count into (SharedCounts.sink; one
        stream), else one of its own per stream."""
        from vpncrypt._native import ffi, lib

        self.ffi, self.lib = ffi, lib
        if state is not None and len(streams) != 1:
            raise ValueError("a shared sink state serves one stream")
        self.state = {s: state if state is not None else ffi.new("vc_traffic_sink *") for s in streams}
        self.window = 1 << 20
        self.seen = {s: ffi.new("uint64_t[]", self.window // 64) for s in streams}
        self.first = self.last = None
        self.armed = False  # packets before the timed run (the handshake probe) are not counted

    def write(self, buf, off, lens, n):
        if not self.armed:
            return n, 0
        now = self.lib.vc_monotonic_ns()
        if self.first is None:
            self.first = now
        self.last = now
        for s, st in self.state.items():
            self.lib.vc_traffic_check(st, buf, off, lens, n, now, s, self.seen[s], self.window)
            break
        return n, 0

    def write_packets(self, packets):
        if not packets:
            return
        ffi = self.ffi
        data = b"".join(packets)
        offs, pos = [], 0
        for p in packets:
            offs.append(pos)
            pos += len(p)
        self.write(
            ffi.from_buffer(data),
            ffi.new("uint32_t[]", offs),
            ffi.new("uint32_t[]", [len(p) for p in packets]),
            len(packets),
        )

    def report(self):
        st = next(iter(self.state.values()))
        lib = self.lib
        return {
            "received": st.received,
            "bytes": st.bytes,
            "corrupted": st.corrupted,
            "duplicated": st.duplicated,
            "too_old": st.too_old,
            "p50_ns": lib.vc_traffic_quantile(st, 0.5),
            "p99_ns": lib.vc_traffic_quantile(st, 0.99),
            "first": (self.first or 0) / 1e9,
            "last": (self.last or 0) / 1e9,
        }


def _growth(samples):
    """Resident size at the last tenth of the run over the second tenth (1.0 = flat)."""
    if len(samples) < 10:
        return None
    tenth = len(samples) // 10
    second = sorted(samples[tenth : 2 * tenth])[tenth // 2]
    last = sorted(samples[-tenth:])[tenth // 2]
    return last / second if second else None


def _after_warmup(samples):
    """The median of the second tenth of the samples (the first tenth is warm-up)."""
    if len(samples) < 10:
        return samples[-1] if samples else None
    tenth = len(samples) // 10
    return sorted(samples[tenth : 2 * tenth])[tenth // 2]


class _GcPauses:
    """The interpreter's garbage collections while a row runs: how many, and
    the longest (a pause of the event loop that every packet then waiting sees)."""

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self._t = None

    def _on_gc(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            dt = time.perf_counter() - self._t
            self._t = None
            self.count += 1
            self.total += dt
            self.longest = max(self.longest, dt)

    def start(self):
        import gc

        gc.callbacks.append(self._on_gc)

    def stop(self):
        import gc

        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def report(self):
        return {"collections": self.count, "total_s": self.total, "longest_s": self.longest}


def _rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _open_sockets(cfg) -> list:
    """A batch UDP socket on 127.0.0.1 for each of this worker's devices."""
    from vpncrypt.dataplane.io import UdpBatchSocket

    socks = []
    for _dcfg in cfg["devices"]:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        force_buffers(s, 16 << 20)
        s.bind(("127.0.0.1", 0))
        socks.append(UdpBatchSocket(s, batch=cfg["batch"], mtu=2048))
    return socks


def _start_planes(cfg, socks, peer_ports, sink, loop) -> tuple[list, list]:
    """The wireguard rows: a data plane per device, built by the daemon's
    own construction (its Device, then its Engine with the daemon's threads
    and event handling), the sink in the TUN's place, so that what is
    measured is what `vpncrypt up` runs.  (devices, engines)."""
    from vpncrypt.daemon.data_plane import DataPlane
    from vpncrypt.protocol import keys
    from vpncrypt.protocol.timers import ProtocolConfig

    backend = "pynacl" if cfg["crypto"] == "pynacl" else "native"
    devices, engines = [], []
    for dcfg, udp in zip(cfg["devices"], socks):
        timers = ProtocolConfig(**cfg["timers"]) if cfg.get("timers") else None
        plane = DataPlane(
            keys.decode(dcfg["private_key"]),
            protocol_config=timers,
            mtu=max(cfg["sizes"]) + HEADER,
            threads=cfg.get("threads", 1),
            backend=backend,
        )
        dev = plane.device
        for j, pcfg in enumerate(dcfg["peers"]):
            port = peer_ports[j] if len(dcfg["peers"]) > 1 else peer_ports[0]
            dev.add_peer(
                keys.decode(pcfg["public_key"]),
                allowed_ips=pcfg["allowed_ips"],
                endpoint=("127.0.0.1", port),
            )
        plane.start_engine([udp], [sink], loop=loop, max_packet=max(cfg["sizes"]) + HEADER)
        devices.append(dev)
        engines.append(plane.engine)
    return devices, engines


def _start_plain(socks, peer_ports, sink, loop) -> list:
    """The baseline rows: each socket's datagrams straight to the sink, no
    encryption.  The peers' endpoints."""
    from vpncrypt.dataplane.io import endpoint_from_addr

    def on_plain(udp):
        while True:
            n, view, off, lens, ep = udp.recv()
            if n == 0:
                return
            sink.write(udp.slab, off, lens, n)

    for udp in socks:
        loop.add_reader(udp.fd, on_plain, udp)
    return [endpoint_from_addr(("127.0.0.1", p)) for p in peer_ports]


async def _handshake(name, devices, engines, src, dsts, loop) -> tuple[bool, str | None]:
    """One packet to each peer (from A alone, so the handshakes never
    cross), then wait for every session: (ready, error)."""
    if name == "A":
        from vpncrypt._native import lib

        probe = _Source([64], len(dsts), src, dsts, 99)
        probe.fill(len(dsts), lib.vc_monotonic_ns())
        engines[0].send_inner(probe.slab, probe.view, probe.off, probe.len, len(dsts))
    # a lost first initiation is sent again after REKEY_TIMEOUT (5 s), and
    # a machine under load may need more than one more: room for several
    deadline = loop.time() + 30
    while loop.time() < deadline:
        if all(d.has_session(p) for d in devices for p in d.peers.values()):
            return True, None
        await asyncio.sleep(0.01)
    return False, "handshake did not complete within 30 s"


def _plain_endpoints(eps, batch: int):
    """The baseline's destinations for a batch: the peers in turn."""
    from vpncrypt._native import ffi

    plain_ep = ffi.new("vc_endpoint[]", batch)
    for i in range(batch):
        plain_ep[i] = eps[i % len(eps)][0]
    return plain_ep


async def _send(cfg, source, out, stop, window, peer_sink, write) -> tuple[int, Pacer | None]:
    """The source's loop: batches out through the first engine (wireguard
    rows) or straight to the peers (baseline; out: (engines, sockets,
    endpoints)) until the row's time or packet count is reached (or the
    parent says stop), paced or windowed as asked.  (packets sent, the
    pacer)."""
    from vpncrypt._native import lib

    wireguard = cfg["mode"] == "wireguard"
    engines, socks, eps = out

    batch = cfg["batch"]
    limit = cfg["packets"]
    # the source's clock: time.monotonic, not loop.time(): uvloop's clock
    # counts whole milliseconds, and pacing 100-200 us batches by it sends
    # them in bursts of up to 1 ms of traffic, a queue at the receiver
    clock = time.monotonic
    t0 = clock()
    end = t0 + cfg["duration"] if cfg["duration"] else None
    next_report = t0 + 0.5
    rate = cfg["rate"]
    pacer = Pacer(rate, t0) if rate else None
    if rate:  # paced: batches of about 200 us of traffic, so pacing adds no bursts
        batch = max(1, min(batch, int(rate * 0.0002)))
    udp0 = socks[0]
    plain_ep = None if wireguard else _plain_endpoints(eps, batch)
    sent = 0
    rounds = 0
    while not stop.is_set():
        now = clock()
        if (end is not None and now >= end) or (limit is not None and sent >= limit):
            break
        n = batch if limit is None else min(batch, limit - sent)
        if window is not None and window.room(sent, peer_sink.received, now) < n:
            # the peer is behind: let this loop serve its own socket, then
            # give the core up for a moment (the peer may be waiting for it)
            await asyncio.sleep(0)
            if window.room(sent, peer_sink.received, clock()) < n:
                time.sleep(WINDOW_WAIT_S)
            continue
        if pacer is not None:
            wait = pacer.wait(sent, now)
            if wait > 0.002:
                await asyncio.sleep(wait - 0.001)  # the loop's timers are coarse (1 ms)
                continue  # then the rest finely
            if wait > 0:
                time.sleep(wait)  # fine pacing: nothing else waits on this loop
        source.fill(n, lib.vc_monotonic_ns())
        if wireguard:
            engines[0].send_inner(source.slab, source.view, source.off, source.len, n)
        else:
            udp0.send(source.slab, source.off, source.len, plain_ep, n)
        sent += n
        rounds += 1
        if rounds % 4 == 0:
            await asyncio.sleep(0)
        if now >= next_report:
            write({"progress": {"sent": sent, "elapsed": now - t0}})
            next_report = now + 0.5
    return sent, pacer


def _drops_and_stop(engines, socks) -> dict:
    """Every drop the devices, the engines and the sockets counted; the
    engines stopped."""
    drops: dict = {}
    for eng in engines:
        for k, v in eng.device.drops().items():
            drops[k] = drops.get(k, 0) + v
        for k, v in eng.counters.as_dict().items():
            if k.endswith("dropped") and v:
                drops[k] = drops.get(k, 0) + v
        eng.stop()
    rx_overflow = sum(socket_drops(s.sock) for s in socks)
    if rx_overflow:
        drops["socket_receive_buffer"] = rx_overflow
    return drops


def _served_kernels(cfg, engines) -> list | None:
    """The kernels the native rows' data path last served with."""
    if cfg["mode"] != "wireguard" or cfg["crypto"] != "native":
        return None
    from vpncrypt.crypto import last_kernels

    kernels = list(last_kernels())  # this thread's last seal or open (threads=1)
    for eng in engines:
        kernels = list(getattr(eng, "last_kernels", None) or kernels)
    return kernels


class _Samples:
    """The worker's memory, descriptors and tasks, every 0.25 s."""

    def __init__(self):
        self.rss, self.fds, self.tasks = [], [], []

    async def run(self):
        while True:
            self.rss.append(_rss_kb())
            self.fds.append(len(os.listdir("/proc/self/fd")))
            self.tasks.append(len(asyncio.all_tasks()))
            await asyncio.sleep(0.25)

    def report(self) -> dict:
        def gauge(samples):
            return {
                "after_warmup": _after_warmup(samples),
                "max": max(samples, default=None),
                "last": samples[-1] if samples else None,
            }

        return {
            "rss_growth": _growth(self.rss),
            "rss_after_warmup_kb": _after_warmup(self.rss),
            "fds": gauge(self.fds),
            "tasks": gauge(self.tasks),
        }


class _Pipe:
    """The worker's side of the parent's pipes: a JSON object a line."""

    def __init__(self, loop, inp, outp):
        self.lines: asyncio.Queue = asyncio.Queue()
        self.outp = outp
        loop.add_reader(inp.fileno(), lambda: self.lines.put_nowait(inp.readline()))

    async def read(self):
        line = await self.lines.get()
        if not line:
            raise SystemExit(0)
        return json.loads(line)

    def write(self, obj):
        self.outp.write(json.dumps(obj) + "\n")
        self.outp.flush()


async def _worker_main(cfg, inp, outp):
    loop = asyncio.get_running_loop()
    pipe = _Pipe(loop, inp, outp)
    read, write = pipe.read, pipe.write
    wireguard = cfg["mode"] == "wireguard"
    stream = 1 if cfg["name"] == "A" else 2
    counts = SharedCounts(cfg["counts_fd"]) if cfg.get("counts_fd") is not None else None
    sink = _Sink([2 if stream == 1 else 1], counts.sink(cfg["name"]) if counts else None)
    peer_sink = counts.sink(counts.peer(cfg["name"])) if counts else None
    socks = _open_sockets(cfg)
    write({"ports": [s.sock.getsockname()[1] for s in socks]})
    peer_ports = (await read())["peer_ports"]

    src = cfg["devices"][0]["address"]
    devices, engines, eps = [], [], []
    if wireguard:
        devices, engines = _start_planes(cfg, socks, peer_ports, sink, loop)
    else:
        eps = _start_plain(socks, peer_ports, sink, loop)

    dsts = [p["allowed_ips"][0].split("/")[0] for p in cfg["devices"][0]["peers"]]
    source = _Source(cfg["sizes"], cfg["batch"], src, dsts, stream) if cfg["send"] else None

    ready, error = True, None
    if wireguard:
        ready, error = await _handshake(cfg["name"], devices, engines, src, dsts, loop)
    write({"ready": ready, "error": error})
    await read()  # arm
    sink.armed = True
    write({"armed": True})
    await read()  # go

    cpu0 = time.process_time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.monotonic()
    sent = 0
    window = (
        SendWindow(cfg["window"]) if cfg["send"] and cfg.get("window") and peer_sink is not None else None
    )
    stop = asyncio.Event()

    async def control():
        while True:
            msg = await read()
            if msg.get("stop"):
                stop.set()
                return

    ctl = asyncio.create_task(control())
    samples = _Samples()
    sampler = asyncio.create_task(samples.run())
    gc_pauses = _GcPauses()
    gc_pauses.start()
    pacer: Pacer | None = None
    if source is not None:
        sent, pacer = await _send(cfg, source, (engines, socks, eps), stop, window, peer_sink, pipe.write)
        write({"sent_done": sent})
        # a sender's share of a core: over its sending only (not the drain after)
        share_cpu, share_wall = time.process_time() - cpu0, time.monotonic() - wall0
    await stop.wait()
    ctl.cancel()
    sampler.cancel()
    gc_pauses.stop()
    cpu = time.process_time() - cpu0
    wall = time.monotonic() - wall0
    if source is None:
        share_cpu, share_wall = cpu, wall
    ru = resource.getrusage(resource.RUSAGE_SELF)
    drops = _drops_and_stop(engines, socks)
    write(
        {
            "sent": sent,
            "sink": sink.report(),
            "cpu_s": cpu,
            "core_share": share_cpu / share_wall if share_wall > 0 else None,
            "pinned_cpu": cfg.get("cpu"),
            "gc": gc_pauses.report(),
            "pacing": pacer.report() if pacer is not None else None,
            "switches": {
                "voluntary": ru.ru_nvcsw - ru0.ru_nvcsw,
                "involuntary": ru.ru_nivcsw - ru0.ru_nivcsw,
            },
            "window": {
                "packets": window.packets if window else 0,
                "waits": window.waits if window else 0,
                "written_off": window.written_off if window else 0,
            },
            "drops": drops,
            "rss_kb": _rss_kb(),
            "handshakes": sum(p.counters.handshakes_completed for d in devices for p in d.peers.values()),
            "kernels": _served_kernels(cfg, engines),
            **samples.report(),
        }
    )


def _worker():
    cfg = json.loads(sys.stdin.readline())
    if cfg.get("cpu") is not None:
        os.sched_setaffinity(0, {cfg["cpu"]})
    if os.environ.get("VPNCRYPT_BENCH_STALL_DUMP"):  # debugging: where a stuck worker is
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["VPNCRYPT_BENCH_STALL_DUMP"]), repeat=True)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(_worker_main(cfg, sys.stdin, sys.stdout))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker()
    else:
        ap = argparse.ArgumentParser(
            prog="vpncrypt loopback-bench",
            description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_arguments(ap)
        raise SystemExit(run(ap.parse_args()))
