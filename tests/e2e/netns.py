"""Network namespaces, userspace WireGuard daemons and the tools run in them,
for the end-to-end scenarios (tests/e2e).

A `World` owns a few namespaces with random names (`e2e<k>-<id>`) and every
daemon started in them.  A daemon is the implementation under test started
the way wireguard-go is (`BIN -f IFACE` in a namespace); it creates a TUN and
serves /var/run/wireguard/IFACE.sock, which `wg` reaches from any namespace
(it is a path, not a network name).  `World.close()` deletes each interface
in whichever namespace it then lives, requires its daemon to exit by itself
and its socket to be gone (as wireguard-go does), then removes the
namespaces: whatever was left over is returned as a list of complaints.
"""

import base64
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

SOCKET_DIR = "/var/run/wireguard"
# the kernel and wg(8)'s default MTU for a WireGuard interface
DEFAULT_MTU = 1420


def need(tool: str) -> str:
    path = shutil.which(tool)
    assert path, f"required tool {tool!r} is not installed (tests never skip; tests/run.sh installs it)"
    return path


def genkey() -> tuple:
    """(private, public) in wg's base64, independent of the code under test."""
    k = X25519PrivateKey.generate()
    priv = k.private_bytes_raw()
    pub = k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(priv).decode(), base64.b64encode(pub).decode()


def genpsk() -> str:
    return base64.b64encode(secrets.token_bytes(32)).decode()


class Daemon:
    def __init__(self, world, ns, iface, popen, log_path):
        self.world = world
        self.ns = ns  # where the interface lives now
        self.started_in = ns  # where its UDP socket lives
        self.iface = iface
        self.popen = popen
        self.log_path = log_path
        self.moved_at = None
        self.deleted = False  # the scenario deleted its interface

    @property
    def sock(self):
        return os.path.join(SOCKET_DIR, f"{self.iface}.sock")

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def rss_kib(self) -> int:
        """Resident memory of the daemon: the largest VmRSS among the
        process under `ip netns exec` and its children (Python's script or
        the Go binary)."""
        pids = [self.popen.pid]
        best = 0
        while pids:
            pid = pids.pop()
            try:
                with open(f"/proc/{pid}/status") as f:
                    m = re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M)
                best = max(best, int(m.group(1)) if m else 0)
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return best


