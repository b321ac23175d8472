"""The proxy pairings of `vpncrypt bench tunnel`: `vpncrypt proxy` in A, run as
nobody with no capability (setpriv), against a vpncrypt daemon in B (or
wireguard-go: --proxy-peer), in the same lab and run as the TUN pairings:

    proxy      TCP through a SOCKS5 CONNECT (vpncrypt.bench.proxyload) and
               through a TCP forward (iperf3 to the forward's port), UDP
               through a SOCKS5 UDP ASSOCIATE (Gbit/s received and loss),
               then --proxy-connections concurrent SOCKS5 connections, each
               carrying 8 bytes to an echo server in B and back, held idle
               while the proxy's RSS is read: the memory per idle connection
    proxy-wan  the two TCP tests again with the outer path through
               vpncrypt.bench.delayrelay in B (25 ms each way, so 50 ms RTT,
               and 0.1% of the datagrams dropped each way): window scaling
               and SACK at work, against the 10.5 Mbit/s a 64 KiB window
               allows at 50 ms; the relay is Python on one core, so
               these figures are a floor (it forwards a few hundred thousand
               datagrams per 10 s test)

The tunnel's TCP runs on the proxy's own stack (the kernel's, in its user and
network namespace), so its retransmits and SACK recoveries are read from that
namespace's counters (/proc/net/snmp and netstat, entered with nsenter), and
its receiving end's TCP_INFO (window scales, SACK, RTT) from the sink in B.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from vpncrypt.bench.nslab import (
    CLK_TCK,
    INNER,
    WG_PORT,
    BenchError,
    Node,
    cpu_per_gbit,
    cpu_ticks,
    measured_round,
    pairing_record,
    wait_started,
)
from vpncrypt.selfcmd import vpncrypt_command

# --pdeathsig after the uid change, which clears the one the lab set (prctl(2)): a bench
# killed with SIGKILL takes its proxy with it, like its other processes
DROP = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
    "--bounding-set=-all",
    "--pdeathsig",
    "TERM",
]
SOCKS_PORT = 1080  # in A's namespace, on 127.0.0.1
FORWARD_PORT = 5202  # A's 127.0.0.1:5202 -> B's iperf3 (tunnel.IPERF_PORT)
SINK_PORT = 5401  # proxyload's TCP and UDP sinks in B
ECHO_PORT = 5402
RELAY_PORT = 51821  # delayrelay in B, in front of its daemon's WG_PORT
WAN_DELAY_MS = 25.0  # one way
WAN_LOSS = 0.001
WINDOW_64K_MBIT = 65536 * 8 / 0.050 / 1e6  # what a 64 KiB window carries per 50 ms RTT
PROXY_NAME = "vcbproxy"


def _nobody_dir(lab, name: str) -> str:
    os.chmod(lab.tmp, 0o711)  # nobody may pass through (not list) the lab's directory
    path = os.path.join(lab.tmp, name)
    os.makedirs(path, mode=0o700, exist_ok=True)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return path


def _config(proxy_private: str, peer_public: str, endpoint: str, mtu: int, iperf_port: int) -> str:
    return (
        f"[Interface]\nAddress = {INNER['A']}/32\nPrivateKey = {proxy_private}\nMTU = {mtu}\n\n"
        f"[Peer]\nPublicKey = {peer_public}\nEndpoint = {endpoint}\nAllowedIPs = {INNER['B']}/32\n\n"
        f"[Socks5]\nBindAddress = 127.0.0.1:{SOCKS_PORT}\n\n"
        f"[TCPClientTunnel]\nBindAddress = 127.0.0.1:{FORWARD_PORT}\nTarget = {INNER['B']}:{iperf_port}\n"
    )


class ProxyNode:
    """`vpncrypt proxy -c FILE` in A as nobody, with no capability."""

    def __init__(self, lab, index: int):
        self.lab, self.index = lab, index
        self.private = subprocess.run(
            vpncrypt_command("genkey"), capture_output=True, text=True, check=True
        ).stdout.strip()
        self.public = subprocess.run(
            vpncrypt_command("pubkey"), input=self.private + "\n", capture_output=True, text=True, check=True
        ).stdout.strip()
        self.side = "A"
        self.proc: subprocess.Popen | None = None
        self.name = f"{PROXY_NAME}{index}"
        self.identity: list[dict] = []

    def start(self, config: str) -> None:
        lab = self.lab
        home = _nobody_dir(lab, self.name)
        conf = os.path.join(home, self.name + ".conf")
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(config)
        nobody = pwd.getpwnam("nobody")
        os.chown(conf, nobody.pw_uid, nobody.pw_gid)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": home}
        cmd = DROP + vpncrypt_command("proxy", "-c", conf, "--log-level", "info")
        self.proc = proc = lab.spawn(f"vpncrypt-proxy-{self.index}", "A", cmd, env=env, log_name=self.name)
        sock = os.path.join(home, "vpncrypt", self.name + ".sock")
        wait_started(
            lab,
            proc,
            lambda: os.path.exists(sock) and " up:" in lab.log_text(self.name),
            "vpncrypt proxy (as nobody)",
            self.name,
            30,
        )
        self.identity = _identity(proc.pid)

    def alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BenchError(f"vpncrypt proxy exited during the test: {self.lab.log_text(self.name)}")

    def stop(self) -> None:
        if self.proc is not None:
            self.lab.stop_proc(self.proc, timeout=10)

    def tcp_counters(self) -> dict:
        """Its namespace's TCP counters: RetransSegs, TCPSackRecovery, ... ({} if unreadable)."""
        assert self.proc is not None
        r = subprocess.run(
            ["nsenter", "-t", str(self.proc.pid), "-n", "cat", "/proc/net/snmp", "/proc/net/netstat"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return parse_snmp(r.stdout) if r.returncode == 0 else {}

    def rss_kib(self) -> int | None:
        """VmRSS of the proxy and its helper processes, KiB."""
        assert self.proc is not None
        return tree_rss_kib(self.proc.pid)


def _identity(pid: int) -> list[dict]:
    """Who the proxy's processes run as: for it and each descendant, the uid
    and effective uid, whether it is in the host's user namespace (ours), and
    its effective and bounding capability sets (hex).  In the host's user
    namespace they are empty (setpriv); a process that made its own user
    namespace has every capability there (the kernel gives it a full set)
    and none outside, its uid outside being nobody's."""
    host_ns = os.stat("/proc/self/ns/user").st_ino
    out = []
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            in_host = os.stat(f"/proc/{p}/ns/user").st_ino == host_ns
        except OSError:
            continue
        uids = status["Uid"].split()
        out.append(
            {
                "uid": int(uids[0]),
                "euid": int(uids[1]),
                "host_user_namespace": in_host,
                "cap_eff": status["CapEff"].strip(),
                "cap_bnd": status["CapBnd"].strip(),
            }
        )
    return out


def _tree(pid: int) -> list[int]:
    """pid and its descendants (by /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def parse_snmp(text: str) -> dict:
    """{"Tcp:RetransSegs": n, "TcpExt:TCPSackRecovery": n, ...} from
    /proc/net/snmp and /proc/net/netstat (a line of names, then one of values)."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines, lines[1:]):
        n, v = names.split(), values.split()
        if n and v and n[0] == v[0] and n[0].endswith(":") and not v[1:2] == n[1:2]:
            for key, val in zip(n[1:], v[1:]):
                try:
                    out[n[0] + key] = int(val)
                except ValueError:
                    pass
    return out


def tree_rss_kib(pid: int) -> int | None:
    """VmRSS of pid and its descendants, KiB (None if pid is gone)."""
    total = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except OSError:
            if p == pid:
                return None
    return total


def _load(lab, side: str, name: str, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "vpncrypt.bench.proxyload", *args]
    return lab.spawn(name, side, cmd, stdout=subprocess.PIPE)


def _first_line(lab, p: subprocess.Popen, name: str) -> dict:
    assert p.stdout is not None
    line = p.stdout.readline()
    try:
        return json.loads(line)
    except ValueError:
        lab.stop_proc(p)
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        raise BenchError(f"{name}: no result ({err.strip()[-500:]})")


def _sink(lab, proto: str) -> subprocess.Popen:
    p = _load(lab, "B", f"proxyload-sink-{proto}", "sink", proto, str(SINK_PORT))
    _first_line(lab, p, f"the {proto} sink")
    return p


def _counter_delta(before: dict, after: dict, key: str) -> int | None:
    return after[key] - before[key] if key in before and key in after else None


def _cpu(before: dict, after: dict, wall: float) -> dict:
    return {
        k: (100.0 * (after[k] - before[k]) / CLK_TCK / wall)
        if after.get(k) is not None and before.get(k) is not None
        else None
        for k in before
    }


def _measured(proxy: ProxyNode, pids: dict, fn) -> tuple[dict, dict]:
    """fn() with the CPU of `pids` and the proxy namespace's TCP counters around it."""
    c0, t0 = proxy.tcp_counters(), time.monotonic()
    cpu0 = {k: cpu_ticks(p) for k, p in pids.items()}
    row = fn()
    wall = time.monotonic() - t0
    cpu = _cpu(cpu0, {k: cpu_ticks(p) for k, p in pids.items()}, wall)
    c1 = proxy.tcp_counters()
    row["cpu_pct"] = cpu
    row["retransmits"] = _counter_delta(c0, c1, "Tcp:RetransSegs")
    row["sack_recoveries"] = _counter_delta(c0, c1, "TcpExt:TCPSackRecovery")
    return row, cpu


def _socks_tcp(lab, duration: float) -> dict:
    sink = _sink(lab, "tcp")
    try:
        send = _load(
            lab, "A", "proxyload-send-tcp", "send", "tcp", INNER["B"], str(SINK_PORT), f"{duration:g}",
            "--socks", f"127.0.0.1:{SOCKS_PORT}",
        )  # fmt: skip
        sent = _wait_json(lab, send, duration + 60, "the SOCKS5 TCP sender")
        got = _wait_json(lab, sink, 60, "the TCP sink")
    finally:
        lab.stop_proc(sink)
    gbit = 8 * got["bytes"] / got["seconds"] / 1e9 if got["seconds"] else 0.0
    if got["bytes"] != sent["sent_bytes"]:
        raise BenchError(f"SOCKS5 TCP: {sent['sent_bytes']} bytes sent, {got['bytes']} received")
    return {
        "proto": "tcp",
        "via": "socks5",
        "gbit_s": gbit,
        "sent_gbit_s": gbit,
        "seconds": got["seconds"],
        "bytes": got["bytes"],
        "tcp_info": got["tcp_info"],
        "link_rx_gbit_s": None,
        "link_tx_dropped": None,
    }


def _socks_udp(lab, duration: float, size: int) -> dict:
    sink = _sink(lab, "udp")
    try:
        send = _load(
            lab, "A", "proxyload-send-udp", "send", "udp", INNER["B"], str(SINK_PORT), f"{duration:g}",
            "--socks", f"127.0.0.1:{SOCKS_PORT}", "--size", str(size),
        )  # fmt: skip
        sent = _wait_json(lab, send, duration + 60, "the SOCKS5 UDP sender")
        got = _wait_json(lab, sink, 90, "the UDP sink")
    finally:
        lab.stop_proc(sink)
    seconds = got["seconds"] or duration
    lost = max(0, sent["sent"] - got["distinct"])
    return {
        "proto": "udp",
        "via": "socks5",
        "gbit_s": 8 * got["bytes"] / seconds / 1e9 if got["datagrams"] else 0.0,
        "sent_gbit_s": 8 * sent["sent"] * size / duration / 1e9,
        "loss_pct": 100.0 * lost / sent["sent"] if sent["sent"] else None,
        "packets": sent["sent"],
        "lost_packets": lost,
        "seconds": seconds,
        "datagram_size": size,
        "link_rx_gbit_s": None,
        "link_tx_dropped": None,
    }


def _wait_json(lab, p: subprocess.Popen, timeout: float, name: str) -> dict:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        lab.stop_proc(p)
        raise BenchError(f"{name} did not finish")
    text = (out or b"").decode(errors="replace")
    lines = [x for x in text.splitlines() if x.strip() and "listening" not in x]
    try:
        return json.loads(lines[-1])
    except (ValueError, IndexError):
        raise BenchError(f"{name}: no result ({(err or b'').decode(errors='replace').strip()[-500:]})")


def _connections(lab, proxy: ProxyNode, count: int, log) -> dict:
    """count SOCKS5 connections held idle: errors, and the proxy's RSS before and with them."""
    echo = _load(lab, "B", "proxyload-echo", "echo", str(ECHO_PORT))
    _first_line(lab, echo, "the echo server")
    conns = None
    try:
        time.sleep(0.5)
        before = proxy.rss_kib()
        conns = _load(
            lab, "A", "proxyload-conns", "conns", INNER["B"], str(ECHO_PORT), str(count),
            "--socks", f"127.0.0.1:{SOCKS_PORT}",
        )  # fmt: skip
        opened = _first_line(lab, conns, "the SOCKS5 connections")
        time.sleep(0.5)  # idle: what the proxy keeps per connection, not what it did meanwhile
        during = proxy.rss_kib()
        return {
            "count": count,
            "open": opened["open"],
            "errors": opened["errors"],
            "open_seconds": opened["seconds"],
            "rss_before_kib": before,
            "rss_with_kib": during,
            "kib_per_connection": (during - before) / opened["open"]
            if opened["open"] and before is not None and during is not None
            else None,
        }
    finally:
        if conns is not None:
            lab.stop_proc(conns)
        lab.stop_proc(echo)


def _stop_relay(lab, relay: subprocess.Popen, wan: dict) -> None:
    """SIGTERM to the delay relay; what it forwarded and dropped goes in `wan`."""
    relay.send_signal(signal.SIGTERM)
    try:
        out, _err = relay.communicate(timeout=10)
        wan["relay"] = json.loads(out.decode().strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        wan["relay"] = None
    finally:
        lab.stop_proc(relay)


def _peer_for(proxy: ProxyNode):
    """What Node.configure needs of the other side: its key and side."""
    return SimpleNamespace(public=proxy.public, side="A")


def run_proxy_pairing(lab, name: str, index: int, args, log, iperf, iperf_port: int, wg=None) -> dict:
    """One proxy pairing (name "proxy" or "proxy-wan"), its peer in B
    vpncrypt, or the wireguard-go build `wg` when given; `iperf(lab, target,
    proto, duration, pids, links, port=)` is the TUN pairings' iperf3 run,
    its server in B on `iperf_port`."""
    wan = name == "proxy-wan"
    peer = "vpncrypt" if wg is None else "wireguard-go"
    label = "vpncrypt proxy (nobody)<->" + ("vpncrypt" if wg is None else f"wg-go {wg['short']}")
    label += " 50ms 0.1%" if wan else ""
    result = pairing_record(name, label, "vpncrypt-proxy", peer, wg)
    result["connections"] = None
    result["wan"] = {"one_way_delay_ms": WAN_DELAY_MS, "loss_each_way": WAN_LOSS} if wan else None
    nodes: list = []
    with measured_round(result, label, log, nodes):
        b = Node(lab, "B", peer, index, wg["path"] if wg else None)
        proxy = ProxyNode(lab, index)
        nodes[:] = [b, proxy]
        b.start()
        b.configure(_peer_for(proxy), args.mtu, initiator=False)  # type: ignore[arg-type]
        endpoint = f"{lab.outer['B']}:{WG_PORT}"
        if wan:
            relay = lab.spawn(
                "delayrelay", "B",
                [sys.executable, "-m", "vpncrypt.bench.delayrelay", str(RELAY_PORT), "127.0.0.1",
                 str(WG_PORT), f"{WAN_DELAY_MS:g}", f"{WAN_LOSS:g}", str(index + 1)],
                stdout=subprocess.PIPE,
            )  # fmt: skip
            _first_line(lab, relay, "the delay relay")
            nodes.append(SimpleNamespace(stop=lambda: _stop_relay(lab, relay, result["wan"])))
            endpoint = f"{lab.outer['B']}:{RELAY_PORT}"
        proxy.start(_config(proxy.private, b.public, endpoint, args.mtu, iperf_port))
        assert proxy.proc is not None and b.proc is not None
        pids = {"A": proxy.proc.pid, "B": b.proc.pid}
        result["pids"] = dict(pids)
        result["interfaces"] = {"B": b.iface}
        result["proxy_identity"] = proxy.identity
        _run_tests(lab, result, proxy, b, pids, args, log, iperf, wan)
        result["ok"] = bool(result["tests"]) and all(t["gbit_s"] > 0 for t in result["tests"])
        c = result["connections"]
        if not result["ok"]:
            result["error"] = "no traffic"
        elif c is not None and (c["errors"] or c["open"] != c["count"]):
            result["ok"] = False
            result["error"] = f"{c['open']} of {c['count']} SOCKS5 connections: {'; '.join(c['errors'])}"
    return result


def _run_tests(lab, result, proxy, b, pids, args, log, iperf, wan) -> None:
    label = result["label"]
    # the first connection makes the handshake: not part of a measured test
    warm = _load(lab, "B", "proxyload-warm", "echo", str(ECHO_PORT))
    try:
        _first_line(lab, warm, "the echo server")
        _wait_json(
            lab,
            _load(lab, "A", "proxyload-warm-conn", "conns", INNER["B"], str(ECHO_PORT), "1",
                  "--socks", f"127.0.0.1:{SOCKS_PORT}", "--no-hold"),
            60,
            "the first SOCKS5 connection",
        )  # fmt: skip
    finally:
        lab.stop_proc(warm)
    links = {"B": b.iface}
    steps = []
    if not args.no_tcp:
        steps.append(("TCP through SOCKS5", lambda: _socks_tcp(lab, args.duration)))
        steps.append(("TCP through the forward", lambda: _forward_tcp(lab, args, pids, links, iperf)))
    if not args.no_udp and not wan:
        steps.append(("UDP through SOCKS5", lambda: _socks_udp(lab, args.duration, args.proxy_udp_size)))
    for what, fn in steps:
        log(f"{label}: {what} for {args.duration:g} s")
        row, cpu = _measured(proxy, pids, fn)
        row["cpu_s_per_gbit"] = cpu_per_gbit(cpu, row["gbit_s"])
        proxy.alive()
        result["tests"].append(row)
        log(f"{label}: {what} {row['gbit_s']:.3f} Gbit/s")
    if not wan and args.proxy_connections > 0:
        log(f"{label}: {args.proxy_connections} concurrent SOCKS5 connections")
        result["connections"] = c = _connections(lab, proxy, args.proxy_connections, log)
        proxy.alive()
        log(f"{label}: {c['open']} of {c['count']} open, {c['kib_per_connection']} KiB each")


def _forward_tcp(lab, args, pids, links, iperf) -> dict:
    row = iperf(lab, "127.0.0.1", "tcp", args.duration, {}, links, port=FORWARD_PORT)
    row["via"] = "forward"
    return row


def _rows(pairings: list, name: str) -> dict:
    """{(proto, via): test row} of the first pairing called name."""
    p = next((p for p in pairings if p["pairing"] == name), None)
    return {(t["proto"], t.get("via")): t for t in p["tests"]} if p else {}


def ratios(pairings: list) -> dict:
    """The proxy's Gbit/s over the vc-vc pairing's (TUN) of the same run, and
    the 50 ms RTT run's Mbit/s over what a 64 KiB window allows there."""
    tun, px, wan = _rows(pairings, "vc-vc"), _rows(pairings, "proxy"), _rows(pairings, "proxy-wan")

    def over(a, b):
        return a["gbit_s"] / b["gbit_s"] if a and b and b["gbit_s"] else None

    out: dict = {"window_64k_mbit_s_at_50ms": WINDOW_64K_MBIT}
    for proto, via in (("tcp", "socks5"), ("tcp", "forward"), ("udp", "socks5")):
        out[f"{proto}_{via}_over_tun"] = over(px.get((proto, via)), tun.get((proto, None)))
    for via in ("socks5", "forward"):
        t = wan.get(("tcp", via))
        out[f"wan_tcp_{via}_over_64k_window"] = (1000 * t["gbit_s"] / WINDOW_64K_MBIT) if t else None
    return out


def table_lines(result: dict, pad: str) -> list[str]:
    """The proxy pairings' lines under the table: connections, TCP_INFO, ratios."""
    lines = []
    for p in result["pairings"]:
        c = p.get("connections")
        if c:
            per = c["kib_per_connection"]
            lines.append(
                f"{p['label']}: {c['open']} of {c['count']} concurrent SOCKS5 connections open and "
                f"echoed in {c['open_seconds']:.1f} s, {len(c['errors'])} errors; proxy RSS "
                f"{c['rss_before_kib']} -> {c['rss_with_kib']} KiB: "
                + (f"{per:.1f} KiB per idle connection" if per is not None else "-")
            )
        for t in p["tests"]:
            i = t.get("tcp_info")
            if i:
                lines.append(
                    f"{p['label']} {t['via']}: receiver's TCP_INFO: window scaling "
                    f"{'on' if i['window_scaling'] else 'OFF'} (scale {i['snd_wscale']}/{i['rcv_wscale']}), "
                    f"SACK {'on' if i['sack'] else 'OFF'}, rcv RTT {i['rcv_rtt_ms']:.1f} ms, "
                    f"rcv_space {i['rcv_space'] // 1024} KiB; sender's SACK recoveries "
                    f"{t.get('sack_recoveries')}"
                )
        relay = (p.get("wan") or {}).get("relay")
        if relay:
            total = relay["forwarded"] + relay["dropped"]
            lines.append(
                f"{p['label']}: the relay forwarded {relay['forwarded']} datagrams and dropped "
                f"{relay['dropped']} ({100 * relay['dropped'] / max(1, total):.2f}%)"
            )
    r = result.get("proxy_ratios") or {}
    parts = [
        f"{k.replace('_over_tun', '').replace('_', ' ').upper()} {v:.0%}"
        for k, v in r.items()
        if k.endswith("_over_tun") and v is not None
    ]
    if parts:
        lines.append("proxy over vpncrypt<->vpncrypt (TUN), same run: " + ", ".join(parts))
    wan = [
        f"{via} {r[f'wan_tcp_{via}_over_64k_window']:.1f}x"
        for via in ("socks5", "forward")
        if r.get(f"wan_tcp_{via}_over_64k_window") is not None
    ]
    if wan:
        lines.append(
            f"proxy TCP at 50 ms RTT, 0.1% loss over what a 64 KiB window allows "
            f"({WINDOW_64K_MBIT:.1f} Mbit/s): " + ", ".join(wan)
        )
    if any(p["pairing"] in ("proxy", "proxy-wan") for p in result["pairings"]):
        lines.append(
            "proxy rows: socks5 is vpncrypt.bench.proxyload (Gbit/s received by its sink in B), forward "
            "is iperf3 through the TCP forward; CPU A is the proxy (as nobody); retr are the proxy "
            "namespace's TCP retransmits (its stack sends through the tunnel)."
        )
    return [pad + line for line in lines]
