"""python3 -m tests.benchlab.uapi_load: what big UAPI requests cost the data
plane, and `wg show IFACE dump` at many peers, vpncrypt against wireguard-go.

Needs root.  Two network namespaces (A and B) joined by a veth pair
(vpncrypt.bench.nslab's Lab).  For each implementation under test in A
(vpncrypt, then wireguard-go), a tunnel to a wireguard-go in B carries a
probe: B sends a numbered UDP datagram through the tunnel every millisecond,
A records when each arrives.  While the probe runs, A's daemon is sent, over
its UAPI socket:

    idle    nothing (the control: the probe's own gaps on this machine)
    set     one set=1 request adding a peer with --lines allowed_ip lines
            (600,000 by default: about 15 MiB, half IPv4 /32s, half IPv6 /128s)
    get     one get=1 request (that peer's allowed IPs included)

and the longest gap between two probe datagrams within each window is
reported (ms), with the request's own time.  A gap is the time the daemon
did not move packets: the event loop held by the request.

Then, side by side in A, a vpncrypt and a wireguard-go, each given the same
--peers peers (50,000 by default: one /32 and an endpoint each) with `wg
setconf`; `wg show IFACE dump` is timed --repeat times on each (min and
median, seconds; and the daemon's own CPU seconds for one answer, all its
threads, which a loaded machine distorts less), and the rows are counted.

    python3 -m tests.benchlab.uapi_load --wireguard-go "$(bash tests/tools/fetch-wireguard-go.sh)"

Options: --lines N, --peers N, --rounds N (idle/set/get rounds), --repeat N
(dumps), --skip-gaps, --skip-dump, --json.  --in-process runs only the set
and get against a UAPI server in this process, probed by a 1 ms timer on
its event loop: the longest wall gap, and the longest stretch of the loop
thread's own CPU between two probe runs, which other processes on a loaded
machine inflate far less than the wall gap (no root needed).
Figures taken on a loaded machine are noisy: compare the implementations
within one run.  Every namespace, interface and process is removed at the
end, also on an error or SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import struct
import sys
import time

from vpncrypt.bench.nslab import CLK_TCK, INNER, BenchError, Lab, Node, cpu_ticks, guarded, wait_tunnel
from tests.benchlab import bench_main, lab_python

PROBE_PORT = 5401
PROBE_INTERVAL = 0.001
_STAMP = struct.Struct("!Qd")  # sequence number, sender's monotonic time


# ============================================================ the probe (run in the namespaces)


def probe_send(addr: str, port: int, interval: float = PROBE_INTERVAL) -> None:
    """Send a numbered datagram to addr:port every `interval` seconds until killed."""
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    seq, t = 0, time.monotonic()
    while True:
        try:
            s.sendto(_STAMP.pack(seq, time.monotonic()), (addr, port))
        except OSError:
            pass  # no route yet, or a full queue: the gap shows it
        seq += 1
        t += interval
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            t = time.monotonic()


def probe_recv(port: int, out_path: str) -> None:
    """Record the arrival time of every datagram on `port`; on SIGTERM write
    them to out_path (doubles, CLOCK_MONOTONIC: the same in every namespace)."""
    import array
    import socket

    arrivals = array.array("d")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    done = []
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    open(out_path + ".ready", "w").close()
    while not done:
        try:
            s.recv(64)
        except (socket.timeout, InterruptedError):
            continue
        arrivals.append(time.monotonic())
    with open(out_path, "wb") as f:
        arrivals.tofile(f)


def start_probe(lab, name: str, out: str):
    """The probe stream B -> A through the tunnel: a receiver in A that
    records arrival times into `out`, then a sender in B; (receiver, sender)."""
    recv = lab.spawn(
        f"probe-recv-{name}",
        "A",
        lab_python(f"from tests.benchlab.uapi_load import probe_recv; probe_recv({PROBE_PORT}, {out!r})"),
    )
    deadline = time.monotonic() + 10
    while not os.path.exists(out + ".ready"):
        if recv.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"the probe receiver did not start: {lab.log_text('probe-recv-' + name)}")
        time.sleep(0.05)
    send = lab.spawn(
        f"probe-send-{name}",
        "B",
        lab_python(
            f"from tests.benchlab.uapi_load import probe_send; probe_send({INNER['A']!r}, {PROBE_PORT})"
        ),
    )
    return recv, send


def read_arrivals(path: str):
    """The probe receiver's arrival times (doubles, as probe_receive writes them)."""
    import array

    arrivals = array.array("d")
    with open(path, "rb") as f:
        arrivals.frombytes(f.read())
    return arrivals


