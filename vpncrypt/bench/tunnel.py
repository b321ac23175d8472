"""vpncrypt bench tunnel: iperf3 through real tunnels, vpncrypt against wireguard-go.

Needs root.  Two network namespaces (A and B) joined by a veth pair; in each a
WireGuard daemon with a TUN interface; iperf3 from A to B through the tunnel:
TCP (`iperf3 -c B -t T -J`) and UDP (`iperf3 -u -l 1392 -b 0`: as fast as the
client sends; Gbit/s received and loss are reported).  Pairings, in one run:

    vc-vc    vpncrypt <-> vpncrypt
    vc-wg    vpncrypt (A, sender) <-> wireguard-go (B, receiver)
    wg-wg    wireguard-go <-> wireguard-go
    veth     the plain veth, no tunnel: the ceiling

The wireguard-go binary is the one on PATH, or --wireguard-go PATH; given more
than once (e.g. Debian 12's /usr/bin/wireguard-go and Debian 13's, fetched by
tests/tools/fetch-wireguard-go.sh), every pairing with wireguard-go runs once
per binary, in the same run.  Each binary's `--version` is in the table and the
JSON.

After iperf3, each pairing carries a byte-checked TCP stream and UDP datagram
stream of --check-mib MiB from A to B (vpncrypt.bench.streamcheck): every byte
that arrives is compared with what was sent; corruption or duplication fails
the pairing, UDP loss is counted.

Both implementations are started the same way, unconfigured, inside the
namespace (`vpncrypt up IFACE` through this Python, `wireguard-go -f IFACE`),
get keys from their own genkey (`vpncrypt genkey` / `wg genkey`), and are
configured along one path: `wg setconf` over the UAPI socket, `ip addr add`,
`ip link set mtu MTU up`.

CPU of each daemon process is the utime+stime delta of /proc/PID/stat (all of
its threads) over the iperf3 run, as % of one core (so above 100% means more
than one core), and per Gbit/s received: CPU seconds per Gbit (A, B and both),
so that implementations at different speeds compare.  --plot FILE.png draws
the throughput and CPU per Gbit of every pairing (matplotlib).  Every namespace, veth, interface and process is removed at
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
CHECK_PORT = 5301
CHECK_DATAGRAM = 1200        # UDP check datagrams (under a 1228-byte MTU, IP fragments)
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
    p.add_argument("--wireguard-go", action="append", dest="wireguard_go", metavar="PATH",
                   help="wireguard-go binary for the wireguard-go peers (default: the one on "
                        "PATH); repeat it to compare builds in one run")
    p.add_argument("--wireguard-go-tso", choices=("on", "off"), default="on",
                   help="off: TCP segmentation offload off on wireguard-go's TUN (as `ethtool "
                        "-K IFACE tso off`), so that it reads no TCP super-packets")
    p.add_argument("--vpncrypt-threads", default="", metavar="N[,N]",
                   help="vpncrypt's --threads (1 or 2); a list runs each vpncrypt pairing once "
                        "per value (default: the daemon's default)")
    p.add_argument("--vpncrypt-offloads", default="", metavar="on|off[,...]",
                   help="vpncrypt's --tun-offloads; a list runs each vpncrypt pairing once per "
                        "value (default: on)")
    p.add_argument("--check-mib", type=float, default=16.0,
                   help="MiB of byte-checked TCP and of UDP stream per pairing (default 16; "
                        "0: no check)")
    p.add_argument("--txqueuelen", type=int, default=None,
                   help="set both tunnel interfaces' txqueuelen (default: as the daemon left it)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="plot Gbit/s and CPU per Gbit of every pairing (needs matplotlib)")
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
    def __init__(self, lab, side, impl, index, wg_path=None, vc_args=()):
        self.lab = lab
        self.side = side
        self.impl = impl
        self.wg_path = wg_path
        self.vc_args = list(vc_args)
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
            cmd = vpncrypt_command("up", self.iface, "--log-level", "warning", *self.vc_args)
            env = dict(os.environ)
        else:
            cmd = [self.wg_path or "wireguard-go", "-f", self.iface]
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
    row["cpu_s_per_gbit"] = _cpu_per_gbit(row["cpu_pct"], row["gbit_s"])
    return row


def _cpu_per_gbit(cpu_pct, gbit_s):
    """CPU seconds the daemons spent per Gbit received (per side and both)."""
    if not cpu_pct or not gbit_s or any(v is None for v in cpu_pct.values()):
        return {}
    out = {k: v / 100.0 / gbit_s for k, v in cpu_pct.items()}
    out["total"] = sum(out.values())
    return out


def _wait_listening(lab, side, port, proc, timeout=10, udp=False, name="iperf3-server"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = lab.run_in(side, "ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}", check=False)
        if r.returncode == 0 and r.stdout.strip():
            return
        if proc.poll() is not None:
            raise BenchError(f"{name} exited: {lab.log_text(name)}")
        time.sleep(0.05)
    raise BenchError(f"{name} is not listening")


def _stream_check(lab, proto, target, nbytes, seed, log):
    """A byte-checked stream from A to target in B (vpncrypt.bench.streamcheck)."""
    base = [sys.executable, "-m", "vpncrypt.bench.streamcheck"]
    count = nbytes if proto == "tcp" else max(1, nbytes // CHECK_DATAGRAM)
    args = [proto, target, str(CHECK_PORT), str(count), str(seed)]
    if proto == "udp":
        args += ["--size", str(CHECK_DATAGRAM)]
    name = f"streamcheck-{proto}-recv"
    recv = lab.spawn(name, "B", base + ["recv"] + args + ["--timeout", "30"],
                     stdout=subprocess.PIPE)
    try:
        _wait_listening(lab, "B", CHECK_PORT, recv, udp=proto == "udp", name=name)
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
    return (f"{res['checked']} bytes checked, {res['corrupt']} corrupt, "
            f"{res['duplicates']} duplicated, {res['lost']} of {res['expected']} {unit} lost")


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
    result = {"pairing": name, "label": label, "a": impl_a, "b": impl_b, "ok": False,
              "error": None, "tests": [], "checks": [], "wireguard_go": wg,
              "vpncrypt": vc if "vpncrypt" in (impl_a, impl_b) else None}
    nodes = []
    try:
        if impl_a is None:
            target, pids, links = OUTER["B"], {}, dict(lab.veth)
        else:
            path = wg["path"] if wg else None
            a = Node(lab, "A", impl_a, index, path, vc_args)
            b = Node(lab, "B", impl_b, index, path, vc_args)
            nodes = [a, b]
            for n in nodes:
                n.start()
            a.configure(b, args.mtu, initiator=True)
            b.configure(a, args.mtu, initiator=False)
            if args.wireguard_go_tso == "off":
                for n in nodes:
                    if n.impl == "wireguard-go":
                        lab.run_in(n.side, sys.executable, "-c",
                                   "import sys; from vpncrypt.dataplane.io import set_tso; "
                                   "set_tso(sys.argv[1], False)", n.iface)
            if args.txqueuelen:
                for n in nodes:
                    lab.run_in(n.side, "ip", "link", "set", "dev", n.iface, "txqueuelen",
                               str(args.txqueuelen))
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
        nbytes = int(args.check_mib * (1 << 20))
        for k, proto in enumerate(("tcp", "udp") if nbytes > 0 else ()):
            log(f"{label}: byte-checked {proto.upper()} stream of {nbytes} bytes")
            result["checks"].append(_stream_check(lab, proto, target, nbytes, index * 2 + k + 1,
                                                  log))
        result["ok"] = all(t["gbit_s"] > 0 for t in result["tests"])
        bad = [c for c in result["checks"] if not c["ok"]]
        if not result["ok"]:
            result["error"] = "no traffic"
        elif bad:
            result["ok"] = False
            result["error"] = "; ".join(
                f"{c['proto']} stream check failed: {_check_summary(c)}" for c in bad)
    except BenchError as e:
        result["error"] = str(e)
        log(f"{label}: FAILED: {e}", always=True)
    finally:
        for n in nodes:
            n.stop()
    return result


def _ratios(pairings, wg_path=None):
    """vc-vc over wg-wg Gbit/s (wg-wg with the binary at wg_path, else the first)."""
    def tests(p):
        return {t["proto"]: t for t in p["tests"]}
    vc = next((tests(p) for p in pairings if p["pairing"] == "vc-vc"), {})
    wg = next((tests(p) for p in pairings if p["pairing"] == "wg-wg" and
               (wg_path is None or (p["wireguard_go"] or {}).get("path") == wg_path)), {})
    out = {}
    for proto in ("tcp", "udp"):
        a, b = vc.get(proto), wg.get(proto)
        out[proto] = (a["gbit_s"] / b["gbit_s"]) if a and b and b["gbit_s"] else None
    return out


def _version(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def _wireguard_go_builds(paths):
    """[{path, version, short}] for the --wireguard-go binaries (default: PATH's)."""
    builds = []
    for p in paths or [shutil.which("wireguard-go")]:
        if p is None:
            raise BenchError("no wireguard-go on PATH (Debian: apt install wireguard-go; or "
                             "--wireguard-go PATH)")
        path = shutil.which(p) if os.sep not in p else p
        if not path or not os.access(path, os.X_OK):
            raise BenchError(f"--wireguard-go {p}: not an executable file")
        version = _version([path, "--version"])
        if not version or "wireguard-go" not in version:
            raise BenchError(f"--wireguard-go {p}: `{p} --version` does not name wireguard-go")
        short = version.split()[-1]
        builds.append({"path": os.path.abspath(path), "version": version, "short": short})
    return builds


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
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        print(f"{prog}: missing tools: {', '.join(missing)} (Debian: apt install iproute2 "
              f"wireguard-tools wireguard-go iperf3 iputils-ping)", file=sys.stderr)
        return 1
    builds = []
    if any("wireguard-go" in PAIRINGS[n][1:] for n in names):
        try:
            builds = _wireguard_go_builds(args.wireguard_go)
        except BenchError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 1
    threads = [t for t in args.vpncrypt_threads.split(",") if t] or [None]
    offloads = [o for o in args.vpncrypt_offloads.split(",") if o] or [None]
    if any(t not in (None, "1", "2") for t in threads) or any(o not in (None, "on", "off")
                                                                for o in offloads):
        print(f"{prog}: --vpncrypt-threads takes 1 and 2, --vpncrypt-offloads on and off",
              file=sys.stderr)
        return 2
    variants = [{"threads": int(t) if t else None, "tun_offloads": o} for t in threads for o in offloads]
    if args.txqueuelen is not None and not 1 <= args.txqueuelen <= 1_000_000:
        print(f"{prog}: --txqueuelen from 1 to 1000000", file=sys.stderr)
        return 2
    plt = None
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"{prog}: --plot needs matplotlib, which is not installed (pip install "
                  f"matplotlib, or pip install 'vpncrypt[bench]')", file=sys.stderr)
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
        runs = [(name, wg, v) for name in names
                for wg in (builds if "wireguard-go" in PAIRINGS[name][1:] else [None])
                for v in (variants if "vpncrypt" in PAIRINGS[name][1:] else [None])]
        for i, (name, wg, v) in enumerate(runs):
            pairings.append(run_pairing(lab, name, i, args, log, wg, v))
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
                     "wireguard-go": builds[0]["version"] if builds else None,
                     "wireguard-go-builds": [{k: b[k] for k in ("path", "version")}
                                             for b in builds],
                     "vpncrypt": __import__("vpncrypt").__version__,
                     "python": sys.version.split()[0]},
        "settings": {"duration": args.duration, "mtu": args.mtu, "udp_length": UDP_LEN,
                     "pairings": names, "tcp": not args.no_tcp, "udp": not args.no_udp,
                     "check_mib": args.check_mib, "txqueuelen": args.txqueuelen,
                     "wireguard_go_tso": args.wireguard_go_tso},
        "run_id": lab.id,
        "namespaces": list(lab.ns.values()),
        "veth": list(lab.veth.values()),
        "pairings": pairings,
        "ratio_vpncrypt_over_wireguard_go": _ratios(pairings),
        "ratios_by_wireguard_go": {b["path"]: _ratios(pairings, b["path"]) for b in builds},
        "ok": all(p["ok"] for p in pairings),
    }
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
    labels, series = [], {("tcp", "gbit"): [], ("udp", "gbit"): [], ("tcp", "cpu"): [],
                          ("udp", "cpu"): []}
    for p in result["pairings"]:
        labels.append(p["label"])
        tests = {t["proto"]: t for t in p["tests"]}
        for proto in ("tcp", "udp"):
            t = tests.get(proto) or {}
            series[(proto, "gbit")].append(t.get("gbit_s") or 0)
            series[(proto, "cpu")].append((t.get("cpu_s_per_gbit") or {}).get("total") or 0)
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.6 * len(labels) + 2.5))
    ys = range(len(labels))
    for ax, what, title in ((axes[0], "gbit", "Gbit/s received (higher is better)"),
                            (axes[1], "cpu", "CPU s per Gbit, both daemons (lower is better)")):
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
    fig.suptitle(f"vpncrypt bench tunnel: {s['duration']:g} s per test, MTU {s['mtu']}; "
                 f"{result['cpu']} ({result['cores']} cores), kernel {result['kernel']}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print_table(result):
    s = result["settings"]
    print(f"vpncrypt bench tunnel: iperf3 A->B, {s['duration']:g} s per test, tunnel MTU "
          f"{s['mtu']}, UDP -l {s['udp_length']} -b 0; {result['cpu']} ({result['cores']} cores), "
          f"kernel {result['kernel']}")
    for b in result["versions"]["wireguard-go-builds"]:
        print(f"  wg-go {b['version'].split()[-1]}: {b['path']} ({b['version']})")
    w = max([30] + [len(p["label"]) + 2 for p in result["pairings"]])
    head = (f"{'pairing':<{w}}{'proto':<6}{'Gbit/s':>9}{'retr/loss':>12}"
            f"{'CPU A %':>9}{'CPU B %':>9}{'CPU s/Gbit':>11}{'B link Gb/s':>13}"
            f"{'A link drops':>14}")
    print(head)
    print("-" * len(head))
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
            print(f"{p['label']:<{w}}{t['proto'].upper():<6}{t['gbit_s']:>9.3f}{extra:>12}"
                  f"{ca:>9}{cb:>9}{cg:>11}{lr:>13}{ld:>14}")
        for c in p.get("checks", []):
            state = "ok" if c["ok"] else "FAILED"
            print(f"{'':<{w}}{c['proto'].upper():<6}byte check {state}: {_check_summary(c)}")
        if p["error"] and p["tests"]:
            print(f"{'':<{w}}FAILED: {p['error']}")
    for path, r in result.get("ratios_by_wireguard_go", {}).items():
        parts = [f"{proto.upper()} {r[proto]:.2f}x" for proto in ("tcp", "udp") if r.get(proto)]
        ver = next(b["version"].split()[-1] for b in result["versions"]["wireguard-go-builds"]
                   if b["path"] == path)
        if parts:
            print(f"vpncrypt<->vpncrypt over wg-go {ver}<->same: " + ", ".join(parts))
    print("Gbit/s: received by iperf3 in B.  CPU: daemon process, % of one core; CPU s/Gbit: both "
          "daemons' CPU seconds per Gbit received.\nB link: what B's inner interface (tunnel or "
          "veth) received; A link drops: packets A's inner interface dropped\nbecause its daemon "
          "did not read them in time.  Byte check: vpncrypt.bench.streamcheck through the tunnel.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="vpncrypt bench tunnel", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    raise SystemExit(run(ap.parse_args()))