class World:
    def __init__(self, binary: str, names=("0", "1", "2")):
        for tool in ("ip", "wg", "sysctl"):
            need(tool)
        self.binary = binary
        self.id = secrets.token_hex(3)
        self.ns = {k: f"e2e{k}-{self.id}" for k in names}
        self.tmp = tempfile.mkdtemp(prefix="vpncrypt-e2e-")
        self.daemons = []
        self.bg = []
        self.count = 0
        try:
            for ns in self.ns.values():
                self._run(["ip", "netns", "add", ns])
                self.ip(ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    # ---- commands -------------------------------------------------------
    @staticmethod
    def _run(cmd, check=True, timeout=60, input=None):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
        if check:
            assert r.returncode == 0, (
                f"{' '.join(cmd)}: rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            )
        return r

    def n(self, k):
        """The namespace's name for key k (or a name already)."""
        return self.ns.get(k, k)

    def ip(self, k, *args, check=True):
        return self._run(["ip", "-n", self.n(k), *args], check=check)

    def run(self, k, *cmd, check=True, timeout=60, input=None):
        return self._run(["ip", "netns", "exec", self.n(k), *cmd], check=check, timeout=timeout, input=input)

    def popen(self, k, *cmd, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(["ip", "netns", "exec", self.n(k), *cmd], text=True, **kw)
        self.bg.append(p)
        return p

    def sysctl(self, k, key, value):
        self.run(k, "sysctl", "-qw", f"{key}={value}")

    def nft(self, k, ruleset: str):
        need("nft")
        self.run(k, "nft", "-f", "-", input=ruleset)

    def wg(self, *args, check=True, input=None):
        """wg(8), run in ns0 as WireGuard's own tests do (it finds a
        userspace interface by its socket's path, in any namespace)."""
        r = self._run(["ip", "netns", "exec", self.n("0"), "wg", *args], check=False, input=input, timeout=60)
        if check:
            assert r.returncode == 0, f"wg {' '.join(args)}: {r.stderr}\n{self.logs()}"
        return r

    def wg_set(self, dev, *args, private=None, psk=None):
        """`wg set DEV ...`; private / psk: keys written to files for the
        `private-key FILE` / `preshared-key FILE` arguments."""
        argv = []
        if private is not None:
            argv += ["private-key", self.keyfile(private)]
        for a in args:
            argv.append(self.keyfile(psk) if a == "PSK" else a)
        return self.wg("set", dev.iface, *argv)

    def keyfile(self, key) -> str:
        self.count += 1
        path = os.path.join(self.tmp, f"key{self.count}")
        with open(path, "w") as f:
            f.write(key + "\n")
        os.chmod(path, 0o600)
        return path

    def endpoints(self, dev) -> str:
        return self.wg("show", dev.iface, "endpoints").stdout.rstrip("\n")

    def transfer(self, dev) -> dict:
        out = {}
        for line in self.wg("show", dev.iface, "transfer").stdout.splitlines():
            pub, rx, tx = line.split("\t")
            out[pub] = (int(rx), int(tx))
        return out

    def ping(self, k, addr, count=1, flood=False, size=None, iface=None, check=True, wait=None):
        """ping; one packet waits up to 3 s for its reply by default (a
        handshake comes first, on a loaded machine), a flood 1 s for its last
        as WireGuard's test does."""
        wait = wait if wait is not None else (1 if flood else 3)
        args = ["ping", "-c", str(count), "-W", str(wait)]
        if flood:
            args.append("-f")
        if size is not None:
            args += ["-s", str(size)]
        if iface:
            args += ["-I", iface]
        r = self.run(k, *args, addr, check=False, timeout=30 + count)
        if check:
            assert r.returncode == 0, (
                f"ping {addr} from {self.n(k)} failed:\n{r.stdout}{r.stderr}\n{self.logs()}"
            )
        return r

    def link_stats(self, k, dev) -> dict:
        """`ip -stats link show`: {'rx_bytes', 'rx_packets', 'tx_bytes', ...}."""
        lines = self.ip(k, "-stats", "link", "show", "dev", dev.iface).stdout.splitlines()
        rx, tx = lines[3].split(), lines[5].split()
        return {
            "rx_bytes": int(rx[0]),
            "rx_packets": int(rx[1]),
            "tx_bytes": int(tx[0]),
            "tx_packets": int(tx[1]),
        }

    # ---- daemons --------------------------------------------------------
    def daemon(self, k, name=None, log_level="info", binary=None) -> Daemon:
        """Start the implementation in namespace k, as `BIN -f IFACE`; wait
        for its UAPI socket.  `binary`: another implementation than the one
        under test (a scenario's fixed peer)."""
        binary = binary or self.binary
        self.count += 1
        iface = name or f"wg{self.count}{self.id}"
        log = os.path.join(self.tmp, f"{iface}.log")
        with open(log, "wb") as f:
            p = subprocess.Popen(
                ["ip", "netns", "exec", self.n(k), binary, "-f", iface],
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "LOG_LEVEL": log_level},
            )
        d = Daemon(self, self.n(k), iface, p, log)
        self.daemons.append(d)
        deadline = time.monotonic() + 20
        while not self._answers(d.sock):
            assert p.poll() is None, f"{binary} -f {iface} exited with {p.returncode}:\n{d.log()}"
            assert time.monotonic() < deadline, f"{iface}: no UAPI socket within 20 s:\n{d.log()}"
            time.sleep(0.05)
        return d

    @staticmethod
    def _answers(path) -> bool:
        if not os.path.exists(path):
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def move(self, dev, k):
        """`ip link set IFACE netns K`: the TUN moves, the daemon (and its UDP
        socket) stays where it was started."""
        self.ip(dev.ns, "link", "set", dev.iface, "netns", self.n(k))
        dev.ns = self.n(k)
        dev.moved_at = time.monotonic()

    def assert_alive(self):
        """Quick: the daemons the scenario did not stop are still running."""
        for d in self.daemons:
            assert d.deleted or d.alive(), f"{d.iface} exited with {d.popen.returncode}:\n{d.log()}"

    def assert_running(self, settle=2.5):
        """Every daemon whose interface the scenario did not delete is still
        running, with its interface where the scenario put it.  A daemon
        that takes a move for a deletion needs a moment to notice: this waits
        until `settle` seconds have passed since the last move."""
        moves = [d.moved_at for d in self.daemons if d.moved_at is not None]
        if moves:
            time.sleep(max(0.0, max(moves) + settle - time.monotonic()))
        for d in self.daemons:
            if d.deleted:
                continue
            assert d.alive(), f"{d.iface} exited with {d.popen.returncode}:\n{d.log()}"
            assert self.ip(d.ns, "link", "show", d.iface, check=False).returncode == 0, (
                f"{d.iface} is no longer in {d.ns}:\n{d.log()}"
            )

    def link_del(self, dev):
        dev.deleted = True
        self.ip(dev.ns, "link", "del", dev.iface)

    def wait_gone(self, dev, timeout=10) -> list:
        """After its interface was deleted: the daemon exits by itself and
        its socket goes.  Returns complaints (empty if all is well)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (dev.alive() or os.path.exists(dev.sock)):
            time.sleep(0.05)
        out = []
        if dev.alive():
            out.append(
                f"{dev.iface}: daemon still running {timeout} s after its interface was deleted:\n{dev.log()}"
            )
        elif os.path.exists(dev.sock):
            out.append(f"{dev.iface}: daemon exited but left {dev.sock}")
        return out

    def remove(self, dev) -> None:
        """Delete an interface now (a scenario's own step) and require its
        daemon to go."""
        self.link_del(dev)
        problems = self.wait_gone(dev)
        assert not problems, "\n".join(problems)

    def logs(self) -> str:
        return "\n".join(f"----- {d.iface} ({d.started_in}) -----\n{d.log()}" for d in self.daemons)

    def where(self, iface) -> list:
        """The namespaces of this world where a link named iface exists."""
        return [
            ns for ns in self.ns.values() if self.ip(ns, "link", "show", iface, check=False).returncode == 0
        ]

    def close(self) -> list:
        problems = []
        for p in self.bg:
            if p.poll() is None:
                p.kill()
            p.wait(5)
            for s in (p.stdout, p.stderr):
                if s is not None:
                    s.close()
        for d in self.daemons:
            if not d.alive() and not os.path.exists(d.sock) and not self.where(d.iface):
                continue
            here = self.where(d.iface)
            was_alive = d.alive()
            for ns in here:
                self.ip(ns, "link", "del", d.iface, check=False)
            if not was_alive and here:
                problems.append(f"{d.iface}: daemon exited but left its interface in {here}")
            problems += self.wait_gone(d)
        for d in self.daemons:
            if d.alive():
                d.popen.send_signal(signal.SIGTERM)
                try:
                    d.popen.wait(5)
                except subprocess.TimeoutExpired:
                    d.popen.kill()
                    d.popen.wait(5)
            if os.path.exists(d.sock):
                os.unlink(d.sock)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return problems
