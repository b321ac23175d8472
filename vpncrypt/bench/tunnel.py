"""vpncrypt bench tunnel: iperf3 through real tunnels, vpncrypt against wireguard-go.

Needs root.  Two network namespaces (A and B) joined by a veth pair; in each a
WireGuard daemon with a TUN interface; iperf3 from A to B through the tunnel:
TCP (`iperf3 -c B -t T -J`) and UDP (`iperf3 -u -l 1392 -b 0`: as fast as the
client sends; Gbit/s received and loss are reported).  Pairings, in one run:

    vc-vc    vpncrypt <-> vpncrypt
    vc-wg    vpncrypt (A, sender) <-> wireguard-go (B, receiver)
    wg-wg    wireguard-go <-> wireguard-go
    veth     the plain veth, no tunnel: the ceiling

and, asked for by name (--pairings vc-vc,proxy,proxy-wan), `vpncrypt proxy`
run as nobody with no capability against a vpncrypt daemon (or, with
--proxy-peer wireguard-go, the first wireguard-go build) (vpncrypt.bench.proxypair):

    proxy      TCP through SOCKS5 CONNECT and through a TCP forward, UDP
               through SOCKS5 UDP ASSOCIATE, and --proxy-connections
               concurrent SOCKS5 connections with the memory per idle one
    proxy-wan  its TCP tests with 50 ms RTT and 0.1% loss on the outer path
               (a delaying relay: this kernel has no netem)

with their ratios to the vc-vc pairing's TCP and UDP of the same run.

The wireguard-go binary is the one on PATH, or --wireguard-go PATH; given more
than once (e.g. Debian 12's /usr/bin/wireguard-go and Debian 13's, fetched by
tests/tools/fetch-wireguard-go.sh), every pairing with wireguard-go runs once
per binary, in the same run.  Each binary's `--version` is in the table and the
JSON, with vpncrypt's, Python's and iperf3's; the plain veth is the ceiling.

After iperf3, each pairing carries a byte-checked TCP stream and UDP datagram
stream of --check-mib MiB from A to B (vpncrypt.bench.streamcheck): every byte
that arrives is compared with what was sent; corruption or duplication fails
the pairing, UDP loss is counted.

Both implementations are started the same way, unconfigured, inside the
namespace (`vpncrypt up IFACE` through this Python, `wireguard-go -f IFACE`),
get keys from their own genkey (`vpncrypt genkey` / `wg genkey`), and are
configured along one path: `wg setconf` over the UAPI socket, `ip addr add`,
`ip link set mtu MTU up`.

--latency: after those, ping RTT from A through each pairing, a ping every
50 ms for --duration, idle and then under one iperf3 TCP flow (the pings start
after its first half second): p50, p99, max and loss, and the flow's Gbit/s
with the pings against the TCP row without them.  Meanwhile the queues are
sampled every 0.5 s on both sides: the backlog of the TUN's root qdisc (`tc -s
qdisc`) and the receive and send queues of the daemon's UDP socket (`ss -u
-m`, bytes as the kernel charges them), to show where a ping waits.

CPU of each daemon process is the utime+stime delta of /proc/PID/stat (all of
its threads) over the iperf3 run, as % of one core (so above 100% means more
than one core), and per Gbit/s received: CPU seconds per Gbit (A, B and both),
so that implementations at different speeds compare.  --plot FILE.png draws
the throughput and CPU per Gbit of every pairing (matplotlib), and with
--latency the RTTs.  Every
namespace, veth, interface and process is removed at
the end, also on SIGINT/SIGTERM or an error.

Exit status: 0 if every pairing carried traffic; 1 otherwise; 130 if interrupted.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from vpncrypt.bench import proxypair
from vpncrypt.bench.nslab import (
    CLK_TCK,
    INNER,
    OUTER,
    BenchError,
    WG_PORT,
    Node,
    add_run_arguments,
    cpu_per_gbit,
    cpu_ticks,
    logger,
    measured_round,
    pairing_record,
    preflight,
    run_in_lab,
    version,
    wait_tunnel,
)
from vpncrypt.bench.machine import cpu_model
from vpncrypt.bench.report import load_pyplot, print_head

PAIRINGS = {
    # name: (label, implementation in A, implementation in B)
    "vc-vc": ("vpncrypt<->vpncrypt", "vpncrypt", "vpncrypt"),
    "vc-wg": ("vpncrypt<->wireguard-go", "vpncrypt", "wireguard-go"),
    "wg-wg": ("wireguard-go<->wireguard-go", "wireguard-go", "wireguard-go"),
    "veth": ("veth (no tunnel)", None, None),
    "proxy": ("vpncrypt proxy (nobody)<->vpncrypt", "vpncrypt-proxy", "vpncrypt"),
    "proxy-wan": ("vpncrypt proxy (nobody)<->vpncrypt 50ms 0.1%", "vpncrypt-proxy", "vpncrypt"),
}
DEFAULT_PAIRINGS = ("vc-vc", "vc-wg", "wg-wg", "veth")  # the proxy ones only when named
PROXY_PAIRINGS = ("proxy", "proxy-wan")
ALIASES = {"vpncrypt": "vc-vc", "mixed": "vc-wg", "wireguard-go": "wg-wg", "wggo": "wg-wg", "plain": "veth"}
IPERF_PORT = 5201
CHECK_PORT = 5301
CHECK_DATAGRAM = 1200  # UDP check datagrams (under a 1228-byte MTU, IP fragments)
UDP_LEN = 1392
PING_INTERVAL = 0.05  # seconds between the --latency pings
QUEUE_SAMPLE = 0.5  # seconds between the --latency queue samples


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=10.0, help="seconds of iperf3 per test (default 10)")
    p.add_argument(
        "--pairings",
        default=",".join(DEFAULT_PAIRINGS),
        help="comma-separated, from "
        + ", ".join(PAIRINGS)
        + " (default: "
        + ",".join(DEFAULT_PAIRINGS)
        + "); the proxy ones: `vpncrypt proxy` as nobody",
    )
    p.add_argument(
        "--proxy-connections",
        type=int,
        default=1000,
        metavar="N",
        help="proxy pairing: N concurrent SOCKS5 connections held idle, the proxy's RSS per "
        "connection (default 1000; 0: none)",
    )
    p.add_argument(
        "--proxy-peer",
        choices=("vpncrypt", "wireguard-go"),
        default="vpncrypt",
        help="proxy pairings: the peer in B (wireguard-go: the first --wireguard-go build)",
    )
    p.add_argument(
        "--proxy-udp-size",
        type=int,
        default=1200,
        metavar="BYTES",
        help="proxy pairing: UDP datagram payload through SOCKS5 ASSOCIATE (default 1200)",
    )
    p.add_argument("--mtu", type=int, default=1420, help="tunnel MTU (default 1420)")
    p.add_argument("--no-tcp", action="store_true", help="skip the TCP tests")
    p.add_argument("--no-udp", action="store_true", help="skip the UDP tests")
    p.add_argument(
        "--wireguard-go-tso",
        choices=("on", "off"),
        default="on",
        help="off: TCP segmentation offload off on wireguard-go's TUN (as `ethtool "
        "-K IFACE tso off`), so that it reads no TCP super-packets",
    )
    p.add_argument(
        "--vpncrypt-threads",
        default="",
        metavar="N[,N]",
        help="vpncrypt's --threads (1 or 2); a list runs each vpncrypt pairing once "
        "per value (default: the daemon's default)",
    )
    p.add_argument(
        "--vpncrypt-offloads",
        default="",
        metavar="on|off[,...]",
        help="vpncrypt's --tun-offloads; a list runs each vpncrypt pairing once per value (default: on)",
    )
    p.add_argument(
        "--vpncrypt-fair-queue",
        default="",
        metavar="on|off[,...]",
        help="vpncrypt's --fair-queue (on) or --no-fair-queue (off) on both daemons; a list (off,on: "
        "the A/B) runs each vpncrypt pairing once per value (default: the daemon's, off)",
    )
    p.add_argument(
        "--check-mib",
        type=float,
        default=16.0,
        help="MiB of byte-checked TCP and of UDP stream per pairing (default 16; 0: no check)",
    )
    p.add_argument(
        "--txqueuelen",
        type=int,
        default=None,
        help="set both tunnel interfaces' txqueuelen (default: as the daemon left it)",
    )
    p.add_argument(
        "--latency",
        action="store_true",
        help=f"ping RTT through each pairing, idle and under one bulk TCP flow (a ping every "
        f"{PING_INTERVAL * 1000:g} ms for --duration): p50 and p99, and the TCP flow's Gbit/s "
        f"with the pings; with the TUN qdisc backlog and the UDP socket queues sampled meanwhile",
    )
    p.add_argument(
        "--vpncrypt-tun-qdisc",
        choices=("daemon", "fq_codel"),
        default="daemon",
        help="the qdisc on vpncrypt's TUN: as the daemon leaves it (default), or fq_codel set "
        "by the bench through vpncrypt.bench.qdisc (rtnetlink) once the interface is up",
    )
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="plot Gbit/s and CPU per Gbit of every pairing (needs matplotlib)",
    )
    add_run_arguments(p, implementations=False)


# ============================================================ iperf3


def _link_stats(lab, side, dev):
    r = lab.run_in(side, "ip", "-s", "-j", "link", "show", dev, check=False)
    try:
        return json.loads(r.stdout)[0]["stats64"]
    except (ValueError, IndexError, KeyError):
        return None


def _iperf(lab, target, proto, duration, pids, links, port=IPERF_PORT):
    """One iperf3 client run from A (to target:port); returns a result dict
    with the CPU of `pids` and the counters of the inner `links` (A's sends,
    B's receives)."""
    cmd = ["iperf3", "-c", target, "-p", str(port), "-t", f"{duration:g}", "-J"]
    if proto == "udp":
        cmd += ["-u", "-l", str(UDP_LEN), "-b", "0", "--get-server-output"]
    before = {k: cpu_ticks(p) for k, p in pids.items()}
    st0 = {side: _link_stats(lab, side, dev) for side, dev in links.items()}
    t0 = time.monotonic()
    for attempt in range(5):
        client = lab.spawn(f"iperf3-client-{proto}", "A", cmd, stdout=subprocess.PIPE)
        try:
            out, err = client.communicate(timeout=duration + 60)
        except subprocess.TimeoutExpired:
            client.kill()
            client.communicate()
            raise BenchError(f"iperf3 {proto} to {target} did not finish")
        wall = time.monotonic() - t0
        after = {k: cpu_ticks(p) for k, p in pids.items()}
        st1 = {side: _link_stats(lab, side, dev) for side, dev in links.items()}
        try:
            res = json.loads(out)
        except ValueError:
            raise BenchError(f"iperf3 {proto} to {target}: no JSON ({err.strip() or out[:300]})")
        if "error" in res and "busy" in res["error"] and attempt < 4:
            time.sleep(0.5)  # the server still finishing the previous test
            before = {k: cpu_ticks(p) for k, p in pids.items()}
            st0 = {side: _link_stats(lab, side, dev) for side, dev in links.items()}
            t0 = time.monotonic()
            continue
        break
    if "error" in res:
        raise BenchError(f"iperf3 {proto} to {target}: {res['error']}")
    end = res["end"]
    row = {"proto": proto}
    if proto == "tcp":
        row["gbit_s"] = end["sum_received"]["bits_per_second"] / 1e9
        row["sent_gbit_s"] = end["sum_sent"]["bits_per_second"] / 1e9
        row["retransmits"] = end["sum_sent"].get("retransmits")
        row["seconds"] = end["sum_received"]["seconds"]
    else:
        s = end["sum"]
        sent_bps = s["bits_per_second"]
        received_bps = None
        server = res.get("server_output_json") or {}
        ssum = (server.get("end") or {}).get("sum") or {}
        if ssum.get("bits_per_second") is not None:
            received_bps = ssum["bits_per_second"]
        if received_bps is None:  # no server report: sent x delivered fraction
            received_bps = sent_bps * (1 - (s.get("lost_percent") or 0) / 100)
        row["gbit_s"] = received_bps / 1e9
        row["sent_gbit_s"] = sent_bps / 1e9
        row["loss_pct"] = s.get("lost_percent")
        row["packets"] = s.get("packets")
        row["lost_packets"] = s.get("lost_packets")
        row["seconds"] = s.get("seconds")
    # Where the traffic went: what B's inner interface received from the
    # tunnel (before the receiving socket could drop it), and what A's inner
    # interface dropped because its daemon did not read it in time.
    a0, a1, b0, b1 = st0.get("A"), st1.get("A"), st0.get("B"), st1.get("B")
    row["link_rx_gbit_s"] = 8 * (b1["rx"]["bytes"] - b0["rx"]["bytes"]) / wall / 1e9 if b0 and b1 else None
    row["link_tx_dropped"] = (a1["tx"]["dropped"] - a0["tx"]["dropped"]) if a0 and a1 else None
    row["cpu_pct"] = {}
    for k in pids:
        b, a = before.get(k), after.get(k)
        row["cpu_pct"][k] = (100.0 * (a - b) / CLK_TCK / wall) if a is not None and b is not None else None
    row["cpu_s_per_gbit"] = cpu_per_gbit(row["cpu_pct"], row["gbit_s"])
    return row


def _stream_check(lab, proto, target, nbytes, seed, log):
    """A byte-checked stream from A to target in B (vpncrypt.bench.streamcheck)."""
    base = [sys.executable, "-m", "vpncrypt.bench.streamcheck"]
    count = nbytes if proto == "tcp" else max(1, nbytes // CHECK_DATAGRAM)
    args = [proto, target, str(CHECK_PORT), str(count), str(seed)]
    if proto == "udp":
        args += ["--size", str(CHECK_DATAGRAM)]
    name = f"streamcheck-{proto}-recv"
    recv = lab.spawn(name, "B", base + ["recv"] + args + ["--timeout", "30"], stdout=subprocess.PIPE)
    try:
        lab.wait_listening("B", CHECK_PORT, recv, udp=proto == "udp", name=name)
        send = lab.spawn(f"streamcheck-{proto}-send", "A", base + ["send"] + args)
        try:
            send.wait(120)
        except subprocess.TimeoutExpired:
            lab.stop_proc(send)
            raise BenchError(f"{proto} stream check: the sender did not finish")
        out, err = recv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{proto} stream check: the receiver did not finish")
    finally:
        lab.stop_proc(recv)
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BenchError(f"{proto} stream check: no result ({(err or '').strip()[-300:]})")
    log(f"{proto} stream check: {_check_summary(res)}")
    return res


def _check_summary(res):
    unit = "bytes" if res["proto"] == "tcp" else "datagrams"
    return (
        f"{res['checked']} bytes checked, {res['corrupt']} corrupt, "
        f"{res['duplicates']} duplicated, {res['lost']} of {res['expected']} {unit} lost"
    )


# ============================================================ latency


_RTT = re.compile(r"icmp_seq=(\d+) .*time=([0-9.]+) ms")


def _ping_cmd(target, count):
    return ["ping", "-n", "-i", f"{PING_INTERVAL:g}", "-c", str(count), "-W", "1", target]


def _ping_rtts(out):
    """{icmp_seq: RTT ms} from ping's output (a reply seen twice counts once)."""
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    rtts = {}
    for m in _RTT.finditer(out):
        rtts.setdefault(int(m.group(1)), float(m.group(2)))
    return rtts


def percentile(values, q):
    """The q-th percentile (0 to 100) of `values`, linear between the closest
    ranks (as numpy's default); None for no values."""
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _rtt_stats(out, sent):
    rtts = list(_ping_rtts(out).values())
    return {
        "sent": sent,
        "received": len(rtts),
        "lost": sent - len(rtts),
        "p50_ms": percentile(rtts, 50),
        "p99_ms": percentile(rtts, 99),
        "max_ms": max(rtts) if rtts else None,
    }


def _qdisc_backlog(lab, side, dev):
    """(bytes, packets) queued in `dev`'s root qdisc (with its children), or None."""
    r = lab.run_in(side, "tc", "-s", "-j", "qdisc", "show", "dev", dev, check=False, timeout=10)
    try:
        qdiscs = json.loads(r.stdout)
    except ValueError:
        return None
    roots = [q for q in qdiscs if q.get("root")] or qdiscs[:1]
    if not roots:
        return None
    return roots[0].get("backlog", 0), roots[0].get("qlen", 0)


_SKMEM = re.compile(r"skmem:\(r(\d+),rb(\d+),t(\d+),tb(\d+)")


def _udp_queues(lab, side, port):
    """(receive queue bytes, send queue bytes, rcvbuf, sndbuf) of the UDP
    socket(s) on `port` in `side` (ss -u -m; bytes as the kernel charges
    them, buffer overhead included), summed; None if there is none."""
    r = lab.run_in(side, "ss", "-H", "-u", "-a", "-n", "-m", f"sport = :{port}", check=False, timeout=10)
    found = [tuple(int(x) for x in m.groups()) for m in _SKMEM.finditer(r.stdout)]
    if not found:
        return None
    return tuple(sum(f[i] for f in found) for i in range(4))


_MSS = re.compile(r"\bmss:(\d+)\b")
_UNACKED = re.compile(r"\bunacked:(\d+)\b")


def _tcp_in_flight(lab, target):
    """Bytes A's iperf3 TCP flow to `target` has sent and not yet had
    acknowledged (ss -ti: unacked segments x mss; ss prints no unacked: when
    there are none, which is 0), or None when ss shows no such flow."""
    r = lab.run_in(
        "A", "ss", "-H", "-t", "-i", "-n", "dst", target, "dport", f"= :{IPERF_PORT}", check=False, timeout=10
    )
    found = []
    for line in r.stdout.splitlines():
        mss = _MSS.search(line)
        if mss:
            unacked = _UNACKED.search(line)
            found.append(int(mss.group(1)) * (int(unacked.group(1)) if unacked else 0))
    return max(found) if found else None


class _QueueSampler(threading.Thread):
    """Samples the inner interfaces' qdisc backlog and the daemons' UDP
    socket queues of both sides, and the TCP flow's bytes in flight, every
    QUEUE_SAMPLE seconds until stopped."""

    def __init__(self, lab, links, udp, target):
        super().__init__(daemon=True)
        self.lab, self.links, self.udp, self.target = lab, links, udp, target
        self.stop_event = threading.Event()
        self.samples = {side: [] for side in links}
        self.in_flight = []

    def run(self):
        while not self.stop_event.wait(QUEUE_SAMPLE):
            try:
                f = _tcp_in_flight(self.lab, self.target)
            except (BenchError, subprocess.TimeoutExpired):
                f = None
            if f is not None:
                self.in_flight.append(f)
            for side, dev in self.links.items():
                try:
                    q = _qdisc_backlog(self.lab, side, dev)
                    u = _udp_queues(self.lab, side, WG_PORT) if self.udp else None
                except (BenchError, subprocess.TimeoutExpired):
                    continue
                self.samples[side].append((q, u))

    def summary(self):
        out = {}
        for side, samples in self.samples.items():
            qb = [q[0] for q, _u in samples if q]
            qp = [q[1] for q, _u in samples if q]
            rq = [u[0] for _q, u in samples if u]
            tq = [u[2] for _q, u in samples if u]
            out[side] = {
                "samples": len(samples),
                "tun_qdisc_backlog_bytes_mean": statistics.fmean(qb) if qb else None,
                "tun_qdisc_backlog_bytes_max": max(qb) if qb else None,
                "tun_qdisc_backlog_packets_max": max(qp) if qp else None,
                "udp_recv_queue_bytes_mean": statistics.fmean(rq) if rq else None,
                "udp_recv_queue_bytes_max": max(rq) if rq else None,
                "udp_send_queue_bytes_max": max(tq) if tq else None,
                "udp_rcvbuf": next((u[1] for _q, u in samples if u), None),
                "udp_sndbuf": next((u[3] for _q, u in samples if u), None),
            }
        f = self.in_flight
        out["tcp_in_flight_bytes"] = {
            "samples": len(f),
            "mean": statistics.fmean(f) if f else None,
            "max": max(f) if f else None,
        }
        return out


def _latency(lab, target, duration, links, tcp):
    """Ping RTT from A to `target` idle, then under one bulk TCP flow
    (iperf3 for `duration`, the pings for all of it but its first half
    second of slow start), and the queues sampled meanwhile; `tcp` is the
    pairing's TCP test without pings (or None)."""
    count = max(1, int(duration / PING_INTERVAL))
    idle = lab.spawn("ping-idle", "A", _ping_cmd(target, count), stdout=subprocess.PIPE)
    out, _err = idle.communicate(timeout=duration + 30)
    result = {"idle": _rtt_stats(out, count)}
    tunnel = target == INNER["B"]
    sampler = _QueueSampler(lab, links, tunnel, target)
    cmd = ["iperf3", "-c", target, "-p", str(IPERF_PORT), "-t", f"{duration:g}", "-J"]
    client = lab.spawn("iperf3-client-latency", "A", cmd, stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)
        loaded_count = max(1, int((duration - 0.5) / PING_INTERVAL))
        sampler.start()
        ping = lab.spawn("ping-loaded", "A", _ping_cmd(target, loaded_count), stdout=subprocess.PIPE)
        # the control: the same pings over the veth, outside the tunnel, meanwhile
        outside = OUTER["B"] if tunnel else None
        control = outside and lab.spawn(
            "ping-outside", "A", _ping_cmd(outside, loaded_count), stdout=subprocess.PIPE
        )
        pout, _err = ping.communicate(timeout=duration + 30)
        cout = control.communicate(timeout=duration + 30)[0] if control else None
        iout, ierr = client.communicate(timeout=duration + 60)
    except subprocess.TimeoutExpired:
        raise BenchError("the latency run's ping or iperf3 did not finish")
    finally:
        sampler.stop_event.set()
        lab.stop_proc(client)
    sampler.join(10)
    try:
        res = json.loads(iout)
        gbit = res["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError):
        raise BenchError(f"iperf3 under the pings: no result ({(ierr or iout or b'')[-300:]!r})")
    result["loaded"] = _rtt_stats(pout, loaded_count)
    result["loaded_outside_tunnel"] = _rtt_stats(cout, loaded_count) if cout is not None else None
    result["tcp_gbit_s_with_pings"] = gbit
    result["tcp_gbit_s_without_pings"] = tcp["gbit_s"] if tcp else None
    result["tcp_change_pct"] = (100.0 * (gbit / tcp["gbit_s"] - 1)) if tcp and tcp["gbit_s"] else None
    result["queues"] = sampler.summary()
    return result


def _ms(v):
    return "-" if v is None else f"{v:.2f}"


def _latency_summary(lat):
    i, ld = lat["idle"], lat["loaded"]
    with_p = f"{lat['tcp_gbit_s_with_pings']:.3f}"
    without = lat["tcp_gbit_s_without_pings"]
    change = f" (without pings {without:.3f}, {lat['tcp_change_pct']:+.1f}%)" if without else ""
    return (
        f"RTT idle p50 {_ms(i['p50_ms'])} p99 {_ms(i['p99_ms'])} ms ({i['lost']} of {i['sent']} lost); "
        f"under TCP p50 {_ms(ld['p50_ms'])} p99 {_ms(ld['p99_ms'])} max {_ms(ld['max_ms'])} ms "
        f"({ld['lost']} of {ld['sent']} lost)"
        + (
            f", outside the tunnel meanwhile p50 {_ms(lat['loaded_outside_tunnel']['p50_ms'])} "
            f"p99 {_ms(lat['loaded_outside_tunnel']['p99_ms'])} ms"
            if lat.get("loaded_outside_tunnel")
            else ""
        )
        + f"; TCP {with_p} Gbit/s with pings{change}"
    )


def _queue_summary(queues):
    parts = []
    f = queues.get("tcp_in_flight_bytes") or {}
    if f.get("samples"):
        parts.append(f"TCP in flight mean {_kb(f['mean'])} max {_kb(f['max'])}")
    for side, q in queues.items():
        if side not in ("A", "B"):
            continue
        kb = [
            f"qdisc backlog mean {_kb(q['tun_qdisc_backlog_bytes_mean'])} max "
            f"{_kb(q['tun_qdisc_backlog_bytes_max'])} ({q['tun_qdisc_backlog_packets_max'] or 0} pkts)"
        ]
        if q["udp_rcvbuf"] is not None:
            kb.append(
                f"UDP recv-q mean {_kb(q['udp_recv_queue_bytes_mean'])} max "
                f"{_kb(q['udp_recv_queue_bytes_max'])} of {_kb(q['udp_rcvbuf'])}, send-q max "
                f"{_kb(q['udp_send_queue_bytes_max'])} of {_kb(q['udp_sndbuf'])}"
            )
        parts.append(f"{side}: " + ", ".join(kb))
    return "; ".join(parts)


def _kb(v):
    return "-" if v is None else f"{v / 1024:.0f} KiB"


def _latency_ratios(pairings, wg_path):
    """vc-vc over wg-wg (the build at wg_path) of the loaded p50 and p99 RTT."""

    def lat(p):
        return p.get("latency") or {}

    vc = next((lat(p) for p in pairings if p["pairing"] == "vc-vc" and lat(p)), {})
    wg = next(
        (
            lat(p)
            for p in pairings
            if p["pairing"] == "wg-wg" and (p["wireguard_go"] or {}).get("path") == wg_path and lat(p)
        ),
        {},
    )
    out = {}
    for q in ("p50_ms", "p99_ms"):
        a, b = (vc.get("loaded") or {}).get(q), (wg.get("loaded") or {}).get(q)
        out["loaded_" + q] = a / b if a is not None and b else None
    return out


# ============================================================ the run


def _python_in(lab, side, imports, call, iface):
    """`call(iface)` (set_tso with False) by this Python in namespace `side`."""
    extra = ", False" if call == "set_tso" else ""
    lab.run_in(side, sys.executable, "-c", f"import sys; {imports}; {call}(sys.argv[1]{extra})", iface)


def run_pairing(lab, name, index, args, log, wg=None, vc=None):
    label, impl_a, impl_b = PAIRINGS[name]
    if wg is not None:
        label = label.replace("wireguard-go", f"wg-go {wg['short']}")
    vc = vc or {}
    vc_args = []
    if vc.get("threads"):
        vc_args += ["--threads", str(vc["threads"])]
        label += f" {vc['threads']}t"
    if vc.get("tun_offloads"):
        vc_args += ["--tun-offloads", vc["tun_offloads"]]
        if vc["tun_offloads"] == "off":
            label += " no-offl"
    if vc.get("fair_queue"):
        vc_args += ["--fair-queue" if vc["fair_queue"] == "on" else "--no-fair-queue"]
        label += " fq" if vc["fair_queue"] == "on" else " no-fq"
    result = pairing_record(name, label, impl_a, impl_b, wg)
    result["vpncrypt"] = vc if "vpncrypt" in (impl_a, impl_b) else None
    nodes = []
    with measured_round(result, label, log, nodes):
        if impl_a is None:
            target, pids, links = OUTER["B"], {}, dict(lab.veth)
        else:
            path = wg["path"] if wg else None
            a = Node(lab, "A", impl_a, index, path, vc_args)
            b = Node(lab, "B", impl_b, index, path, vc_args)
            nodes[:] = [a, b]
            for n in nodes:
                n.start()
            a.configure(b, args.mtu, initiator=True)
            b.configure(a, args.mtu, initiator=False)
            for n in nodes:
                if args.wireguard_go_tso == "off" and n.impl == "wireguard-go":
                    _python_in(lab, n.side, "from vpncrypt.dataplane.io import set_tso", "set_tso", n.iface)
                if args.vpncrypt_tun_qdisc == "fq_codel" and n.impl == "vpncrypt":
                    _python_in(
                        lab, n.side, "from vpncrypt.bench.qdisc import set_fq_codel", "set_fq_codel", n.iface
                    )
            if args.txqueuelen:
                for n in nodes:
                    lab.run_in(
                        n.side, "ip", "link", "set", "dev", n.iface, "txqueuelen", str(args.txqueuelen)
                    )
            wait_tunnel(lab, a, b)
            target = INNER["B"]
            pids = {"A": a.proc.pid, "B": b.proc.pid}
            links = {"A": a.iface, "B": b.iface}
            result["interfaces"] = {"A": a.iface, "B": b.iface}
            result["pids"] = dict(pids)
        for proto in ("tcp", "udp"):
            if getattr(args, "no_" + proto):
                continue
            log(f"{label}: {proto.upper()} for {args.duration:g} s")
            row = _iperf(lab, target, proto, args.duration, pids, links)
            for n in nodes:
                if n.proc.poll() is not None:
                    raise BenchError(f"{n.impl} ({n.iface}) exited during the test: {lab.log_text(n.iface)}")
            result["tests"].append(row)
            log(f"{label}: {proto.upper()} {row['gbit_s']:.3f} Gbit/s")
        if args.latency:
            log(f"{label}: ping RTT idle, then under one TCP flow, {args.duration:g} s each")
            tcp = next((t for t in result["tests"] if t["proto"] == "tcp"), None)
            result["latency"] = _latency(lab, target, args.duration, links, tcp)
            log(f"{label}: latency {_latency_summary(result['latency'])}")
        nbytes = int(args.check_mib * (1 << 20))
        for k, proto in enumerate(("tcp", "udp") if nbytes > 0 else ()):
            log(f"{label}: byte-checked {proto.upper()} stream of {nbytes} bytes")
            result["checks"].append(_stream_check(lab, proto, target, nbytes, index * 2 + k + 1, log))
        result["ok"] = all(t["gbit_s"] > 0 for t in result["tests"])
        bad = [c for c in result["checks"] if not c["ok"]]
        if not result["ok"]:
            result["error"] = "no traffic"
        elif bad:
            result["ok"] = False
            result["error"] = "; ".join(f"{c['proto']} stream check failed: {_check_summary(c)}" for c in bad)
    return result


def _ratios(pairings, wg_path=None):
    """vc-vc over wg-wg Gbit/s (wg-wg with the binary at wg_path, else the first)."""

    def tests(p):
        return {t["proto"]: t for t in p["tests"]}

    vc = next((tests(p) for p in pairings if p["pairing"] == "vc-vc"), {})
    wg = next(
        (
            tests(p)
            for p in pairings
            if p["pairing"] == "wg-wg"
            and (wg_path is None or (p["wireguard_go"] or {}).get("path") == wg_path)
        ),
        {},
    )
    out = {}
    for proto in ("tcp", "udp"):
        a, b = vc.get(proto), wg.get(proto)
        out[proto] = (a["gbit_s"] / b["gbit_s"]) if a and b and b["gbit_s"] else None
    return out


def _parse_pairings(text):
    names = []
    for raw in text.split(","):
        n = raw.strip()
        if not n:
            continue
        n = ALIASES.get(n, n)
        if n not in PAIRINGS:
            raise BenchError(f"unknown pairing {raw!r} (choose from {', '.join(PAIRINGS)})")
        if n not in names:
            names.append(n)
    if not names:
        raise BenchError("--pairings is empty")
    return names


def _result(args, names: list, builds: list, lab, pairings: list) -> dict:
    """The run's record: the machine, the versions, the settings, every
    pairing and the ratios between the implementations."""
    return {
        "command": "vpncrypt bench tunnel " + " ".join(sys.argv[3:]) if len(sys.argv) > 2 else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "versions": {
            "iperf3": version(["iperf3", "--version"]),
            "wireguard-go": builds[0]["version"] if builds else None,
            "wireguard-go-builds": [{k: b[k] for k in ("path", "version")} for b in builds],
            "vpncrypt": __import__("vpncrypt").__version__,
            "python": sys.version.split()[0],
        },
        "settings": {
            "duration": args.duration,
            "mtu": args.mtu,
            "udp_length": UDP_LEN,
            "pairings": names,
            "tcp": not args.no_tcp,
            "udp": not args.no_udp,
            "check_mib": args.check_mib,
            "txqueuelen": args.txqueuelen,
            "wireguard_go_tso": args.wireguard_go_tso,
            "latency": args.latency,
            "ping_interval": PING_INTERVAL if args.latency else None,
            "vpncrypt_tun_qdisc": args.vpncrypt_tun_qdisc,
            "proxy_connections": args.proxy_connections,
            "proxy_peer": args.proxy_peer,
            "proxy_udp_size": args.proxy_udp_size,
        },
        "run_id": lab.id,
        "namespaces": list(lab.ns.values()),
        "veth": list(lab.veth.values()),
        "pairings": pairings,
        "ratio_vpncrypt_over_wireguard_go": _ratios(pairings),
        "latency_ratios_by_wireguard_go": {b["path"]: _latency_ratios(pairings, b["path"]) for b in builds},
        "ratios_by_wireguard_go": {b["path"]: _ratios(pairings, b["path"]) for b in builds},
        "proxy_ratios": proxypair.ratios(pairings),
        "ok": all(p["ok"] for p in pairings),
    }


def run(args) -> int:
    prog = "vpncrypt bench tunnel"
    try:
        names = _parse_pairings(args.pairings)
    except BenchError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if args.proxy_connections < 0 or not 8 <= args.proxy_udp_size <= 65000:
        print(f"{prog}: need --proxy-connections >= 0 and --proxy-udp-size from 8 to 65000", file=sys.stderr)
        return 2
    if args.duration <= 0 or not 576 <= args.mtu <= 9000 or (args.no_tcp and args.no_udp):
        print(f"{prog}: need --duration > 0, --mtu from 576 to 9000, and TCP or UDP", file=sys.stderr)
        return 2
    impls = {impl for n in names for impl in PAIRINGS[n][1:] if impl}
    tools = ["ip", "wg", "iperf3", "ping", "ss", "tc"]
    if any(n in PROXY_PAIRINGS for n in names):
        tools += ["setpriv", "nsenter"]
        impls.add(args.proxy_peer)
    status, builds = preflight(prog, tools, sorted(impls), args.wireguard_go)
    if status is not None:
        return status
    threads = [t for t in args.vpncrypt_threads.split(",") if t] or [None]
    offloads = [o for o in args.vpncrypt_offloads.split(",") if o] or [None]
    fair = [f for f in args.vpncrypt_fair_queue.split(",") if f] or [None]
    if (
        any(t not in (None, "1", "2") for t in threads)
        or any(o not in (None, "on", "off") for o in offloads)
        or any(f not in (None, "on", "off") for f in fair)
    ):
        print(
            f"{prog}: --vpncrypt-threads takes 1 and 2, --vpncrypt-offloads and --vpncrypt-fair-queue "
            "on and off",
            file=sys.stderr,
        )
        return 2
    variants = [
        {"threads": int(t) if t else None, "tun_offloads": o, "fair_queue": f}
        for t in threads
        for o in offloads
        for f in fair
    ]
    if args.txqueuelen is not None and not 1 <= args.txqueuelen <= 1_000_000:
        print(f"{prog}: --txqueuelen from 1 to 1000000", file=sys.stderr)
        return 2
    plt: Any = load_pyplot(prog) if args.plot else None
    if args.plot and plt is None:
        return 1

    log = logger(prog, args.verbose)
    pairings: list[dict] = []

    def setup(lab):
        server = lab.spawn("iperf3-server", "B", ["iperf3", "-s", "-p", str(IPERF_PORT)])
        lab.wait_listening("B", IPERF_PORT, server)

    def body(lab):
        runs = [
            (name, wg, v)
            for name in names
            for wg in (builds if "wireguard-go" in PAIRINGS[name][1:] else [None])
            # (the proxy pairings' peer runs with the daemon's defaults)
            for v in (variants if "vpncrypt" in PAIRINGS[name][1:] and name not in PROXY_PAIRINGS else [None])
        ]
        for i, (name, wg, v) in enumerate(runs):
            if name in PROXY_PAIRINGS:
                wg = builds[0] if args.proxy_peer == "wireguard-go" else None
                pairings.append(proxypair.run_proxy_pairing(lab, name, i, args, log, _iperf, IPERF_PORT, wg))
            else:
                pairings.append(run_pairing(lab, name, i, args, log, wg, v))

    status, lab = run_in_lab(prog, log, setup, body)
    if status is not None:
        return status

    result = _result(args, names, builds, lab, pairings)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    if plt is not None:
        plot(args.plot, result, plt)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0 if result["ok"] else 1


def plot(path, result, plt):
    """Bars: Gbit/s (TCP, UDP) and CPU seconds per Gbit of every pairing."""
    labels, series = [], {("tcp", "gbit"): [], ("udp", "gbit"): [], ("tcp", "cpu"): [], ("udp", "cpu"): []}
    lat = []
    for p, via in _plot_rows(result["pairings"]):
        labels.append(p["label"] + (f" {via}" if via else ""))
        lat.append(p.get("latency") or {})
        tests = {t["proto"]: t for t in p["tests"] if t.get("via") == via}
        for proto in ("tcp", "udp"):
            t = tests.get(proto) or {}
            series[(proto, "gbit")].append(t.get("gbit_s") or 0)
            series[(proto, "cpu")].append((t.get("cpu_s_per_gbit") or {}).get("total") or 0)
    fig, axes = plt.subplots(
        1, 3 if any(lat) else 2, figsize=(19 if any(lat) else 13, 0.6 * len(labels) + 2.5)
    )
    ys = range(len(labels))
    if any(lat):
        ax = axes[2]
        bars = [
            ("idle", "p50_ms", "idle p50"),
            ("loaded", "p50_ms", "under TCP p50"),
            ("loaded", "p99_ms", "under TCP p99"),
        ]
        for k, (state, q, name) in enumerate(bars):
            vals = [((x.get(state) or {}).get(q) or 0) for x in lat]
            ax.barh([y + 0.27 * k for y in ys], vals, height=0.27, label=name)
            for y, v in zip(ys, vals):
                if v:
                    ax.text(v, y + 0.27 * k, f" {v:.1f}", va="center", fontsize=8)
        ax.set_yticks([y + 0.27 for y in ys])
        ax.set_yticklabels([""] * len(labels))
        ax.invert_yaxis()
        ax.set_title("ping RTT ms (lower is better)", fontsize=10)
        ax.legend(fontsize=8)
    for ax, what, title in (
        (axes[0], "gbit", "Gbit/s received (higher is better)"),
        (axes[1], "cpu", "CPU s per Gbit, both daemons (lower is better)"),
    ):
        for k, proto in enumerate(("tcp", "udp")):
            vals = series[(proto, what)]
            ax.barh([y + 0.4 * k for y in ys], vals, height=0.4, label=proto.upper())
            for y, v in zip(ys, vals):
                if v:
                    ax.text(v, y + 0.4 * k, f" {v:.2f}", va="center", fontsize=8)
        ax.set_yticks([y + 0.2 for y in ys])
        ax.set_yticklabels(labels if what == "gbit" else [""] * len(labels))
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    s = result["settings"]
    fig.suptitle(
        f"vpncrypt bench tunnel: {s['duration']:g} s per test, MTU {s['mtu']}; "
        f"{result['cpu']} ({result['cores']} cores), kernel {result['kernel']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_rows(pairings):
    """(pairing, via) for each bar group: one per pairing, and for the proxy
    pairings one per way in (socks5, forward)."""
    rows = []
    for p in pairings:
        vias = list(dict.fromkeys(t.get("via") for t in p["tests"])) or [None]
        rows += [(p, via) for via in vias]
    return rows


def _print_table(result):
    s = result["settings"]
    print(
        f"vpncrypt bench tunnel: iperf3 A->B, {s['duration']:g} s per test, tunnel MTU "
        f"{s['mtu']}, UDP -l {s['udp_length']} -b 0; {result['cpu']} ({result['cores']} cores), "
        f"kernel {result['kernel']}"
    )
    v = result["versions"]
    print(f"  vpncrypt {v['vpncrypt']} (Python {v['python']}); {v['iperf3'] or 'iperf3 ?'}")
    for b in v["wireguard-go-builds"]:
        print(f"  wg-go {b['version'].split()[-1]}: {b['path']} ({b['version']})")
    w = max([30] + [len(p["label"]) + 10 for p in result["pairings"]])
    head = (
        f"{'pairing':<{w}}{'proto':<6}{'Gbit/s':>9}{'retr/loss':>12}"
        f"{'CPU A %':>9}{'CPU B %':>9}{'CPU s/Gbit':>11}{'B link Gb/s':>13}"
        f"{'A link drops':>14}"
    )
    print_head(head)
    for p in result["pairings"]:
        if p["error"] and not p["tests"]:
            print(f"{p['label']:<{w}}FAILED: {p['error']}")
            continue
        for t in p["tests"]:
            if t["proto"] == "tcp":
                extra = f"{t['retransmits']} retr" if t.get("retransmits") is not None else "-"
            else:
                extra = f"{t['loss_pct']:.1f}% loss" if t.get("loss_pct") is not None else "-"
            cpu = t["cpu_pct"]
            ca = f"{cpu['A']:.0f}" if cpu.get("A") is not None else "-"
            cb = f"{cpu['B']:.0f}" if cpu.get("B") is not None else "-"
            per = (t.get("cpu_s_per_gbit") or {}).get("total")
            cg = f"{per:.2f}" if per is not None else "-"
            lr = f"{t['link_rx_gbit_s']:.3f}" if t.get("link_rx_gbit_s") is not None else "-"
            ld = f"{t['link_tx_dropped']}" if t.get("link_tx_dropped") is not None else "-"
            name = p["label"] + (f" {t['via']}" if t.get("via") else "")
            print(
                f"{name:<{w}}{t['proto'].upper():<6}{t['gbit_s']:>9.3f}{extra:>12}"
                f"{ca:>9}{cb:>9}{cg:>11}{lr:>13}{ld:>14}"
            )
        for c in p.get("checks", []):
            state = "ok" if c["ok"] else "FAILED"
            print(f"{'':<{w}}{c['proto'].upper():<6}byte check {state}: {_check_summary(c)}")
        if p.get("latency"):
            print(f"{'':<{w}}ping  {_latency_summary(p['latency'])}")
            print(f"{'':<{w}}queue {_queue_summary(p['latency']['queues'])}")
        if p["error"] and p["tests"]:
            print(f"{'':<{w}}FAILED: {p['error']}")
    for path, r in result.get("ratios_by_wireguard_go", {}).items():
        parts = [f"{proto.upper()} {r[proto]:.2f}x" for proto in ("tcp", "udp") if r.get(proto)]
        ver = next(
            b["version"].split()[-1] for b in result["versions"]["wireguard-go-builds"] if b["path"] == path
        )
        lr = result.get("latency_ratios_by_wireguard_go", {}).get(path) or {}
        parts += [
            f"RTT under TCP {q} {lr['loaded_' + q + '_ms']:.2f}x"
            for q in ("p50", "p99")
            if lr.get("loaded_" + q + "_ms") is not None
        ]
        if parts:
            print(f"vpncrypt<->vpncrypt over wg-go {ver}<->same: " + ", ".join(parts))
    for line in proxypair.table_lines(result, ""):
        print(line)
    print(
        "Gbit/s: received by iperf3 in B.  CPU: daemon process, % of one core; CPU s/Gbit: both "
        "daemons' CPU seconds per Gbit received.\nB link: what B's inner interface (tunnel or "
        "veth) received; A link drops: packets A's inner interface dropped\nbecause its daemon "
        "did not read them in time.  Byte check: vpncrypt.bench.streamcheck through the tunnel."
    )
    if s.get("latency"):
        print(
            f"ping: RTT of a ping every {s['ping_interval'] * 1000:g} ms, idle, then under one iperf3 TCP "
            "flow (with pings: its Gbit/s then; without: the TCP row).\nqueue: sampled every "
            f"{QUEUE_SAMPLE:g} s under that flow: the root qdisc backlog of the inner interface (the TUN, "
            "or the veth), the daemon's UDP socket receive/send queues (ss -m, as charged), and the TCP "
            "flow's unacknowledged bytes (ss -ti).\noutside the tunnel: the same pings over the veth "
            "meanwhile (the control: what the loaded machine adds without a tunnel queue)."
        )
