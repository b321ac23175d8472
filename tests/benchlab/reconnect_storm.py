"""python3 -m tests.benchlab.reconnect_storm: a reconnect storm, N peers' handshakes at once.

Needs root.  Two network namespaces, A and B, joined by a veth.  In B the
daemon under test (vpncrypt: `vpncrypt up`; wireguard-go: `wireguard-go -f`),
configured by `wg setconf` with N peers (--peers N, repeatable; the same key
for every victim, so that the peers are made once per N).  In A this process
speaks for all N peers through one UDP socket (tests.benchlab.handshakeload):
peer i sends from its own address of an any-IP range (10.200.0.0/16, local in
A, routed back by B; --sources S shares S addresses round-robin instead).

Every peer sends one valid initiation (Noise IKpsk2 with vpncrypt.protocol's
code, mac1, a TAI64N timestamp), all at once (or --rate per second), and then
behaves as a WireGuard peer does: without a response it retries after
REKEY_TIMEOUT (--retry-timeout, 5 s) plus a random jitter of up to 1/3 s, with
a new initiation (new sender index and timestamp); a cookie reply to its
latest initiation gives it the cookie, and its next initiation carries mac2
(it does not resend at once: WireGuard peers do not either).  A peer is
complete when the response to its latest initiation arrives and authenticates
as the initiator checks it (mac1, and the empty payload's tag under the keys
the handshake derives; one that fails is dropped and counted); it then sends
the session's first keepalive at once, as a WireGuard initiator does.  A
response to an initiation the peer has already replaced by a newer one is
counted as "answered after replaced" (wasted work of the victim, and a
WireGuard peer drops it: its handshake state is the newer one's).

Recorded per implementation, N and load (--load quiet,busy; --busy is
--load busy: a background process, stress-ng --cpu <cores>, keeps every core
busy for the storm): the time until all complete (and until half and 90%), the
handshakes per second, the victim's CPU (utime+stime of the daemon, all
threads) per handshake and as % of one core, initiations sent (with retries),
cookie replies, answers after replaced, the victim's UDP socket drops.
Afterwards the victim's `latest-handshake` must be set for every complete peer
("confirmed": it took the peer's keepalive; one it dropped is sent again while
the session is younger than 170 s), and the victim's endpoints show how many
source addresses it saw.  Making the peers' keys and Noise state
takes a process pool (--workers) and is timed (generation_s).

Exit status: 0 if every storm completed (all N) and was confirmed;
1 otherwise; 130 if interrupted.
"""

import argparse
import heapq
import os
import random
import select
import sys
import time

from tests.benchlab.handshakeload import (
    INIT_MAC1_OFFSET,
    MAX_SOURCES,
    UdpBatch,
    add_anyip,
    cookie_key,
    implementations,
    mac1_key,
    make_storm_peers,
    netns_socket,
    open_cookie_reply,
    report,
    report_head,
    runs,
    source_address,
    start_busy,
    udp_drops,
    unpack_u32,
)
from vpncrypt.bench.nslab import add_run_arguments, logger, CLK_TCK, OUTER, WG_PORT, BenchError, Node
from vpncrypt.bench.nslab import cpu_ticks, preflight, run_in_lab
from vpncrypt.bench.report import cell, print_builds, print_head
from tests.benchlab import bench_main
from vpncrypt.protocol import keys
from vpncrypt.protocol.noise import MAC