def longest_gap(arrivals, start: float, end: float) -> float:
    """The longest stretch within [start, end] with no arrival (seconds)."""
    last, gap = start, 0.0
    for t in arrivals:
        if t < start:
            continue
        if t > end:
            break
        gap = max(gap, t - last)
        last = t
    return max(gap, end - last)


# ============================================================ requests


def _uapi(path: str, text: str, timeout: float = 600.0) -> tuple:
    """(answer, seconds) of one raw UAPI request."""
    from vpncrypt.daemon.uapiclient import request

    t0 = time.monotonic()
    answer = request(path, text, timeout=timeout)
    return answer, time.monotonic() - t0


def big_set(lines: int, public_hex: str) -> str:
    half = lines // 2
    body = [f"set=1\npublic_key={public_hex}\n"]
    body += [f"allowed_ip=10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32\n" for i in range(half)]
    body += [f"allowed_ip=fd77::{i // 65536:x}:{i % 65536:x}/128\n" for i in range(lines - half)]
    return "".join(body)


# ============================================================ the runs


def run_gaps(lab: Lab, impl: str, index: int, args, log) -> dict:
    """One tunnel A (impl) <-> B (wireguard-go), the probe B -> A, and the
    windows: idle, set, get."""
    a = Node(lab, "A", impl, index, wg_path=args.wireguard_go)
    b = Node(lab, "B", "wireguard-go", index, wg_path=args.wireguard_go)
    a.start()
    b.start()
    a.configure(b, 1420, initiator=True)
    b.configure(a, 1420, initiator=False)
    wait_tunnel(lab, a, b)
    out = os.path.join(lab.tmp, f"probe-{impl}.bin")
    recv, send = start_probe(lab, impl, out)
    windows = []
    try:
        time.sleep(1.0)  # the stream flowing
        for rnd in range(args.rounds):
            log(f"{impl}: round {rnd + 1}: idle window")
            t0 = time.monotonic()
            time.sleep(2.0)
            windows.append(("idle", t0, time.monotonic(), 2.0, ""))
            public = os.urandom(32).hex()
            body = big_set(args.lines, public)
            log(f"{impl}: set=1 with {args.lines} allowed_ip lines ({len(body) / 2**20:.1f} MiB)")
            t0 = time.monotonic()
            answer, took = _uapi(a.sock, body)
            windows.append(("set", t0, time.monotonic(), took, answer.strip()))
            del body
            log(f"{impl}: get=1")
            t0 = time.monotonic()
            answer, took = _uapi(a.sock, "get=1")
            windows.append(
                (
                    "get",
                    t0,
                    time.monotonic(),
                    took,
                    f"{answer.count(chr(10) + 'allowed_ip=')} allowed_ip lines",
                )
            )
            del answer
            _uapi(a.sock, f"set=1\npublic_key={public}\nremove=true\n")
            time.sleep(0.5)
    finally:
        lab.stop_proc(send)
        lab.stop_proc(recv)
    arrivals = read_arrivals(out)
    res: dict[str, dict] = {}
    for name, t0, t1, took, note in windows:
        r = res.setdefault(name, {"longest_gap_ms": [], "request_s": [], "answer": note})
        r["longest_gap_ms"].append(round(longest_gap(arrivals, t0, t1) * 1000, 1))
        r["request_s"].append(round(took, 2))
    a.stop()
    b.stop()
    return res


def _many_peers_conf(n: int, private: str) -> str:
    import base64

    lines = ["[Interface]", f"PrivateKey = {private}", ""]
    for i in range(n):
        pub = base64.b64encode(os.urandom(32)).decode()
        lines += [
            "[Peer]",
            f"PublicKey = {pub}",
            f"AllowedIPs = 10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32",
            f"Endpoint = 192.0.2.{i % 250 + 1}:{1024 + i % 60000}",
            "",
        ]
    return "\n".join(lines)


