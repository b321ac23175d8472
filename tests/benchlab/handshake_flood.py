"""python3 -m tests.benchlab.handshake_flood: an established session while a handshake flood hits its daemon.

Needs root.  Three network namespaces: A and B joined by a veth, C joined to B
by its own veth.  In each a WireGuard daemon of the implementation under test
(vpncrypt: `vpncrypt up`; wireguard-go: `wireguard-go -f`; the victim B and
its two peers are the same implementation).  A and B hold an established
session.  A generator in A floods B's port with handshake initiations from
--sources addresses of an any-IP range (10.200.0.0/16, local in A, routed
back by B), one socket, sendmmsg in batches of 1,024 (vpncrypt.bench.
handshakeload), as fast as it goes (or --rate per second); it prints the rate
it reached and counts what B answers.  Flood kinds (--kinds):

    mac1    real initiations from static keys B does not know, with a valid
            mac1 (the generator knows B's public key) and no mac2: each costs
            B a mac1 check, and under load a cookie reply
    nomac   random bytes of an initiation's type and size (148): a bad mac1

Each implementation runs a control (no flood) and one round per flood kind.
In each round, with the flood under way (after --warmup seconds):

  * ping loss: A pings B through the tunnel every 20 ms until the round ends;
  * TCP throughput: iperf3 A->B through the tunnel for --duration seconds, and
    its fraction of the control round's;
  * the new peer: C (which B knows, but which has no session yet) starts its
    handshake (a ping); the time until C's `latest-handshake` is set, and its
    retries (its initiations, counted by an nftables counter in C, less one);
    given up after --new-peer-timeout seconds;
  * the victim's CPU: utime+stime of B's daemon (/proc/PID/stat, all threads)
    over the round, as % of one core, and the drops of B's UDP socket (the
    kernel's count of datagrams the daemon did not read in time).

The round ends when iperf3 and the new peer are done; then the flood stops.
Every namespace, veth, interface and process is removed at the end, also on
SIGINT/SIGTERM or an error.

Exit status: 0 if every implementation's control round carried traffic and
completed the new peer's handshake; 1 otherwise; 130 if interrupted.
"""

import argparse
import json
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from tests.benchlab.handshakeload import (
    IP_FREEBIND,
    IPPROTO_IP,
    SO_SNDBUFFORCE,
    UdpBatch,
    add_anyip,
    implementations,
    nomac_initiations,
    report,
    report_head,
    runs,
    source_address,
    udp_drops,
    unknown_initiations,
)
from vpncrypt.bench.nslab import add_run_arguments, logger, measured_round, CLK_TCK, WG_PORT, BenchError, Node
from vpncrypt.bench.nslab import cpu_ticks, preflight, run_in_lab, version, wait_tunnel
from vpncrypt.bench.report import cell, print_builds, print_head
from vpncrypt.bench.tunnel import IPERF_PORT
from tests.benchlab import bench_main, lab_module

KINDS = ("mac1", "nomac")
INNER = {"A": "10.77.0.1", "B": "10.77.0.2", "C": "10.77.0.3"}
OUTER_A, OUTER_B = "192.168.77.1", "192.168.77.2"
C_NET = "192.168.78"  # C .1, B .2
PING_INTERVAL = 0.02
BATCH = 1024
INITIATION_UDP_LEN = 156  # 148 bytes + the 8-byte UDP header


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=10.0, help="seconds of iperf3 per round (default 10)")
    p.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated flood kinds: mac1, nomac (default: both)"
    )
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="initiations per second the generator aims at (default 0: as fast as one generator goes)",
    )
    p.add_argument(
        "--sources",
        type=int,
        default=256,
        help="source addresses the flood comes from, 1 to 1024 (default 256)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="seconds of flood before a round's measurements start (default 1)",
    )
    p.add_argument(
        "--new-peer-timeout",
        type=float,
        default=16.0,
        help="seconds the new peer is given for its handshake (default 16: three retries of 5 s)",
    )
    add_run_arguments(p)


# ============================================================ the generator