GEN_PORT = 40000
PEER_BITS = 17  # sender index = attempt << 17 | peer
MAX_PEERS = 1 << PEER_BITS
ZERO16 = bytes(16)
COOKIE_VALID = 120.0  # WireGuard's COOKIE_REFRESH_TIME
BATCH = 1024
# What the storm counts, each also a field of a storm's result: initiations
# sent (retries among them; with_mac2: those carrying a cookie); responses and
# cookie replies received (answered_after_replaced, cookie_replies_to_replaced:
# those to an initiation the peer had replaced since); responses to a peer
# already complete (duplicate_responses) or failing the initiator's check
# (bad_responses); cookies taken; replies to no initiation of ours
# (unknown_index) and datagrams of any other form (other).
COUNTERS = (
    "initiations",
    "retries",
    "with_mac2",
    "responses",
    "answered_after_replaced",
    "duplicate_responses",
    "bad_responses",
    "cookie_replies",
    "cookies_taken",
    "cookie_replies_to_replaced",
    "unknown_index",
    "other",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--peers",
        type=int,
        action="append",
        metavar="N",
        help="peers in the storm; repeat it for several sizes (default 10000)",
    )
    p.add_argument("--load", default="quiet", help="comma-separated: quiet, busy (default quiet)")
    p.add_argument(
        "--busy", action="store_true", help="as --load busy: every core kept busy by a background process"
    )
    p.add_argument(
        "--sources",
        type=int,
        default=0,
        help=f"source addresses shared by the peers round-robin (default 0: one per "
        f"peer, at most {MAX_SOURCES})",
    )
    p.add_argument(
        "--rate", type=float, default=0.0, help="first initiations per second (default 0: all at once)"
    )
    p.add_argument(
        "--retry-timeout",
        type=float,
        default=5.0,
        help="seconds before a peer retries (WireGuard's REKEY_TIMEOUT, default 5)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds a storm may take before it is given up (default 120)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="processes that make the peers and check the responses (default: one per core)",
    )
    add_run_arguments(p)


# ============================================================ the storm


