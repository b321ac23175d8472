"""The network-namespace lab of `vpncrypt bench tunnel`, the lab benches and the tests.

Two network namespaces A and B joined by a veth pair (OUTER addresses, /24),
more namespaces on veths of their own (add_namespace), processes started in
them (spawn: `ip netns exec` execs the command, so the pid is the process
itself; each child is SIGTERMed if the lab's process dies), and close(),
which removes all of it: every process it started, anything else still
running in its namespaces, the namespaces (and with them the veths and TUN
devices in them), the UAPI sockets of its interfaces and its temporary
directory.  Names are random per lab, so labs run side by side.

Node is one WireGuard daemon of the benches (vpncrypt or wireguard-go),
started unconfigured and configured along the one path both share: `wg
setconf` over the UAPI socket, `ip address add`, `ip link set mtu MTU up`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

from vpncrypt.selfcmd import vpncrypt_command

OUTER = {"A": "192.168.77.1", "B": "192.168.77.2"}
INNER = {"A": "10.77.0.1", "B": "10.77.0.2"}
WG_PORT = 51820
SOCKET_DIR = "/var/run/wireguard"
CLK_TCK = os.sysconf("SC_CLK_TCK")

Log = Callable[..., None]
_R = TypeVar("_R")


class BenchError(Exception):
    pass


def _no_log(msg: str, always: bool = False, pid: bool = False) -> None:
    pass


def _pdeathsig() -> None:
    """In the child before exec: SIGTERM it if the lab's process dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def run(
    cmd: Sequence[str], *, timeout: float = 30, check: bool = True, **kw: Any
) -> subprocess.CompletedProcess:
    """`cmd` with its output captured as text; BenchError if it fails and `check`."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    r = subprocess.run(list(cmd), timeout=timeout, **kw)
    if check and r.returncode != 0:
        out = "\n".join(s.strip() for s in (r.stdout, r.stderr) if isinstance(s, str) and s.strip())
        raise BenchError(f"`{' '.join(cmd)}` failed ({r.returncode}): {out}")
    return r


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of the whole process (all threads), in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # fields 14 and 15
    except (OSError, IndexError, ValueError):
        return None


def cpu_per_gbit(cpu_pct: dict, gbit_s: float | None) -> dict:
    """CPU seconds per Gbit received, per process and "total", from each
    process's % of one core ({} when a figure is missing)."""
    if not cpu_pct or not gbit_s or any(v is None for v in cpu_pct.values()):
        return {}
    out = {k: v / 100.0 / gbit_s for k, v in cpu_pct.items()}
    out["total"] = sum(out.values())
    return out


def version(cmd: Sequence[str]) -> str | None:
    """The first line `cmd` prints (e.g. `iperf3 --version`), or None."""
    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def wireguard_go_builds(paths: Sequence[str] | None) -> list[dict]:
    """[{path, version, short}] for the --wireguard-go binaries (default: PATH's)."""
    builds = []
    candidates: list[str | None] = list(paths) if paths else [shutil.which("wireguard-go")]
    for p in candidates:
        if p is None:
            raise BenchError(
                "no wireguard-go on PATH (Debian: apt install wireguard-go; or --wireguard-go PATH)"
            )
        path = shutil.which(p) if os.sep not in p else p
        if not path or not os.access(path, os.X_OK):
            raise BenchError(f"--wireguard-go {p}: not an executable file")
        text = version([path, "--version"])
        if not text or "wireguard-go" not in text:
            raise BenchError(f"--wireguard-go {p}: `{p} --version` does not name wireguard-go")
        builds.append({"path": os.path.abspath(path), "version": text, "short": text.split()[-1]})
    return builds


def preflight(
    prog: str, tools: list[str], impls: list[str], wg_paths: Sequence[str] | None
) -> tuple[int | None, list[dict]]:
    """Root, the tools and the wireguard-go builds (if `impls` has
    wireguard-go); (exit status, []) after saying what is wrong, else (None, builds)."""
    import sys

    if os.geteuid() != 0:
        print(
            f"{prog}: needs root (network namespaces, veth pairs, TUN devices); run it as "
            f"root, e.g. `sudo {prog}`",
            file=sys.stderr,
        )
        return 1, []
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        print(
            f"{prog}: missing tools: {', '.join(missing)} (Debian: apt install iproute2 "
            f"wireguard-tools wireguard-go iperf3 iputils-ping nftables stress-ng)",
            file=sys.stderr,
        )
        return 1, []
    builds: list[dict] = []
    if "wireguard-go" in impls:
        try:
            builds = wireguard_go_builds(wg_paths)
        except BenchError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 1, []
    return None, builds