def run_dump(lab: Lab, args, log) -> dict:
    """vpncrypt and wireguard-go side by side in A with the same --peers
    peers; `wg show IFACE dump` timed on each, alternately."""
    nodes = {
        impl: Node(lab, "A", impl, 9, wg_path=args.wireguard_go) for impl in ("vpncrypt", "wireguard-go")
    }
    res: dict[str, dict] = {}
    for impl, n in nodes.items():
        n.start()
        path = os.path.join(lab.tmp, f"{n.iface}-peers.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_many_peers_conf(args.peers, n.private))
        log(f"{impl}: wg setconf with {args.peers} peers")
        t0 = time.monotonic()
        lab.run_in("A", "wg", "setconf", n.iface, path, timeout=900)
        res[impl] = {"setconf_s": round(time.monotonic() - t0, 2), "dump_s": [], "cpu_s": []}
    for _ in range(args.repeat):
        for impl, n in nodes.items():
            assert n.proc is not None  # started above
            c0 = cpu_ticks(n.proc.pid)
            t0 = time.monotonic()
            r = lab.run_in("A", "wg", "show", n.iface, "dump", timeout=300)
            res[impl]["dump_s"].append(time.monotonic() - t0)
            c1 = cpu_ticks(n.proc.pid)
            if c0 is not None and c1 is not None:
                res[impl]["cpu_s"].append((c1 - c0) / CLK_TCK)
            res[impl]["rows"] = len(r.stdout.splitlines())
    for impl, row in res.items():
        times, cpu = row.pop("dump_s"), row.pop("cpu_s")
        row["dump_min_s"] = round(min(times), 3)
        row["dump_median_s"] = round(statistics.median(times), 3)
        # the daemon's own CPU for one answer (all its threads): less
        # sensitive to a loaded machine than the wall time
        row["daemon_cpu_median_s"] = round(statistics.median(cpu), 3) if cpu else None
        if row["rows"] != args.peers + 1:
            raise BenchError(f"{impl}: wg show dump listed {row['rows'] - 1} of {args.peers} peers")
    for n in nodes.values():
        n.stop()
    return res


# ============================================================ in this process


class _Host:
    """What DeviceControl asks of the daemon, for a device with no socket
    and no TUN (the UAPI's work alone)."""

    def __init__(self):
        from vpncrypt.daemon.data_plane import DataPlane

        self.dataplane = DataPlane(os.urandom(32))
        self.device = self.dataplane.device
        self.engine, self.listen_port, self.fwmark, self.v6 = None, 0, 0, True

    def changed(self):
        pass

    def endpoint_set(self, public_key, endpoint):
        self.dataplane.trace.endpoint_set(public_key, endpoint)

    def counters(self, peer_drops=True):
        from vpncrypt.daemon.counter_snapshot import CounterSnapshot

        return CounterSnapshot()


def run_in_process(args, log) -> dict:
    """The same set and get against a UAPI server over a real Device in this
    process (no TUN, no tunnel, no root), probed by a 1 ms timer on its event
    loop: the longest wall gap between two probe runs, and the longest stretch
    of the loop thread's own CPU time between them (what a loaded machine
    adds little to: the time the request itself held the loop)."""
    import asyncio
    import tempfile
    from vpncrypt.daemon.device_control import DeviceControl
    from vpncrypt.daemon.uapi import start_uapi_server

    async def main(path, body):
        server = await start_uapi_server(path, DeviceControl(_Host()))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: None)  # the client's thread, made now
        worst = {"wall": 0.0, "cpu": 0.0}
        running = [True]

        async def probe():
            wall, cpu = time.perf_counter(), time.thread_time()
            while running[0]:
                await asyncio.sleep(PROBE_INTERVAL)
                w, c = time.perf_counter(), time.thread_time()
                worst["wall"], worst["cpu"] = max(worst["wall"], w - wall), max(worst["cpu"], c - cpu)
                wall, cpu = w, c

        task = asyncio.ensure_future(probe())
        out = {}
        for name, text in (("set", body), ("get", "get=1")):
            await asyncio.sleep(0.2)
            worst["wall"] = worst["cpu"] = 0.0
            t0 = time.monotonic()
            answer, _ = await loop.run_in_executor(None, _uapi, path, text)
            took = time.monotonic() - t0
            # the answer can be seen before the probe has run after the last
            # stretch: let it run, so that stretch is counted
            await asyncio.sleep(5 * PROBE_INTERVAL)
            out[name] = {
                "request_s": round(took, 2),
                "longest_gap_ms": round(worst["wall"] * 1000, 1),
                "longest_loop_cpu_ms": round(worst["cpu"] * 1000, 1),
                "answer": answer.strip()[-12:]
                if name == "set"
                else f"{answer.count(chr(10) + 'allowed_ip=')} allowed_ip lines",
            }
        running[0] = False
        await task
        server.close()
        await server.wait_closed()
        return out

    body = big_set(args.lines, os.urandom(32).hex())
    log(f"in this process: set=1 with {args.lines} allowed_ip lines, then get=1")
    with tempfile.TemporaryDirectory(prefix="vpncrypt-bench-uapi-") as d:
        return asyncio.run(main(os.path.join(d, "u.sock"), body))