class Storm:
    """N peers' handshakes with one victim, through one socket in A."""

    def __init__(self, sock, peers, victim_pub, dest, args, crypto):
        self.sock, self.fd = sock, sock.fileno()
        self.peers, self.n = peers, len(peers)
        self.dest, self.args, self.crypto = dest, args, crypto
        self.mac1_key = mac1_key(victim_pub)
        self.cookie_key = cookie_key(victim_pub)
        nsrc = args.sources or self.n
        self.src = [source_address(i % nsrc) for i in range(self.n)]
        self.tx = UdpBatch(BATCH, 160)
        self.rx = UdpBatch(BATCH, 128)
        self.latest = [0] * self.n
        self.done = [None] * self.n
        self.keepalive = [None] * self.n  # the session's first transport message
        self.cookie = [None] * self.n  # (cookie, time)
        self.enc_ts, self.mac1 = {}, {}  # sender index -> that initiation's
        self.heap = []
        self.outq = []
        self.c = dict.fromkeys(COUNTERS, 0)

    def _initiation(self, i, attempt, now):
        idx = (attempt << PEER_BITS) | i
        body, enc_ts = self.peers[i].initiation(self.crypto, idx, time.time())
        msg = body + MAC(self.mac1_key, body)
        ck = self.cookie[i]
        if ck is not None and now - ck[1] < COOKIE_VALID:
            msg += MAC(ck[0], msg)
            self.c["with_mac2"] += 1
        else:
            msg += ZERO16
        self.enc_ts[idx] = enc_ts
        self.mac1[idx] = msg[INIT_MAC1_OFFSET : INIT_MAC1_OFFSET + 16]
        self.latest[i] = attempt
        return msg

    def _queue(self, i, attempt, msg, now):
        """Send msg (peer i's initiation `attempt`) and set its retry timer."""
        self.outq.append((i, msg))
        jitter = random.random() / 3
        heapq.heappush(self.heap, (now + self.args.retry_timeout + jitter, i, attempt))
        self.c["initiations"] += 1

    def prepare(self):
        """Every peer's first initiation, made before the storm starts."""
        now = time.monotonic()
        self.first = [self._initiation(i, 0, now) for i in range(self.n)]

    def _flush(self):
        q, self.outq = self.outq, []
        for start in range(0, len(q), BATCH):
            part = q[start : start + BATCH]
            for slot, (i, msg) in enumerate(part):
                self.tx.set(slot, msg, self.dest, self.src[i])
            sent = 0
            while sent < len(part):
                n = self.tx.send(self.fd, len(part) - sent, sent)
                if n == 0:
                    select.select([], [self.sock], [], 0.01)
                    self._drain()
                sent += n
            self._drain()

    def _drain(self):
        rx = self.rx
        while True:
            k = rx.recv(self.fd)
            now = time.monotonic()
            for j in range(k):
                self._reply(rx.received(j), now)
            if k < rx.size:
                return

    def _lookup(self, idx):
        i, attempt = idx & (MAX_PEERS - 1), idx >> PEER_BITS
        if i >= self.n or idx not in self.enc_ts:
            self.c["unknown_index"] += 1
            return None, None
        return i, attempt

    def _response(self, i, attempt, data, now):
        if self.done[i] is not None:
            self.c["duplicate_responses"] += 1
            return
        idx = (attempt << PEER_BITS) | i
        keepalive = self.peers[i].keepalive(self.crypto, self.enc_ts[idx], data)
        if keepalive is None:  # it does not authenticate: dropped
            self.c["bad_responses"] += 1
            return
        self.done[i] = now - self.t0
        self.keepalive[i] = keepalive
        self.outq.append((i, keepalive))  # as a WireGuard initiator does at once
        self.undone -= 1

    def _cookie_reply(self, i, attempt, data, now):
        latest = (self.latest[i] << PEER_BITS) | i
        cookie = open_cookie_reply(self.crypto, self.cookie_key, data, self.mac1[latest])
        if cookie is not None:
            self.cookie[i] = (cookie, now)
            self.c["cookies_taken"] += 1

    # (type, length) of a reply: the offset of its receiver index (the sender
    # index of one of our initiations), what counts it, what counts it when it
    # answers an initiation its peer had replaced since, and its handler
    _REPLIES = {
        (b"\x02\x00\x00\x00", 92): (8, "responses", "answered_after_replaced", _response),
        (b"\x03\x00\x00\x00", 64): (4, "cookie_replies", "cookie_replies_to_replaced", _cookie_reply),
    }

    def _reply(self, data, now):
        form = self._REPLIES.get((data[:4], len(data)))
        if form is None:
            self.c["other"] += 1
            return
        at, counted, replaced, handle = form
        i, attempt = self._lookup(unpack_u32(data, at))
        if i is None:
            return
        self.c[counted] += 1
        if attempt < self.latest[i]:
            # not for the latest initiation: a WireGuard peer would not take it
            # (it opens a cookie reply with its last mac1)
            self.c[replaced] += 1
            return
        handle(self, i, attempt, data, now)

    def run(self, on_start=None):
        """Until every peer is complete or the timeout; returns the seconds."""
        args = self.args
        self.undone = self.n
        self.t0 = t0 = time.monotonic()
        if on_start:
            on_start()
        deadline = t0 + args.timeout
        first = 0  # peers that sent their first initiation
        while self.undone and time.monotonic() < deadline:
            now = time.monotonic()
            if first < self.n:
                due = self.n if not args.rate else min(self.n, int(args.rate * (now - t0)) + 1)
                for i in range(first, due):
                    self._queue(i, 0, self.first[i], now)
                first = max(first, due)
            heap = self.heap
            while heap and heap[0][0] <= now:
                _due, i, attempt = heapq.heappop(heap)
                if self.done[i] is None and self.latest[i] == attempt:
                    self._queue(i, attempt + 1, self._initiation(i, attempt + 1, now), now)
                    self.c["retries"] += 1
            if self.outq:
                self._flush()
            self._drain()
            wait = 0.05
            if heap:
                wait = min(wait, max(0.0, heap[0][0] - time.monotonic()))
            if first < self.n:
                wait = min(wait, 0.001)
            select.select([self.sock], [], [], wait)
        end = time.monotonic()
        self._drain()
        return end - t0