def add_run_arguments(p: argparse.ArgumentParser, implementations: bool = True) -> None:
    """The options every lab bench takes: the implementations (if it runs
    them one by one), the wireguard-go builds, --json and --verbose."""
    if implementations:
        p.add_argument(
            "--implementations",
            default="vpncrypt,wireguard-go",
            help="comma-separated: vpncrypt, wireguard-go (default: both)",
        )
    p.add_argument(
        "--wireguard-go",
        action="append",
        dest="wireguard_go",
        metavar="PATH",
        help="wireguard-go binary (default: the one on PATH); repeat it to compare builds in one run",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log every step (and each process started) on stderr"
    )


def logger(prog: str, verbose: bool) -> Log:
    """log(msg, always=False, pid=False): on stderr with --verbose; `always`
    ones also without it (but not the pid lines)."""
    import sys

    def log(msg: str, always: bool = False, pid: bool = False) -> None:
        if verbose or (always and not pid):
            print(f"{prog}: {msg}", file=sys.stderr, flush=True)

    return log


def raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def guarded(prog: str, fn: Callable[[], _R]) -> tuple[int | None, _R | None]:
    """fn() with SIGTERM raised as KeyboardInterrupt: (None, its result), or
    (130, None) when interrupted and (1, None) on a BenchError, said on stderr."""
    import sys

    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        return None, fn()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130, None
    except BenchError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1, None


@contextlib.contextmanager
def measured_round(result: dict, label: str, log: Log, nodes: Sequence[Node] = ()) -> Iterator[None]:
    """One measured round: a BenchError ends it with result["error"] set (and
    said); the nodes (filled in as the round starts them) are stopped either way."""
    try:
        yield
    except BenchError as e:
        result["error"] = str(e)
        log(f"{label}: FAILED: {e}", always=True)
    finally:
        for n in nodes:
            n.stop()