def generate(cfg: dict) -> None:
    """The flood generator (runs in namespace A): sends until SIGTERM or
    cfg["max_seconds"], then prints one JSON line of what it did."""
    from vpncrypt.crypto import get_backend
    from vpncrypt.protocol import keys

    victim = keys.decode(cfg["public_key"])
    target = (cfg["target"][0], int(cfg["target"][1]))
    if cfg["kind"] == "mac1":
        msgs = unknown_initiations(victim, 256, get_backend("native"))
    else:
        msgs = nomac_initiations(256)
    sources = int(cfg["sources"])
    rate = float(cfg["rate"])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(IPPROTO_IP, IP_FREEBIND, 1)
    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("0.0.0.0", 0))
    fd = s.fileno()
    tx = UdpBatch(BATCH, 160)
    for i in range(BATCH):
        tx.set(i, msgs[i % len(msgs)], target, source_address(i % sources))
    rx = UdpBatch(256, 128)
    replies = {"cookie_reply": 0, "response": 0, "other": 0}
    names = {3: "cookie_reply", 2: "response"}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("started", flush=True)
    total = calls = 0
    t0 = time.monotonic()
    end = t0 + float(cfg["max_seconds"])
    now = t0
    while not stop and now < end:
        count = BATCH
        if rate > 0:
            count = min(BATCH, int(rate * (now - t0)) - total)
            if count <= 0:
                time.sleep(0.0005)
                now = time.monotonic()
                continue
        total += tx.send(fd, count)
        calls += 1
        while True:
            k = rx.recv(fd)
            for i in range(k):
                replies[names.get(rx.first_byte(i), "other")] += 1
            if k < rx.size:
                break
        now = time.monotonic()
    elapsed = now - t0
    print(
        json.dumps(
            {
                "kind": cfg["kind"],
                "sent": total,
                "seconds": elapsed,
                "rate": total / elapsed if elapsed > 0 else 0.0,
                "wanted_rate": rate,
                "sources": sources,
                "sendmmsg_calls": calls,
                "replies": replies,
                "replies_per_s": {k: v / elapsed if elapsed > 0 else 0.0 for k, v in replies.items()},
            }
        ),
        flush=True,
    )


# ============================================================ one implementation


class NewPeerCounter:
    """An nftables counter in C's namespace: C's initiations (UDP of 156
    bytes to B's port)."""

    def __init__(self, lab):
        self.lab = lab
        rules = (
            "table inet vcbench {\n chain out {\n  type filter hook output priority 0; "
            f"policy accept;\n  udp dport {WG_PORT} udp length {INITIATION_UDP_LEN} counter\n"
            " }\n}\n"
        )
        lab.run_in("C", "nft", "-f", "-", input=rules)

    def read(self) -> int:
        out = self.lab.run_in("C", "nft", "list", "chain", "inet", "vcbench", "out").stdout
        m = re.search(r"counter packets (\d+)", out)
        if not m:
            raise BenchError(f"no nftables counter in C: {out.strip()}")
        return int(m.group(1))


def _tcp(lab, seconds):
    """iperf3 TCP A->B through the tunnel: {gbit_s, retransmits, error}."""
    cmd = [
        "iperf3",
        "-c",
        INNER["B"],
        "-p",
        str(IPERF_PORT),
        "-t",
        f"{seconds:g}",
        "-J",
        "--connect-timeout",
        "5000",
    ]
    res = {}
    for attempt in range(5):
        client = lab.spawn("iperf3-client", "A", cmd, stdout=subprocess.PIPE)
        try:
            out, _err = client.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            lab.stop_proc(client)
            return {"gbit_s": 0.0, "retransmits": None, "error": "iperf3 did not finish"}
        try:
            res = json.loads(out)
        except ValueError:
            return {"gbit_s": 0.0, "retransmits": None, "error": "iperf3 printed no JSON"}
        if "busy" in res.get("error", "") and attempt < 4:
            time.sleep(0.5)
            continue
        break
    if "error" in res:
        return {"gbit_s": 0.0, "retransmits": None, "error": res["error"]}
    end = res["end"]
    return {
        "gbit_s": end["sum_received"]["bits_per_second"] / 1e9,
        "retransmits": end["sum_sent"].get("retransmits"),
        "error": None,
    }