def _percentile(times, q):
    if not times:
        return None
    times = sorted(times)
    return times[min(len(times) - 1, max(0, int(round(q * len(times))) - 1))]


def _peak(times):
    """The most completions within one second (windows from 0 s, 0.25 s apart)."""
    if not times:
        return 0
    counts = {}
    for t in times:
        q = int(t * 4)
        for k in range(q - 3, q + 1):
            counts[k] = counts.get(k, 0) + 1
    return max(counts.values())


def _confirm(lab, node, storm, log):
    """How many complete peers the victim shows a latest-handshake for.  A
    peer's keepalive went at completion; one the victim has not taken (its
    socket dropped it, say) is sent again, twice at most, if its session is
    younger than 170 s (the victim rejects data on a session older than
    REJECT_AFTER_TIME, 180 s).  Returns (confirmed, too old to resend)."""
    want = {keys.encode(storm.peers[i].public): i for i in range(storm.n) if storm.keepalive[i] is not None}
    seen, old = set(), set()
    for attempt in range(3):
        out = lab.run_in(node.side, "wg", "show", node.iface, "latest-handshakes", timeout=120).stdout
        seen = {
            line.split()[0] for line in out.splitlines() if len(line.split()) == 2 and line.split()[1] != "0"
        }
        missing = [i for k, i in want.items() if k not in seen]
        now = time.monotonic() - storm.t0
        old = {i for i in missing if now - storm.done[i] > 170.0}
        again = [(i, storm.keepalive[i]) for i in missing if i not in old]
        if not again or attempt == 2:
            break
        log(f"{len(again)} peers without a latest-handshake; sending their keepalives again")
        for start in range(0, len(again), 256):  # paced: the victim's socket takes them
            storm.outq = again[start : start + 256]
            storm._flush()
            time.sleep(0.002)
        time.sleep(1.0)
    return len(seen & want.keys()), len(old)


def _endpoint_addresses(lab, node) -> int:
    """How many addresses the victim's peers have as endpoints (`wg show
    IFACE endpoints`)."""
    out = lab.run_in("B", "wg", "show", node.iface, "endpoints", timeout=120).stdout
    return len(
        {
            line.split()[1].rsplit(":", 1)[0]
            for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1] != "(none)"
        }
    )