class Proc:
    """A process the lab started: its name, Popen and log file (or None)."""

    def __init__(self, name: str, popen: subprocess.Popen, log_path: str | None):
        self.name = name
        self.popen = popen
        self.log_path = log_path

    def log(self) -> str:
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Lab:
    """Namespaces, veths and every process of one run; close() removes all of it.

    `prefix` starts every name (namespaces PREFIX A-ID and PREFIX B-ID, veths
    PREFIX va ID and PREFIX vb ID), `outer` the veth addresses, `cwd` the
    directory commands run in."""

    def __init__(
        self,
        log: Log | None = None,
        *,
        prefix: str = "vcb",
        outer: dict[str, str] | None = None,
        veth_mtu: int | None = None,
        cwd: str | None = None,
        tmp_prefix: str = "vpncrypt-bench-",
    ):
        self.log = log or _no_log
        self.id = secrets.token_hex(3)
        self.prefix = prefix
        self.outer = dict(outer or OUTER)
        self.veth_mtu = veth_mtu
        self.cwd = cwd
        self.ns = {"A": f"{prefix}A-{self.id}", "B": f"{prefix}B-{self.id}"}
        self.veth = {"A": f"{prefix}va{self.id}", "B": f"{prefix}vb{self.id}"}
        self.tmp = tempfile.mkdtemp(prefix=f"{tmp_prefix}{self.id}-")
        self.procs: list[Proc] = []
        self.ifaces: list[str] = []  # tunnel interfaces (their UAPI sockets go at close)
        self.made_ns: list[str] = []
        self.closed = False

    # -- setup
    def setup(self) -> None:
        """Namespaces A and B, lo up in each, the veth pair with its addresses."""
        for ns in self.ns.values():
            self._make_ns(ns)
        mtu = ["mtu", str(self.veth_mtu)] if self.veth_mtu else []
        va, vb = self.veth["A"], self.veth["B"]
        run(
            ["ip", "link", "add", va, "netns", self.ns["A"], *mtu, "type", "veth", "peer", "name", vb]
            + ["netns", self.ns["B"], *mtu]
        )
        for side in "AB":
            self._address(side, self.veth[side], f"{self.outer[side]}/24")
        self.log(f"run {self.id}: namespaces {self.ns['A']} {self.ns['B']}, veth {va}/{vb}", always=True)

    def _make_ns(self, ns: str) -> None:
        run(["ip", "netns", "add", ns])
        self.made_ns.append(ns)
        run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _address(self, side: str, dev: str, cidr: str) -> None:
        run(["ip", "-n", self.ns[side], "address", "add", cidr, "dev", dev])
        run(["ip", "-n", self.ns[side], "link", "set", dev, "up"])

    def add_namespace(self, side: str, peer_side: str, subnet: str) -> tuple[str, str]:
        """A namespace `side` joined to `peer_side` by a veth of its own, with
        SUBNET.1 (side) and SUBNET.2 (peer_side) /24; close() removes it."""
        self.ns[side] = ns = f"{self.prefix}{side}-{self.id}"
        self._make_ns(ns)
        mine, theirs = f"{self.prefix}v{side.lower()}{self.id}", f"{self.prefix}w{side.lower()}{self.id}"
        run(
            ["ip", "link", "add", mine, "netns", ns, "type", "veth", "peer", "name", theirs]
            + ["netns", self.ns[peer_side]]
        )
        self.veth[side] = mine
        self._address(side, mine, f"{subnet}.1/24")
        self._address(peer_side, theirs, f"{subnet}.2/24")
        return f"{subnet}.1", f"{subnet}.2"

    # -- commands and processes
    def ns_cmd(self, side: str, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side], *cmd]

    def run_in(
        self, side: str, *cmd: str, check: bool = True, timeout: float = 60, **kw: Any
    ) -> subprocess.CompletedProcess:
        """`cmd` in namespace `side`; BenchError if it fails and `check`."""
        kw.setdefault("cwd", self.cwd)
        return run(self.ns_cmd(side, *cmd), check=check, timeout=timeout, **kw)

    def spawn(
        self,
        name: str,
        side: str,
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log_name: str | None = None,
        stdout: int | IO | None = None,
    ) -> subprocess.Popen:
        """Start `cmd` in namespace `side`, its output in the lab's log file
        LOG_NAME.log (default: name), or to `stdout` (e.g. subprocess.PIPE)."""
        log_path = None
        if stdout is None:
            log_path = os.path.join(self.tmp, (log_name or name) + ".log")
            stdout = open(log_path, "wb")
        try:
            p = subprocess.Popen(
                self.ns_cmd(side, *cmd),
                stdout=stdout,
                stderr=subprocess.STDOUT if stdout is not subprocess.PIPE else subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )
        finally:
            if not isinstance(stdout, int) and hasattr(stdout, "close"):
                stdout.close()
        self.procs.append(Proc(name, p, log_path))
        self.log(f"pid {p.pid} {name} in {self.ns[side]}: {' '.join(cmd)}", pid=True)
        return p

    def log_text(self, name: str) -> str:
        try:
            with open(os.path.join(self.tmp, name + ".log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def wait_listening(
        self,
        side: str,
        port: int,
        proc: subprocess.Popen,
        timeout: float = 10,
        udp: bool = False,
        name: str = "iperf3-server",
    ) -> None:
        """Until something listens on `port` in `side` (BenchError if `proc` exits first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.run_in(side, "ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}", check=False)
            if r.returncode == 0 and r.stdout.strip():
                return
            if proc.poll() is not None:
                raise BenchError(f"{name} exited: {self.log_text(name)}")
            time.sleep(0.05)
        raise BenchError(f"{name} is not listening")

    # -- teardown
    def stop_proc(self, p: subprocess.Popen, timeout: float = 5.0) -> None:
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

    def _kill_namespace_pids(self, ns: str) -> None:
        """Anything still running in one of our own namespaces (e.g. a child
        whose Popen an interrupt cut short) is ours: end it by pid."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
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
                for p in pids:  # reap our own children among them
                    try:
                        os.waitpid(p, os.WNOHANG)
                    except ChildProcessError:
                        pass
                time.sleep(0.05)

    def close(self) -> None:
        """Remove everything; it finishes even if SIGINT/SIGTERM arrives meanwhile."""
        if self.closed:
            return
        self.closed = True
        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):
                pass
        try:
            for proc in reversed(self.procs):
                if proc.popen.poll() is None:
                    try:
                        proc.popen.send_signal(signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            for proc in reversed(self.procs):
                self.stop_proc(proc.popen)
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


def run_in_lab(
    prog: str, log: Log, setup: Callable[[Lab], None], body: Callable[[Lab], None]
) -> tuple[int | None, Lab]:
    """A Lab: set up (then setup(lab)), body(lab), and removed at the end, also
    on SIGINT/SIGTERM or an error.  Returns (exit status or None, lab)."""
    import atexit
    import sys

    lab = Lab(log)
    atexit.register(lab.close)
    old = {sig: signal.signal(sig, raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            lab.setup()
            setup(lab)
        except BenchError as e:
            print(f"{prog}: setup failed: {e}", file=sys.stderr)
            return 1, lab
        body(lab)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; cleaning up", file=sys.stderr, flush=True)
        lab.close()
        return 130, lab
    finally:
        lab.close()
        for sig, h in old.items():
            signal.signal(sig, h)
        atexit.unregister(lab.close)
    return None, lab


# ============================================================ daemons


def wait_started(
    lab: Lab, proc: subprocess.Popen, ready: Callable[[], bool], what: str, log_name: str, timeout: float
) -> None:
    """Until ready() (e.g. its UAPI socket is there); BenchError with its log
    if `proc` exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with {proc.returncode}: {lab.log_text(log_name)}")
        if time.monotonic() > deadline:
            raise BenchError(f"{what} made no UAPI socket in {timeout:g} s: {lab.log_text(log_name)}")
        time.sleep(0.05)


def pairing_record(name: str, label: str, a: str | None, b: str | None, wg: dict | None) -> dict:
    """A pairing's result before its tests: what ran, ok False, no error yet."""
    return {
        "pairing": name,
        "label": label,
        "a": a,
        "b": b,
        "ok": False,
        "error": None,
        "tests": [],
        "checks": [],
        "latency": None,
        "wireguard_go": wg,
    }


class Node:
    """One bench daemon in side A or B: vpncrypt (this very Python's) or a
    wireguard-go binary, its interface named after the implementation."""

    def __init__(
        self,
        lab: Lab,
        side: str,
        impl: str,
        index: int,
        wg_path: str | None = None,
        vc_args: Sequence[str] = (),
    ):
        self.lab = lab
        self.side = side
        self.impl = impl
        self.wg_path = wg_path
        self.vc_args = list(vc_args)
        self.iface = f"{'vcb' if impl == 'vpncrypt' else 'wgb'}{side.lower()}{index}{lab.id}"
        self.proc: subprocess.Popen | None = None
        self.private, self.public = self._keys()

    def _keys(self) -> tuple[str, str]:
        if self.impl == "vpncrypt":
            gen = vpncrypt_command("genkey")
            pub = vpncrypt_command("pubkey")
        else:
            gen, pub = ["wg", "genkey"], ["wg", "pubkey"]
        private = run(gen).stdout.strip()
        public = run(pub, input=private + "\n").stdout.strip()
        return private, public

    @property
    def sock(self) -> str:
        return os.path.join(SOCKET_DIR, self.iface + ".sock")

    def start(self) -> None:
        lab = self.lab
        lab.ifaces.append(self.iface)
        if self.impl == "vpncrypt":
            # this very Python, so the daemon runs from the same install as the bench
            cmd = vpncrypt_command("up", self.iface, "--log-level", "warning", *self.vc_args)
            env = dict(os.environ)
        else:
            cmd = [self.wg_path or "wireguard-go", "-f", self.iface]
            env = {**os.environ, "WG_PROCESS_FOREGROUND": "1", "LOG_LEVEL": "error"}
        self.proc = proc = lab.spawn(f"{self.impl}-{self.side}", self.side, cmd, env=env, log_name=self.iface)
        wait_started(
            lab, proc, lambda: os.path.exists(self.sock), f"{self.impl} ({self.iface})", self.iface, 20
        )

    def setconf(self, text: str, timeout: float = 60) -> None:
        """`wg setconf` of a whole configuration (the file is removed after)."""
        path = os.path.join(self.lab.tmp, self.iface + ".conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            self.lab.run_in(self.side, "wg", "setconf", self.iface, path, timeout=timeout)
        finally:
            os.unlink(path)

    def configure(self, other: Node, mtu: int, initiator: bool) -> None:
        """The same path for both implementations: wg setconf over the UAPI,
        then ip addr / ip link."""
        lines = [
            "[Interface]",
            f"PrivateKey = {self.private}",
            f"ListenPort = {WG_PORT}",
            "",
            "[Peer]",
            f"PublicKey = {other.public}",
            f"AllowedIPs = {INNER[other.side]}/32",
        ]
        if initiator:
            lines.append(f"Endpoint = {self.lab.outer[other.side]}:{WG_PORT}")
        self.setconf("\n".join(lines) + "\n")
        self.lab.run_in(self.side, "ip", "address", "add", f"{INNER[self.side]}/24", "dev", self.iface)
        self.lab.run_in(self.side, "ip", "link", "set", "dev", self.iface, "mtu", str(mtu), "up")

    def stop(self) -> None:
        if self.proc is not None:
            self.lab.stop_proc(self.proc)
            deadline = time.monotonic() + 5  # the TUN goes with the process
            while (
                time.monotonic() < deadline
                and self.lab.run_in(self.side, "ip", "link", "show", self.iface, check=False).returncode == 0
            ):
                time.sleep(0.05)


def wait_tunnel(lab: Lab, a: Node, b: Node, timeout: float = 15) -> None:
    """Ping through the tunnel until the handshake is done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = lab.run_in("A", "ping", "-c", "1", "-W", "1", INNER["B"], check=False, timeout=10)
        if r.returncode == 0:
            return
        for n in (a, b):
            if n.proc is not None and n.proc.poll() is not None:
                raise BenchError(f"{n.impl} ({n.iface}) exited: {lab.log_text(n.iface)}")
    raise BenchError(f"no ping through the {a.impl}<->{b.impl} tunnel within {timeout} s")