def _new_peer(lab, c, b, counter, timeout, out):
    """C starts a fresh handshake with B; fills out{handshake_s, initiations, retries}."""
    lab.run_in("C", "wg", "set", c.iface, "peer", b.public, "remove", check=False)
    lab.run_in(
        "C",
        "wg",
        "set",
        c.iface,
        "peer",
        b.public,
        "endpoint",
        f"{C_NET}.2:{WG_PORT}",
        "allowed-ips",
        f"{INNER['B']}/32",
    )
    n0 = counter.read()
    t0 = time.monotonic()
    lab.spawn("new-peer-ping", "C", ["ping", "-c", "1", "-W", str(int(timeout) + 1), INNER["B"]])
    out.update(handshake_s=None, initiations=None, retries=None)
    while time.monotonic() - t0 < timeout:
        r = lab.run_in("C", "wg", "show", c.iface, "latest-handshakes", check=False)
        stamps = [int(x.split()[1]) for x in r.stdout.splitlines() if len(x.split()) == 2]
        if any(stamps):
            out["handshake_s"] = time.monotonic() - t0
            break
        time.sleep(0.02)
    sent = counter.read() - n0
    out["initiations"] = sent
    out["retries"] = max(0, sent - 1) if out["handshake_s"] is not None else None
    out["retries_so_far"] = max(0, sent - 1)


def _ping_result(proc):
    proc.send_signal(signal.SIGINT)  # ping prints its summary on SIGINT
    try:
        text, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
    m = re.search(r"(\d+) packets transmitted, (\d+) received", (text or b"").decode())
    if not m:
        return {"sent": None, "received": None, "loss_pct": None}
    tx, rx = int(m.group(1)), int(m.group(2))
    return {"sent": tx, "received": rx, "loss_pct": 100.0 * (tx - rx) / tx if tx else None}


def _round(lab, nodes, kind, args, counter, log):
    a, b, c = nodes
    row = {"kind": kind or "control", "flood": None, "error": None}
    gen = None
    if kind:
        cfg = {
            "target": [OUTER_B, WG_PORT],
            "public_key": b.public,
            "kind": kind,
            "rate": args.rate,
            "sources": args.sources,
            "max_seconds": 300,
        }
        gen = lab.spawn(
            f"flood-{kind}",
            "A",
            lab_module("tests.benchlab.handshake_flood", "--generate", json.dumps(cfg)),
            stdout=subprocess.PIPE,
        )
        ready, _, _ = select.select([gen.stdout], [], [], 30)
        line = gen.stdout.readline().decode() if ready else ""
        if line.strip() != "started":
            lab.stop_proc(gen)
            raise BenchError(
                f"the {kind} flood generator did not start: "
                f"{line.strip() or (gen.stderr.read() or b'').decode()[-500:]}"
            )
        time.sleep(args.warmup)
    drops0 = udp_drops(lab, "B", WG_PORT)
    cpu0, t0 = cpu_ticks(b.proc.pid), time.monotonic()
    pinger = lab.spawn(
        "ping", "A", ["ping", "-i", str(PING_INTERVAL), "-W", "1", INNER["B"]], stdout=subprocess.PIPE
    )
    newpeer = {}
    th = threading.Thread(
        target=_new_peer, args=(lab, c, b, counter, args.new_peer_timeout, newpeer), daemon=True
    )
    th.start()
    row["tcp"] = _tcp(lab, args.duration)
    th.join(args.new_peer_timeout + 60)
    row["ping"] = _ping_result(pinger)
    cpu1, t1 = cpu_ticks(b.proc.pid), time.monotonic()
    drops1 = udp_drops(lab, "B", WG_PORT)
    row["seconds"] = t1 - t0
    row["victim_cpu_pct"] = (
        100.0 * (cpu1 - cpu0) / CLK_TCK / (t1 - t0) if cpu0 is not None and cpu1 is not None else None
    )
    row["victim_socket_drops"] = drops1 - drops0 if drops0 is not None and drops1 is not None else None
    row["new_peer"] = newpeer
    if gen is not None:
        gen.send_signal(signal.SIGTERM)
        try:
            out, err = gen.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            lab.stop_proc(gen)
            out, err = b"", b"timed out"
        try:
            row["flood"] = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            row["error"] = f"the flood generator printed no result: {err.decode()[-500:]}"
    row["victim_alive"] = b.proc.poll() is None
    if not row["victim_alive"]:
        row["error"] = f"{b.impl} exited during the flood: {lab.log_text(b.iface)}"
    rate = f", {row['flood']['rate']:.0f}/s" if row["flood"] else ""
    log(
        f"{b.impl} {row['kind']}{rate}: ping loss {row['ping']['loss_pct']}, TCP "
        f"{row['tcp']['gbit_s']:.3f} Gbit/s, new peer {newpeer.get('handshake_s')}"
    )
    return row