def run_storm(lab, impl, index, peers, victim, load, args, log, wg=None):
    from vpncrypt.crypto import get_backend

    label = impl if wg is None else f"wireguard-go {wg['short']}"
    n = len(peers)
    result = {
        "implementation": impl,
        "label": label,
        "wireguard_go": wg,
        "peers": n,
        "load": load,
        "ok": False,
        "error": None,
    }
    node = sock = busy = None
    try:
        node = Node(lab, "B", impl, index, wg["path"] if wg else None)
        node.private, node.public = victim
        node.start()
        t = time.monotonic()
        node.setconf(
            f"[Interface]\nPrivateKey = {node.private}\nListenPort = {WG_PORT}\n"
            + "".join(f"\n[Peer]\nPublicKey = {keys.encode(p.public)}\n" for p in peers),
            timeout=600,
        )
        lab.run_in("B", "ip", "link", "set", "dev", node.iface, "up")
        result["configure_s"] = time.monotonic() - t
        log(f"{label}: {n} peers configured in {result['configure_s']:.1f} s")
        sock = netns_socket(lab.ns["A"], GEN_PORT)
        storm = Storm(
            sock, peers, keys.decode(node.public), (OUTER["B"], WG_PORT), args, get_backend("native")
        )
        storm.prepare()
        if load == "busy":
            busy = start_busy(lab, "A", args.timeout + 60)
            time.sleep(1.0)  # its workers are spinning
        drops0 = udp_drops(lab, "B", WG_PORT)
        mark = {}

        def started():
            mark["cpu"] = cpu_ticks(node.proc.pid)
            mark["gen"] = os.times()

        seconds = storm.run(started)
        cpu1, gen1 = cpu_ticks(node.proc.pid), os.times()
        drops1 = udp_drops(lab, "B", WG_PORT)
        if busy is not None:
            lab.stop_proc(busy)
            busy = None
        if node.proc.poll() is not None:
            raise BenchError(f"{impl} exited during the storm: {lab.log_text(node.iface)}")
        times = [d for d in storm.done if d is not None]
        done = len(times)
        last = max(times) if times else None
        cpu_s = (cpu1 - mark["cpu"]) / CLK_TCK
        gen_s = (gen1.user + gen1.system) - (mark["gen"].user + mark["gen"].system)
        result.update(
            {
                "complete": done,
                "seconds": seconds,
                "all_complete_s": last if done == n else None,
                "last_complete_s": last,
                "half_complete_s": _percentile(times, 0.5),
                "p90_complete_s": _percentile(times, 0.9),
                "handshakes_per_s": done / last if last else 0.0,
                "peak_handshakes_per_s": _peak(times),
                "victim_cpu_s": cpu_s,
                "victim_cpu_pct": 100.0 * cpu_s / seconds if seconds else None,
                "victim_cpu_ms_per_handshake": 1000.0 * cpu_s / done if done else None,
                "generator_cpu_pct": 100.0 * gen_s / seconds if seconds else None,
                "victim_socket_drops": (
                    drops1 - drops0 if drops0 is not None and drops1 is not None else None
                ),
                **storm.c,
            }
        )
        log(f"{label} {load} {n}: {done} complete in {seconds:.1f} s")
        result["confirmed"], result["expired_unconfirmed"] = _confirm(lab, node, storm, log)
        result["victim_endpoint_addresses"] = _endpoint_addresses(lab, node)
        result["ok"] = done == n and result["confirmed"] == n and not storm.c["bad_responses"]
        if not result["ok"]:
            result["error"] = (
                f"{done} of {n} complete, {storm.c['bad_responses']} responses "
                f"failed to authenticate, {result['confirmed']} confirmed by the "
                f"victim ({result['expired_unconfirmed']} too old to try again)"
            )
    except BenchError as e:
        result["error"] = str(e)
        log(f"{label}: FAILED: {e}", always=True)
    finally:
        if busy is not None:
            lab.stop_proc(busy)
        if sock is not None:
            sock.close()
        if node is not None:
            node.stop()
    return result


# ============================================================ the run


def run(args) -> int:
    prog = "tests.benchlab.reconnect_storm"
    sizes = args.peers or [10000]
    loads = ["busy"] if args.busy else [x.strip() for x in args.load.split(",") if x.strip()]
    impls = implementations(args.implementations)
    if not loads or any(x not in ("quiet", "busy") for x in loads) or not impls:
        print(
            f"{prog}: --load takes quiet and busy, --implementations vpncrypt and wireguard-go",
            file=sys.stderr,
        )
        return 2
    if (
        any(not 1 <= n <= min(MAX_PEERS, MAX_SOURCES) for n in sizes)
        or not 0 <= args.sources <= MAX_SOURCES
        or args.rate < 0
        or args.retry_timeout <= 0
        or args.timeout <= 0
        or args.workers < 0
    ):
        print(
            f"{prog}: need --peers from 1 to {MAX_SOURCES}, --sources from 0 to "
            f"{MAX_SOURCES}, --rate >= 0, --retry-timeout and --timeout > 0",
            file=sys.stderr,
        )
        return 2
    status, builds = preflight(
        prog, ["ip", "wg"] + (["stress-ng"] if "busy" in loads else []), impls, args.wireguard_go
    )
    if status is not None:
        return status
    log = logger(prog, args.verbose)
    private = keys.genkey()
    victim = (private, keys.pubkey(private))
    results, generation = [], {}

    def body(lab):
        index = 0
        for n in sizes:
            t = time.monotonic()
            peers = make_storm_peers(keys.decode(victim[1]), n, args.workers or None)
            generation[str(n)] = time.monotonic() - t
            log(f"{n} peers made in {generation[str(n)]:.1f} s")
            for load in loads:
                for impl, wg in runs(impls, builds):
                    results.append(run_storm(lab, impl, index, peers, victim, load, args, log, wg))
                    index += 1

    status, lab = run_in_lab(prog, log, lambda lab: add_anyip(lab, "A", "B", OUTER["A"]), body)
    if status is not None:
        return status
    result = report_head(prog, builds, lab)
    result.update(
        {
            "settings": {
                "peers": sizes,
                "loads": loads,
                "sources": args.sources,
                "rate": args.rate,
                "retry_timeout": args.retry_timeout,
                "timeout": args.timeout,
                "workers": args.workers or os.cpu_count(),
            },
            "generation_s": generation,
            "storms": results,
        }
    )
    return report(result, results, args.json, print_table)


