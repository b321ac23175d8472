"""python3 -m tests.benchlab.scrape_load: what a Prometheus scrape of a daemon
with many peers costs, and whether it stalls the data plane.

Needs root.  Two network namespaces (A and B) joined by a veth pair
(vpncrypt.bench.nslab's Lab): a vpncrypt in A started with `--metrics
127.0.0.1:9586`, a tunnel to a wireguard-go in B, and --peers more peers
given to A over the UAPI (10,000 by default: a /32 and an endpoint each).
B sends a numbered UDP datagram through the tunnel every millisecond, and A
records when each arrives (tests.benchlab.uapi_load's probe).  In A, a scraper
GETs /metrics --scrapes times, one after another (text format, then as
many in OpenMetrics), each after a pause; the probe's longest gap within
each scrape is compared with its longest gap in idle windows of the same
length (the control: this machine's own gaps).

    python3 -m tests.benchlab.scrape_load [--peers 10000] [--scrapes 6] [--threads 1] [--json]

--in-process (no root): a Device with --peers peers in this process, every
one with a handshake round-trip histogram (the largest scrape: a tunnel
carries only the one peer's), read and written as a scrape is, --scrapes
times per format; a 1 ms timer on the event loop records the loop's longest
gap meanwhile (the data plane runs on that loop with --threads 1).

Figures from a loaded machine are noisy; the idle windows say how noisy.
Every namespace, interface and process is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from vpncrypt.bench.nslab import BenchError, Lab, Node, guarded, wait_tunnel
from tests.benchlab.uapi_load import _uapi, longest_gap, read_arrivals, start_probe
from tests.benchlab import lab_python

METRICS = ("127.0.0.1", 9586)
PAUSE = 1.0  # seconds between scrapes (and the idle windows' length floor)


def scrape_loop(n: int, pause: float) -> None:
    """(Run in A.)  n scrapes, half text, half OpenMetrics; one JSON line
    per scrape: its monotonic start and end, bytes, series."""
    import urllib.request

    url = f"http://{METRICS[0]}:{METRICS[1]}/metrics"
    for i in range(n):
        time.sleep(pause)
        om = i % 2 == 1
        req = urllib.request.Request(url)
        if om:
            req.add_header("Accept", "application/openmetrics-text; version=1.0.0")
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=60) as r:
            body = r.read()
        t1 = time.monotonic()
        series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
        peers = body.count(b"\nwireguard_sent_bytes_total{")
        print(
            json.dumps(
                {
                    "t0": t0,
                    "t1": t1,
                    "bytes": len(body),
                    "series": series,
                    "peers": peers,
                    "format": "openmetrics" if om else "text",
                }
            ),
            flush=True,
        )


def _peers_request(n: int) -> str:
    body = ["set=1\n"]
    for i in range(n):
        body.append(
            f"public_key={os.urandom(32).hex()}\n"
            f"endpoint=192.0.2.{i % 250 + 1}:{1024 + i % 60000}\n"
            f"allowed_ip=10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32\n"
        )
    return "".join(body)


def run(args, log) -> dict:
    lab = Lab(log)
    try:
        lab.setup()
        a = Node(
            lab,
            "A",
            "vpncrypt",
            0,
            vc_args=(
                "--metrics",
                f"{METRICS[0]}:{METRICS[1]}",
                "--metrics-endpoints",  # the largest scrape, as before endpoints were opt-in
                "--threads",
                str(args.threads),
            ),
        )
        b = Node(lab, "B", "wireguard-go", 0, wg_path=args.wireguard_go)
        a.start()
        b.start()
        a.configure(b, 1420, initiator=True)
        b.configure(a, 1420, initiator=False)
        wait_tunnel(lab, a, b)
        log(f"adding {args.peers} peers over the UAPI")
        answer, took = _uapi(a.sock, _peers_request(args.peers))
        if "errno=0" not in answer:
            raise BenchError(f"set of {args.peers} peers failed: {answer.strip()}")
        out = os.path.join(lab.tmp, "probe.bin")
        recv, send = start_probe(lab, "metrics", out)
        try:
            time.sleep(1.0)
            idle_t0 = time.monotonic()
            time.sleep(PAUSE * args.scrapes)
            idle_t1 = time.monotonic()
            log(f"{args.scrapes} scrapes")
            r = lab.run_in(
                "A",
                *lab_python(
                    "from tests.benchlab.scrape_load import scrape_loop; "
                    f"scrape_loop({args.scrapes}, {PAUSE})"
                ),
                timeout=600,
            )
            scrapes = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
            time.sleep(0.3)
        finally:
            lab.stop_proc(send)
            lab.stop_proc(recv)
        arrivals = read_arrivals(out)
        for s in scrapes:
            if s["peers"] != args.peers + 1:
                raise BenchError(f"a scrape listed {s['peers']} of {args.peers + 1} peers")
            s["seconds"] = round(s["t1"] - s["t0"], 3)
            s["longest_gap_ms"] = round(longest_gap(arrivals, s["t0"], s["t1"]) * 1000, 1)
        # idle windows as long as the scrapes, cut from the idle stretch
        width = max(s["t1"] - s["t0"] for s in scrapes)
        idle = []
        t = idle_t0
        while t + width <= idle_t1:
            idle.append(round(longest_gap(arrivals, t, t + width) * 1000, 1))
            t += width
        a.stop()
        b.stop()
        return {
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "peers": args.peers + 1,
            "threads": args.threads,
            "set_peers_s": round(took, 2),
            "scrape_s": {
                fmt: [s["seconds"] for s in scrapes if s["format"] == fmt] for fmt in ("text", "openmetrics")
            },
            "scrape_gap_ms": [s["longest_gap_ms"] for s in scrapes],
            "idle_gap_ms_max": max(idle) if idle else None,
            "idle_gap_ms_median": statistics.median(idle) if idle else None,
            "bytes": scrapes[0]["bytes"],
            "series": scrapes[0]["series"],
        }
    finally:
        lab.close()


class _InProcess:
    """What the scrape reads of the daemon, around a Device with no socket
    and no TUN."""

    interface = "wg0"
    listen_port = 51820
    uapi = None

    def __init__(self, peers: int):
        from vpncrypt.daemon.data_plane import DataPlane
        from vpncrypt.daemon.histogram import RTT_BUCKETS, Histogram

        self.dataplane = DataPlane(os.urandom(32))
        dev = self.dataplane.device
        for i in range(peers):
            pk = os.urandom(32)
            dev.add_peer(
                pk,
                allowed_ips=[f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32"],
                endpoint=(f"192.0.2.{i % 250 + 1}", 1024 + i % 60000),
            )
            h = self.dataplane.stats.rtt[pk] = Histogram(RTT_BUCKETS)
            h.observe(0.002)

    def counters(self, peer_drops=True):
        return self.dataplane.counters(None, peer_drops=peer_drops)


async def _timer_gaps(done, lags: list) -> None:
    """A 1 ms timer on the loop until ``done`` is set: the time between its
    runs into ``lags``."""
    import asyncio

    last = time.perf_counter()
    while not done.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        lags.append(now - last)
        last = now


def run_in_process(args) -> dict:
    import asyncio
    from vpncrypt.daemon.metrics import read_state, render_and_free
    from vpncrypt.daemon.uapi import _cyclic_gc_paused, _short_switch_interval

    host = _InProcess(args.peers)
    formats = {"text": "", "openmetrics": "application/openmetrics-text; version=1.0.0"}

    async def scrapes():
        import concurrent.futures

        loop = asyncio.get_running_loop()
        worker = concurrent.futures.ThreadPoolExecutor(1)
        out = {}
        for fmt, accept in formats.items():
            for _ in range(args.scrapes):
                lags, done = [], asyncio.Event()
                probe = asyncio.ensure_future(_timer_gaps(done, lags))
                await asyncio.sleep(0.01)
                t0 = time.perf_counter()
                with _cyclic_gc_paused(True), _short_switch_interval(True):
                    box = [await read_state(host, endpoints=True)]  # the largest scrape
                    body, _ = await loop.run_in_executor(worker, render_and_free, box, accept)
                took = time.perf_counter() - t0
                done.set()
                await probe
                r = out.setdefault(fmt, {"scrape_s": [], "loop_gap_ms": []})
                r["scrape_s"].append(round(took, 3))
                r["loop_gap_ms"].append(round(max(lags) * 1000, 1))
                r["bytes"] = len(body)
                r["series"] = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
        # the control: the timer's longest gap with no scrape, as long as one
        lags, done = [], asyncio.Event()
        probe = asyncio.ensure_future(_timer_gaps(done, lags))
        await asyncio.sleep(max(max(r["scrape_s"]) for r in out.values()) * args.scrapes)
        done.set()
        await probe
        out["idle_loop_gap_ms"] = round(max(lags) * 1000, 1)
        worker.shutdown()
        return out

    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "peers": args.peers,
        "in_process": asyncio.run(scrapes()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python3 -m tests.benchlab.scrape_load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--peers", type=int, default=10_000, help="peers besides the tunnel's (10000)")
    p.add_argument("--scrapes", type=int, default=6, help="scrapes (half of them OpenMetrics)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        choices=(1, 2),
        help="the daemon's data-plane threads (1: on the event loop, the worst case)",
    )
    p.add_argument("--wireguard-go", default=None, metavar="PATH")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="no daemon: scrapes of a Device in this process, all peers with a "
        "round-trip histogram (no root)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.in_process:
        res = run_in_process(args)
        if args.json:
            print(json.dumps(res, indent=2))
            return 0
        idle = res["in_process"].pop("idle_loop_gap_ms")
        for fmt, r in res["in_process"].items():
            print(
                f"in process, {res['peers']} peers, {r['series']} series, "
                f"{r['bytes'] / 1e6:.1f} MB ({fmt}): scrape "
                + ", ".join(f"{t:.3f}" for t in r["scrape_s"])
                + " s; loop's longest gap "
                + ", ".join(f"{g:.1f}" for g in r["loop_gap_ms"])
                + " ms"
            )
        print(f"loop's longest gap without a scrape (as long as {args.scrapes}): {idle} ms")
        return 0
    if os.geteuid() != 0:
        print("tests.benchlab.scrape_load: needs root (network namespaces)", file=sys.stderr)
        return 1

    def log(msg, *_a, **_k):
        if args.verbose:
            print(f"[scrape_load] {msg}", file=sys.stderr, flush=True)

    status, measured = guarded("tests.benchlab.scrape_load", lambda: run(args, log))
    if status is not None or measured is None:
        return status or 1
    res = measured
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(
        f"{res['peers']} peers, {res['series']} series, {res['bytes'] / 1e6:.1f} MB a scrape "
        f"(data plane threads: {res['threads']})"
    )
    for fmt, times in res["scrape_s"].items():
        print(f"  scrape ({fmt}): " + ", ".join(f"{t:.3f}" for t in times) + " s")
    print(
        "  probe's longest gap during each scrape: "
        + ", ".join(f"{g:.1f}" for g in res["scrape_gap_ms"])
        + " ms"
    )
    print(
        f"  probe's longest gap in idle windows as long: median {res['idle_gap_ms_median']} ms, "
        f"max {res['idle_gap_ms_max']} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