def _configure(lab, node, text):
    node.setconf(text, timeout=600)
    lab.run_in(node.side, "ip", "address", "add", f"{INNER[node.side]}/24", "dev", node.iface)
    lab.run_in(node.side, "ip", "link", "set", "dev", node.iface, "mtu", "1420", "up")


def run_implementation(lab, impl, index, args, log, wg=None):
    label = impl if wg is None else f"wireguard-go {wg['short']}"
    result = {
        "implementation": impl,
        "label": label,
        "wireguard_go": wg,
        "rounds": [],
        "ok": False,
        "error": None,
    }
    nodes = []
    with measured_round(result, label, log, nodes):
        path = wg["path"] if wg else None
        nodes[:] = [Node(lab, side, impl, index, path) for side in "ABC"]
        a, b, c = nodes
        for n in nodes:
            n.start()
        head = "[Interface]\nPrivateKey = {}\nListenPort = %d\n" % WG_PORT
        _configure(
            lab,
            b,
            head.format(b.private) + f"\n[Peer]\nPublicKey = {a.public}\nAllowedIPs = {INNER['A']}/32\n"
            f"\n[Peer]\nPublicKey = {c.public}\nAllowedIPs = {INNER['C']}/32\n",
        )
        _configure(
            lab,
            a,
            head.format(a.private) + f"\n[Peer]\nPublicKey = {b.public}\nAllowedIPs = {INNER['B']}/32\n"
            f"Endpoint = {OUTER_B}:{WG_PORT}\n",
        )
        _configure(lab, c, head.format(c.private))
        wait_tunnel(lab, a, b)
        result["pids"] = {n.side: n.proc.pid for n in nodes}
        counter = NewPeerCounter(lab)
        for kind in [None] + args.kind_list:
            result["rounds"].append(_round(lab, nodes, kind, args, counter, log))
        control = result["rounds"][0]
        base = control["tcp"]["gbit_s"]
        for r in result["rounds"]:
            r["tcp"]["fraction_of_control"] = (r["tcp"]["gbit_s"] / base) if base else None
        errors = [r["error"] for r in result["rounds"] if r["error"]]
        result["ok"] = base > 0 and control["new_peer"].get("handshake_s") is not None and not errors
        if errors:
            result["error"] = "; ".join(errors)
        elif not result["ok"]:
            result["error"] = "the control round carried no traffic or no new handshake"
    return result


# ============================================================ the run