def print_table(result):
    s = result["settings"]
    src = (
        "one address per peer"
        if not s["sources"]
        else f"{s['sources']} address{'es' if s['sources'] > 1 else ''}"
    )
    rate = "all at once" if not s["rate"] else f"{s['rate']:.0f}/s"
    print(
        f"reconnect_storm: N peers' initiations, {src}, {rate}, retry after "
        f"{s['retry_timeout']:g} s; {result['cpu']} ({result['cores']} cores), kernel "
        f"{result['kernel']}"
    )
    print("peers made in " + ", ".join(f"{v:.1f} s ({k})" for k, v in result["generation_s"].items()))
    head = (
        f"{'implementation':<28}{'load':<6}{'peers':>7}{'done':>7}{'all s':>7}{'50% s':>7}"
        f"{'90% s':>7}{'hs/s':>7}{'peak':>7}{'CPU ms/hs':>10}{'CPU %':>7}{'sent':>8}"
        f"{'cookies':>8}"
        f"{'replaced':>9}{'drops':>8}{'checked':>8}"
    )
    print_head(head)
    for r in result["storms"]:
        if "complete" not in r:
            print(f"{r['label']:<28}{r['load']:<6}{r['peers']:>7}  FAILED: {r['error']}")
            continue
        ok = "ok" if r["ok"] else "NO"
        print(
            f"{r['label']:<28}{r['load']:<6}{r['peers']:>7}{r['complete']:>7}"
            f"{cell(r['all_complete_s'], '.1f'):>7}{cell(r['half_complete_s'], '.1f'):>7}"
            f"{cell(r['p90_complete_s'], '.1f'):>7}{r['handshakes_per_s']:>7.0f}"
            f"{r['peak_handshakes_per_s']:>7}"
            f"{cell(r['victim_cpu_ms_per_handshake'], '.2f'):>10}"
            f"{cell(r['victim_cpu_pct'], '.0f'):>7}{r['initiations']:>8}"
            f"{r['cookie_replies']:>8}{r['answered_after_replaced']:>9}"
            f"{cell(r['victim_socket_drops'], 'd'):>8}{ok:>8}"
        )
        if r["error"]:
            print(f"{'':<28}{r['error']}")
    print_builds(result)
    print(
        "all/50%/90% s: until that many peers had the response to their latest initiation; "
        "hs/s: complete peers per second\n(peak: the most in one second).  CPU: the victim "
        "daemon (ms per complete handshake, and % of one core).  sent: initiations with "
        "retries.\nreplaced: responses to an "
        "initiation its peer had already replaced.  drops: the victim's UDP socket drops.\n"
        "checked: every response authenticated and every peer's keepalive set the victim's "
        "latest-handshake."
    )


if __name__ == "__main__":
    raise SystemExit(bench_main("tests.benchlab.reconnect_storm", __doc__, add_arguments, run))
