"""vpncrypt bench tunnel: iperf3 through real tunnels, vpncrypt against wireguard-go.

Needs root.  Two network namespaces (A and B) joined by a veth pair; in each a
WireGuard daemon with a TUN interface; iperf3 from A to B through the tunnel:
TCP (`iperf3 -c B -t T -J`) and UDP (`iperf3 -u -l 1392 -b 0`: as fast as the
client sends; Gbit/s received and loss are reported).  Pairings, in one run:

    vc-vc    vpncrypt <-> vpncrypt
    vc-wg    vpncrypt (A, sender) <-> wireguard-go (B, receiver)
    wg-wg    wireguard-go <-> wireguard-go (the system's wireguard-go)
    veth     the plain veth, no tunnel: the ceiling

Both implementations are started the same way, unconfigured, inside the
namespace (`vpncrypt up IFACE` through this Python, `wireguard-go -f IFACE`),
get keys from their own genkey (`vpncrypt genkey` / `wg genkey`), and are
configured along one path: `wg setconf` over the UAPI socket, `ip addr add`,
`ip link set mtu MTU up`.

CPU of each daemon process is the utime+stime delta of /proc/PID/stat (all of
its threads) over the iperf3 run, as % of one core (so above 100% means more
than one core).  Every namespace, veth, interface and process is removed at
the end, also on SIGINT/SIGTERM or an error.

Exit status: 0 if every pairing carried traffic; 1 otherwise; 130 if interrupted.
"""
import argparse
import atexit
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from vpncrypt.bench.machine import cpu_model
from vpncrypt.selfcmd import vpncrypt_command

PAIRINGS = {
    # name: (label, implementation in A, implementation in B)
    "vc-vc": ("vpncrypt<->vpncrypt", "vpncrypt", "vpncrypt"),
    "vc-wg": ("vpncrypt<->wireguard-go", "vpncrypt", "wireguard-go"),
    "wg-wg": ("wireguard-go<->wireguard-go", "wireguard-go", "wireguard-go"),
    "veth": ("veth (no tunnel)", None, None),
}
ALIASES = {"vpncrypt": "vc-vc", "mixed": "vc-wg", "wireguard-go": "wg-wg", "wggo": "wg-wg",
           "plain": "veth"}
OUTER = {"A": "192.168.77.1", "B": "192.168.77.2"}
INNER = {"A": "10.77.0.1", "B": "10.77.0.2"}
WG_PORT = 51820
IPERF_PORT = 5201
UDP_LEN = 1392
SOCKET_DIR = "/var/run/wireguard"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    pass


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=10.0,
                   help="seconds of iperf3 per test (default 10)")
    p.add_argument("--pairings", default=",".join(PAIRINGS),
                   help="comma-separated subset of " + ", ".join(PAIRINGS) +
                        " (default: all, in that order)")
    p.add_argument("--mtu", type=int, default=1420, help="tunnel MTU (default 1420)")
    p.add_argument("--no-tcp", action="store_true", help="skip the TCP tests")
    p.add_argument("--no-udp", action="store_true", help="skip the UDP tests")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log every step (and each process started) on stderr")


# ============================================================ processes

def _pdeathsig():
    """In the child before exec: SIGTERM it if the bench dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)          # PR_SET_PDEATHSIG
    except Exception:
        pass


def _run(cmd, *, timeout=30, check=True, input=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` failed ({r.returncode}): "
                         f"{(r.stderr or r.stdout).strip()}")
    return r


def _cpu_ticks(pid):
    """utime + stime of the whole process (all threads), in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])          # fields 14 and 15
    except (OSError, IndexError, ValueError):
        return None