def _wireguard_go_version(path):
    import subprocess

    try:
        return (
            subprocess.run([path or "wireguard-go", "--version"], capture_output=True, text=True, timeout=10)
            .stdout.strip()
            .splitlines()[0]
        )
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wireguard-go", default=None, metavar="PATH", help="wireguard-go binary (default: the one on PATH)"
    )
    p.add_argument(
        "--lines", type=int, default=600_000, help="allowed_ip lines in the set request (default 600000)"
    )
    p.add_argument(
        "--peers", type=int, default=50_000, help="peers for the wg show dump comparison (default 50000)"
    )
    p.add_argument("--repeat", type=int, default=3, help="dumps per implementation (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="idle/set/get rounds per implementation (default 2)")
    p.add_argument("--skip-gaps", action="store_true", help="no probe windows")
    p.add_argument("--skip-dump", action="store_true", help="no wg show dump comparison")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="only the set and get against a server in this process, probed by a "
        "timer on its loop (no root, no wireguard-go)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log each step on stderr")


def main(argv=None) -> int:
    return bench_main("tests.benchlab.uapi_load", __doc__, add_arguments, run, argv)


def run(args) -> int:
    def log(msg, always=False, pid=False):
        if args.verbose or always:
            print(f"[uapi_load] {msg}", file=sys.stderr, flush=True)

    if args.in_process:
        res = run_in_process(args, log)
        if args.json:
            print(json.dumps(res, indent=2))
        for name, r in res.items():
            print(
                f"in process    {name:5} longest timer gap {r['longest_gap_ms']:7.1f} ms, "
                f"longest loop CPU stretch {r['longest_loop_cpu_ms']:6.1f} ms   "
                f"request {r['request_s']:6.2f} s   {r['answer']}"
            )
        return 0
    if os.geteuid() != 0:
        print("tests.benchlab.uapi_load: needs root (network namespaces)", file=sys.stderr)
        return 1

    lab = Lab(log)
    results = {
        "wireguard_go": _wireguard_go_version(args.wireguard_go),
        "lines": args.lines,
        "peers": args.peers,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }

    def measure() -> dict:
        try:
            lab.setup()
            if not args.skip_gaps:
                results["gaps"] = {
                    impl: run_gaps(lab, impl, i, args, log)
                    for i, impl in enumerate(("vpncrypt", "wireguard-go"))
                }
            if not args.skip_dump:
                results["dump"] = run_dump(lab, args, log)
        finally:
            lab.close()
        return results

    status, _ = guarded("tests.benchlab.uapi_load", measure)
    if status is not None:
        return status
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"wireguard-go: {results['wireguard_go']}")
    for impl, windows in results.get("gaps", {}).items():
        for name, r in windows.items():
            gaps = ", ".join(f"{g:.1f}" for g in r["longest_gap_ms"])
            took = ", ".join(f"{t:.2f}" for t in r["request_s"])
            print(
                f"{impl:13} {name:5} longest probe gap (ms, per round) {gaps:>16}   "
                f"request (s) {took:>12}   {r['answer']}"
            )
    for impl, r in results.get("dump", {}).items():
        print(
            f"{impl:13} {args.peers} peers: wg setconf {r['setconf_s']:.2f} s, wg show dump "
            f"min {r['dump_min_s']:.3f} s, median {r['dump_median_s']:.3f} s, daemon CPU "
            f"per dump (median) {r['daemon_cpu_median_s']} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