def run(args) -> int:
    prog = "tests.benchlab.handshake_flood"
    args.kind_list = [k.strip() for k in args.kinds.split(",") if k.strip()]
    impls = implementations(args.implementations)
    if not args.kind_list or any(k not in KINDS for k in args.kind_list) or not impls:
        print(
            f"{prog}: --kinds takes mac1 and nomac, --implementations vpncrypt and wireguard-go",
            file=sys.stderr,
        )
        return 2
    if (
        args.duration <= 0
        or args.rate < 0
        or not 1 <= args.sources <= BATCH
        or args.warmup < 0
        or args.new_peer_timeout <= 0
    ):
        print(
            f"{prog}: need --duration > 0, --rate >= 0, --sources from 1 to {BATCH}, "
            f"--warmup >= 0 and --new-peer-timeout > 0",
            file=sys.stderr,
        )
        return 2
    status, builds = preflight(prog, ["ip", "wg", "iperf3", "ping", "nft"], impls, args.wireguard_go)
    if status is not None:
        return status
    log = logger(prog, args.verbose)
    results = []

    def setup(lab):
        lab.add_namespace("C", "B", C_NET)
        add_anyip(lab, "A", "B", OUTER_A)
        server = lab.spawn("iperf3-server", "B", ["iperf3", "-s", "-p", str(IPERF_PORT)])
        lab.wait_listening("B", IPERF_PORT, server)

    def body(lab):
        for index, (impl, wg) in enumerate(runs(impls, builds)):
            results.append(run_implementation(lab, impl, index, args, log, wg))

    status, lab = run_in_lab(prog, log, setup, body)
    if status is not None:
        return status
    result = report_head(prog, builds, lab)
    result["versions"]["iperf3"] = version(["iperf3", "--version"])
    result.update(
        {
            "settings": {
                "duration": args.duration,
                "kinds": args.kind_list,
                "rate": args.rate,
                "sources": args.sources,
                "warmup": args.warmup,
                "new_peer_timeout": args.new_peer_timeout,
                "ping_interval": PING_INTERVAL,
            },
            "implementations": results,
        }
    )
    return report(result, results, args.json, print_table)


def print_table(result):
    s = result["settings"]
    rate = "as fast as one generator goes" if not s["rate"] else f"aiming at {s['rate']:.0f}/s"
    print(
        f"handshake_flood: handshake initiations at B from {s['sources']} addresses, "
        f"{rate}; iperf3 {s['duration']:g} s, ping every {s['ping_interval'] * 1000:.0f} ms; "
        f"{result['cpu']} ({result['cores']} cores), kernel {result['kernel']}"
    )
    head = (
        f"{'implementation':<28}{'flood':<9}{'sent/s':>9}{'replies/s':>10}{'ping loss':>10}"
        f"{'TCP Gb/s':>9}{'of ctrl':>8}{'new peer s':>11}{'retries':>8}{'CPU %':>7}"
        f"{'sock drops':>11}"
    )
    print_head(head)
    for imp in result["implementations"]:
        if not imp["rounds"]:
            print(f"{imp['label']:<28}FAILED: {imp['error']}")
            continue
        for r in imp["rounds"]:
            f = r["flood"] or {}
            rep = (f.get("replies_per_s") or {}).get("cookie_reply")
            np_ = r["new_peer"]
            hs = cell(np_.get("handshake_s"), ".2f", f">{result['settings']['new_peer_timeout']:g}")
            retries = np_.get("retries") if np_.get("retries") is not None else np_.get("retries_so_far")
            frac = r["tcp"].get("fraction_of_control")
            print(
                f"{imp['label']:<28}{r['kind']:<9}{cell(f.get('rate'), '.0f'):>9}"
                f"{cell(rep, '.0f'):>10}{cell(r['ping']['loss_pct'], '.1f') + '%':>10}"
                f"{r['tcp']['gbit_s']:>9.3f}{cell(frac, '.2f'):>8}{hs:>11}"
                f"{cell(retries, 'd'):>8}{cell(r['victim_cpu_pct'], '.0f'):>7}"
                f"{cell(r['victim_socket_drops'], 'd'):>11}"
            )
            if r["tcp"].get("error"):
                print(f"{'':<28}iperf3: {r['tcp']['error']}")
        if imp["error"]:
            print(f"{'':<28}FAILED: {imp['error']}")
    print_builds(result)
    print(
        "sent/s: the generator's rate; replies/s: cookie replies it received.  of ctrl: TCP "
        "throughput over the control round's.\nnew peer s: until C's latest-handshake is set "
        "(retries: its initiations less one).  CPU: the victim daemon, % of one core.\n"
        "sock drops: datagrams the kernel dropped at the victim's UDP socket (not read in time)."
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--generate"]:
        generate(json.loads(argv[1]))
        return 0
    return bench_main("tests.benchlab.handshake_flood", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