class Lab:
    """Namespaces, veth and every process of one run; close() removes all of it."""

    def __init__(self, log):
        self.log = log
        self.id = secrets.token_hex(3)
        self.ns = {"A": f"vcbA-{self.id}", "B": f"vcbB-{self.id}"}
        self.veth = {"A": f"vcbva{self.id}", "B": f"vcbvb{self.id}"}
        self.tmp = tempfile.mkdtemp(prefix=f"vpncrypt-bench-{self.id}-")
        self.procs = []           # (name, Popen)
        self.ifaces = []          # tunnel interface names (their UAPI sockets)
        self.made_ns = []
        self.closed = False

    # -- setup
    def setup(self):
        for side, ns in self.ns.items():
            _run(["ip", "netns", "add", ns])
            self.made_ns.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "link", "add", self.veth["A"], "netns", self.ns["A"], "type", "veth",
              "peer", "name", self.veth["B"], "netns", self.ns["B"]])
        for side in "AB":
            _run(["ip", "-n", self.ns[side], "address", "add", f"{OUTER[side]}/24",
                  "dev", self.veth[side]])
            _run(["ip", "-n", self.ns[side], "link", "set", self.veth[side], "up"])
        self.log(f"run {self.id}: namespaces {self.ns['A']} {self.ns['B']}, "
                 f"veth {self.veth['A']}/{self.veth['B']}", always=True)

    def ns_cmd(self, side, *cmd):
        return ["ip", "netns", "exec", self.ns[side], *cmd]

    def run_in(self, side, *cmd, **kw):
        return _run(self.ns_cmd(side, *cmd), **kw)

    def spawn(self, name, side, cmd, *, env=None, log_name=None, stdout=None):
        """Start a process in a namespace (`ip netns exec` execs it, so the pid
        is the process itself)."""
        if stdout is None:
            stdout = open(os.path.join(self.tmp, (log_name or name) + ".log"), "wb")
        try:
            p = subprocess.Popen(self.ns_cmd(side, *cmd), stdout=stdout, stderr=subprocess.STDOUT
                                 if stdout is not subprocess.PIPE else subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                 preexec_fn=_pdeathsig)
        finally:
            if hasattr(stdout, "close"):
                stdout.close()
        self.procs.append((name, p))
        self.log(f"pid {p.pid} {name} in {self.ns[side]}: {' '.join(cmd)}", pid=True)
        return p

    def log_text(self, name):
        try:
            with open(os.path.join(self.tmp, name + ".log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    # -- teardown
    def stop_proc(self, p, timeout=5.0):
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        for s in (p.stdout, p.stderr):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass

    def _kill_namespace_pids(self, ns):
        """Anything still running in one of our own namespaces (e.g. a child
        whose Popen an interrupt cut short) is ours: end it by pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                               timeout=10)
            pids = [int(x) for x in r.stdout.split() if x.isdigit()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
                for p in pids:      # reap our own children among them
                    try:
                        os.waitpid(p, os.WNOHANG)
                    except ChildProcessError:
                        pass
                time.sleep(0.05)

    def close(self):
        if self.closed:
            return
        self.closed = True
        # Cleanup must finish even if another SIGINT/SIGTERM arrives meanwhile.
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):
                pass
        try:
            for _name, p in reversed(self.procs):
                if p.poll() is None:
                    try:
                        p.send_signal(signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            for _name, p in reversed(self.procs):
                self.stop_proc(p)
            for ns in self.made_ns:
                self._kill_namespace_pids(ns)
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            for iface in self.ifaces:
                try:
                    os.unlink(os.path.join(SOCKET_DIR, iface + ".sock"))
                except OSError:
                    pass
            shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            for sig, h in old.items():
                try:
                    signal.signal(sig, h)
                except (ValueError, OSError):
                    pass


# ============================================================ daemons

class Node:
    def __init__(self, lab, side, impl, index):
        self.lab = lab
        self.side = side
        self.impl = impl
        self.iface = f"{'vcb' if impl == 'vpncrypt' else 'wgb'}{side.lower()}{index}{lab.id}"
        self.proc = None
        self.private, self.public = self._keys()

    def _keys(self):
        if self.impl == "vpncrypt":
            gen = vpncrypt_command("genkey")
            pub = vpncrypt_command("pubkey")
        else:
            gen, pub = ["wg", "genkey"], ["wg", "pubkey"]
        private = _run(gen).stdout.strip()
        public = _run(pub, input=private + "\n").stdout.strip()
        return private, public

    @property
    def sock(self):
        return os.path.join(SOCKET_DIR, self.iface + ".sock")

    def start(self):
        lab = self.lab
        lab.ifaces.append(self.iface)
        if self.impl == "vpncrypt":
            # this very Python, so the daemon runs from the same install as the bench
            cmd = vpncrypt_command("up", self.iface, "--log-level", "warning")
            env = dict(os.environ)
        else:
            cmd = ["wireguard-go", "-f", self.iface]
            env = {**os.environ, "WG_PROCESS_FOREGROUND": "1", "LOG_LEVEL": "error"}
        self.proc = lab.spawn(f"{self.impl}-{self.side}", self.side, cmd, env=env,
                              log_name=self.iface)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                raise BenchError(f"{self.impl} ({self.iface}) exited with "
                                 f"{self.proc.returncode}: {lab.log_text(self.iface)}")
            if time.monotonic() > deadline:
                raise BenchError(f"{self.impl} ({self.iface}) made no UAPI socket in 20 s")
            time.sleep(0.05)

    def configure(self, other, mtu, initiator):
        """The same path for both implementations: wg setconf over the UAPI,
        then ip addr / ip link."""
        lines = ["[Interface]", f"PrivateKey = {self.private}", f"ListenPort = {WG_PORT}", "",
                 "[Peer]", f"PublicKey = {other.public}", f"AllowedIPs = {INNER[other.side]}/32"]
        if initiator:
            lines.append(f"Endpoint = {OUTER[other.side]}:{WG_PORT}")
        path = os.path.join(self.lab.tmp, self.iface + ".conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.lab.run_in(self.side, "wg", "setconf", self.iface, path)
        self.lab.run_in(self.side, "ip", "address", "add", f"{INNER[self.side]}/24",
                        "dev", self.iface)
        self.lab.run_in(self.side, "ip", "link", "set", "dev", self.iface, "mtu", str(mtu), "up")

    def stop(self):
        if self.proc is not None:
            self.lab.stop_proc(self.proc)
            deadline = time.monotonic() + 5      # the TUN goes with the process
            while time.monotonic() < deadline and self.lab.run_in(
                    self.side, "ip", "link", "show", self.iface, check=False).returncode == 0:
                time.sleep(0.05)


# ============================================================ iperf3

def _link_stats(lab, side, dev):
    r = lab.run_in(side, "ip", "-s", "-j", "link", "show", dev, check=False)
    try:
        return json.loads(r.stdout)[0]["stats64"]
    except (ValueError, IndexError, KeyError):
        return None


def _iperf(lab, target, proto, duration, pids, links):
    """One iperf3 client run from A; returns a result dict with the CPU of
    `pids` and the counters of the inner `links` (A's sends, B's receives)."""
    cmd = ["iperf3", "-c", target, "-p", str(IPERF_PORT), "-t", f"{duration:g}", "-J"]
    if proto == "udp":
        cmd += ["-u", "-l", str(UDP_LEN), "-b", "0", "--get-server-output"]
    before = {k: _cpu_ticks(p) for k, p in pids.items()}
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
        after = {k: _cpu_ticks(p) for k, p in pids.items()}
        st1 = {side: _link_stats(lab, side, dev) for side, dev in links.items()}
        try:
            res = json.loads(out)
        except ValueError:
            raise BenchError(f"iperf3 {proto} to {target}: no JSON ({err.strip() or out[:300]})")
        if "error" in res and "busy" in res["error"] and attempt < 4:
            time.sleep(0.5)       # the server still finishing the previous test
            before = {k: _cpu_ticks(p) for k, p in pids.items()}
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
        if received_bps is None:           # no server report: sent x delivered fraction
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
    row["link_rx_gbit_s"] = (8 * (b1["rx"]["bytes"] - b0["rx"]["bytes"]) / wall / 1e9
                             if b0 and b1 else None)
    row["link_tx_dropped"] = (a1["tx"]["dropped"] - a0["tx"]["dropped"]) if a0 and a1 else None
    row["cpu_pct"] = {}
    for k in pids:
        b, a = before.get(k), after.get(k)
        row["cpu_pct"][k] = (100.0 * (a - b) / CLK_TCK / wall) if a is not None and b is not None else None
    return row


def _wait_listening(lab, side, port, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = lab.run_in(side, "ss", "-Hltn", f"sport = :{port}", check=False)
        if r.returncode == 0 and r.stdout.strip():
            return
        if proc.poll() is not None:
            raise BenchError(f"iperf3 server exited: {lab.log_text('iperf3-server')}")
        time.sleep(0.05)
    raise BenchError("iperf3 server is not listening")


def _wait_tunnel(lab, a, b, timeout=15):
    """Ping through the tunnel until the handshake is done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = lab.run_in("A", "ping", "-c", "1", "-W", "1", INNER["B"], check=False, timeout=10)
        if r.returncode == 0:
            return
        for n in (a, b):
            if n.proc.poll() is not None:
                raise BenchError(f"{n.impl} ({n.iface}) exited: {lab.log_text(n.iface)}")
    raise BenchError(f"no ping through the {a.impl}<->{b.impl} tunnel within {timeout} s")


# ============================================================ the run

def run_pairing(lab, name, index, args, log):
    label, impl_a, impl_b = PAIRINGS[name]
    result = {"pairing": name, "label": label, "a": impl_a, "b": impl_b, "ok": False,
              "error": None, "tests": []}
    nodes = []
    try:
        if impl_a is None:
            target, pids, links = OUTER["B"], {}, dict(lab.veth)
        else:
            a, b = Node(lab, "A", impl_a, index), Node(lab, "B", impl_b, index)
            nodes = [a, b]
            for n in nodes:
                n.start()
            a.configure(b, args.mtu, initiator=True)
            b.configure(a, args.mtu, initiator=False)
            _wait_tunnel(lab, a, b)
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
                    raise BenchError(f"{n.impl} ({n.iface}) exited during the test: "
                                     f"{lab.log_text(n.iface)}")
            result["tests"].append(row)
            log(f"{label}: {proto.upper()} {row['gbit_s']:.3f} Gbit/s")
        result["ok"] = all(t["gbit_s"] > 0 for t in result["tests"])
        if not result["ok"]:
            result["error"] = "no traffic"
    except BenchError as e:
        result["error"] = str(e)
        log(f"{label}: FAILED: {e}", always=True)
    finally:
        for n in nodes:
            n.stop()
    return result


def _ratios(pairings):
    by = {p["pairing"]: {t["proto"]: t for t in p["tests"]} for p in pairings}
    out = {}
    for proto in ("tcp", "udp"):
        vc = by.get("vc-vc", {}).get(proto)
        wg = by.get("wg-wg", {}).get(proto)
        out[proto] = (vc["gbit_s"] / wg["gbit_s"]) if vc and wg and wg["gbit_s"] else None
    return out


def _version(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


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


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run(args) -> int:
    prog = "vpncrypt bench tunnel"
    try:
        names = _parse_pairings(args.pairings)
    except BenchError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if args.duration <= 0 or not 576 <= args.mtu <= 9000 or (args.no_tcp and args.no_udp):
        print(f"{prog}: need --duration > 0, --mtu from 576 to 9000, and TCP or UDP",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print(f"{prog}: needs root (it creates network namespaces, a veth pair and TUN "
              f"devices); run it as root, e.g. `sudo vpncrypt bench tunnel`", file=sys.stderr)
        return 1
    tools = ["ip", "wg", "iperf3", "ping", "ss"]
    if any("wireguard-go" in PAIRINGS[n][1:] for n in names):
        tools.append("wireguard-go")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        print(f"{prog}: missing tools: {', '.join(missing)} (Debian: apt install iproute2 "
              f"wireguard-tools wireguard-go iperf3 iputils-ping)", file=sys.stderr)
        return 1

    def log(msg, always=False, pid=False):
        if args.verbose or (always and not pid):
            print(f"{prog}: {msg}", file=sys.stderr, flush=True)

    lab = Lab(log)
    atexit.register(lab.close)
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, _raise_interrupt)
    pairings = []
    try:
        try:
            lab.setup()
            server = lab.spawn("iperf3-server", "B", ["iperf3", "-s", "-p", str(IPERF_PORT)])
            _wait_listening(lab, "B", IPERF_PORT, server)
        except BenchError as e:
            print(f"{prog}: setup failed: {e}", file=sys.stderr)
            return 1
        for i, name in enumerate(names):
            pairings.append(run_pairing(lab, name, i, args, log))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; cleaning up", file=sys.stderr, flush=True)
        lab.close()
        return 130
    finally:
        lab.close()
        for sig, h in old.items():
            signal.signal(sig, h)
        atexit.unregister(lab.close)

    result = {
        "command": "vpncrypt bench tunnel " + " ".join(sys.argv[3:]) if len(sys.argv) > 2 else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "versions": {"iperf3": _version(["iperf3", "--version"]),
                     "wireguard-go": _version(["wireguard-go", "--version"])
                     if shutil.which("wireguard-go") else None,
                     "vpncrypt": __import__("vpncrypt").__version__,
                     "python": sys.version.split()[0]},
        "settings": {"duration": args.duration, "mtu": args.mtu, "udp_length": UDP_LEN,
                     "pairings": names, "tcp": not args.no_tcp, "udp": not args.no_udp},
        "run_id": lab.id,
        "namespaces": list(lab.ns.values()),
        "veth": list(lab.veth.values()),
        "pairings": pairings,
        "ratio_vpncrypt_over_wireguard_go": _ratios(pairings),
        "ok": all(p["ok"] for p in pairings),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    return 0 if result["ok"] else 1


def _print_table(result):
    s = result["settings"]
    print(f"vpncrypt bench tunnel: iperf3 A->B, {s['duration']:g} s per test, tunnel MTU "
          f"{s['mtu']}, UDP -l {s['udp_length']} -b 0; {result['cpu']} ({result['cores']} cores), "
          f"kernel {result['kernel']}, {result['versions']['wireguard-go'] or ''}")
    head = (f"{'pairing':<30}{'proto':<6}{'Gbit/s':>9}{'retr/loss':>12}"
            f"{'CPU A %':>9}{'CPU B %':>9}{'B link Gb/s':>13}{'A link drops':>14}")
    print(head)
    print("-" * len(head))
    for p in result["pairings"]:
        if p["error"] and not p["tests"]:
            print(f"{p['label']:<30}FAILED: {p['error']}")
            continue
        for t in p["tests"]:
            if t["proto"] == "tcp":
                extra = f"{t['retransmits']} retr" if t.get("retransmits") is not None else "-"
            else:
                extra = f"{t['loss_pct']:.1f}% loss" if t.get("loss_pct") is not None else "-"
            cpu = t["cpu_pct"]
            ca = f"{cpu['A']:.0f}" if cpu.get("A") is not None else "-"
            cb = f"{cpu['B']:.0f}" if cpu.get("B") is not None else "-"
            lr = f"{t['link_rx_gbit_s']:.3f}" if t.get("link_rx_gbit_s") is not None else "-"
            ld = f"{t['link_tx_dropped']}" if t.get("link_tx_dropped") is not None else "-"
            print(f"{p['label']:<30}{t['proto'].upper():<6}{t['gbit_s']:>9.3f}{extra:>12}"
                  f"{ca:>9}{cb:>9}{lr:>13}{ld:>14}")
        if p["error"] and p["tests"]:
            print(f"{'':<30}FAILED: {p['error']}")
    r = result["ratio_vpncrypt_over_wireguard_go"]
    parts = [f"{proto.upper()} {r[proto]:.2f}x" for proto in ("tcp", "udp") if r.get(proto)]
    if parts:
        print("vpncrypt<->vpncrypt over wireguard-go<->wireguard-go: " + ", ".join(parts))
    print("Gbit/s: received by iperf3 in B.  CPU: daemon process, % of one core.  B link: what "
          "B's inner interface (tunnel or veth) received;\nA link drops: packets A's inner "
          "interface dropped because its daemon did not read them in time.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="vpncrypt bench tunnel", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    raise SystemExit(run(ap.parse_args()))
