"""Network namespaces, veth pairs and daemons for the interop tests.

Two namespaces A and B joined by a veth pair (192.168.241.1/24 in A,
192.168.241.2/24 in B); a tunnel between them (10.200.0.1 in A, 10.200.0.2 in
B).  Everything is created with random names and removed by Lab.close(), even
when a test fails."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from tests.installed import vpncrypt_command
from vpncrypt.bench import nslab
from vpncrypt.bench.nslab import SOCKET_DIR, Proc
from vpncrypt.daemon import uapiclient
from vpncrypt.protocol import keys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTER = {"A": "192.168.241.1", "B": "192.168.241.2"}
INNER = {"A": "10.200.0.1", "B": "10.200.0.2"}
PORT = 51820


_CURRENT_WGGO: list[str] = []


def current_wireguard_go() -> str:
    """Debian 13's wireguard-go (TUN offloads): $VPNCRYPT_WIREGUARD_GO_CURRENT,
    else fetched (and cached) by tests/tools/fetch-wireguard-go.sh."""
    if not _CURRENT_WGGO:
        path = os.environ.get("VPNCRYPT_WIREGUARD_GO_CURRENT")
        if not path:
            r = subprocess.run(
                ["bash", os.path.join(REPO, "tests", "tools", "fetch-wireguard-go.sh")],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert r.returncode == 0, f"fetching the current wireguard-go failed:\n{r.stderr}"
            path = r.stdout.strip().splitlines()[-1]
        assert os.access(path, os.X_OK), f"{path}: not an executable wireguard-go"
        _CURRENT_WGGO.append(path)
    return _CURRENT_WGGO[0]


def need(tool):
    path = shutil.which(tool)
    assert path, f"required tool {tool!r} is not installed (tests never skip)"
    return path


class Node:
    """One end of the tunnel: namespace, interface name, keys, daemon."""

    def __init__(self, lab, side, kind):
        self.lab = lab
        self.side = side
        # "vpncrypt", "wggo" (the wireguard-go on PATH: Debian 12's, 2022, no
        # TUN offloads) or "wggo-current" (Debian 13's, with TUN offloads)
        self.binary = current_wireguard_go() if kind == "wggo-current" else "wireguard-go"
        kind = "wggo" if kind == "wggo-current" else kind
        self.kind = kind
        self.ns = lab.ns[side]
        self.iface = ("vc" if kind == "vpncrypt" else "wg") + side.lower() + lab.id
        self.private = keys.genkey()
        self.public = keys.pubkey(self.private)
        self.outer = OUTER[side]
        self.inner = INNER[side]
        self.proc = None
        self.conf_path = None

    @property
    def sock(self):
        return os.path.join(SOCKET_DIR, f"{self.iface}.sock")

    def run(self, *cmd, check=True, timeout=60, **kw):
        return self.lab.run_in(self.side, *cmd, check=check, timeout=timeout, **kw)

    def wg(self, *args, check=True, input=None):
        r = subprocess.run(["wg", *args], capture_output=True, text=True, input=input, timeout=20)
        if check:
            assert r.returncode == 0, f"wg {' '.join(args)}: {r.stderr}"
        return r

    def uapi(self, text: str) -> str:
        """The answer to `text` (sent as it is) on this node's UAPI socket."""
        return uapiclient.request(self.sock, text, terminate=False)

    def counters(self) -> dict:
        out = {}
        for line in self.uapi("get=vpncrypt\n\n").splitlines():
            k, _, v = line.partition("=")
            if k.startswith("vpncrypt_") and not k.startswith("vpncrypt_info_"):
                out[k[9:]] = int(v)
        return out

    def drops(self) -> int:
        return sum(v for k, v in self.counters().items() if k.startswith("drop_"))

    def dump(self) -> dict:
        """`wg show IFACE dump`: {peer public key: {...}}."""
        lines = self.wg("show", self.iface, "dump").stdout.strip().splitlines()
        peers = {}
        for line in lines[1:]:
            f = line.split("\t")
            peers[f[0]] = {
                "psk": f[1],
                "endpoint": f[2],
                "allowed_ips": f[3],
                "handshake": int(f[4]),
                "rx": int(f[5]),
                "tx": int(f[6]),
                "keepalive": f[7],
            }
        return peers

    def conf(self, peers, *, listen=True, mtu=None, address=True, extra_iface=""):
        """A config: for vpncrypt a file with the wg-quick extras, for wg-go
        the `wg setconf` part only."""
        lines = ["[Interface]", f"PrivateKey = {self.private}"]
        if listen:
            lines.append(f"ListenPort = {PORT}")
        if self.kind == "vpncrypt":
            if address:
                lines.append(f"Address = {self.inner}/24")
            if mtu:
                lines.append(f"MTU = {mtu}")
        if extra_iface:
            lines.append(extra_iface)
        for p in peers:
            lines += ["", "[Peer]", f"PublicKey = {p['public']}"]
            if p.get("psk"):
                lines.append(f"PresharedKey = {p['psk']}")
            lines.append(f"AllowedIPs = {p.get('allowed', p.get('inner', '') + '/32')}")
            if p.get("endpoint"):
                lines.append(f"Endpoint = {p['endpoint']}")
            if p.get("keepalive"):
                lines.append(f"PersistentKeepalive = {p['keepalive']}")
        return "\n".join(lines) + "\n"

    def write_conf(self, text, mode=0o600, name=None):
        path = os.path.join(self.lab.tmp, name or f"{self.iface}.conf")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        self.conf_path = path
        return path

    def start(self, conf_text, *, mtu=None, env=None, **kw):
        if self.kind == "vpncrypt":
            self.start_vpncrypt(conf_text, env=env, **kw)
        else:
            self.start_wggo(conf_text, mtu=mtu)

    def start_vpncrypt(self, conf_text, env=None, **kw):
        path = self.write_conf(conf_text)
        self.proc = self.lab.spawn_vpncrypt(self.side, self.iface, path, env=env, **kw)

    def start_wggo(self, conf_text, mtu=None):
        need(self.binary)
        log = os.path.join(self.lab.tmp, f"{self.iface}.log")
        with open(log, "wb") as f:
            p = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, self.binary, "-f", self.iface],
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LOG_LEVEL": "debug", "WG_PROCESS_FOREGROUND": "1"},
            )
        self.proc = Proc(self.iface, p, log)
        self.lab.procs.append(self.proc)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sock):
            assert p.poll() is None, f"wireguard-go exited: {self.proc.log()}"
            assert time.monotonic() < deadline, "wireguard-go did not create its socket"
            time.sleep(0.05)
        path = self.write_conf(conf_text)
        self.wg("setconf", self.iface, path)
        self.run("ip", "address", "add", f"{self.inner}/24", "dev", self.iface)
        self.run("ip", "link", "set", "dev", self.iface, "mtu", str(mtu or 1420), "up")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        p = self.proc.popen
        if p.poll() is None:
            p.send_signal(sig)
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise

    def ping(self, other, count=3, check=True):
        r = self.run("ping", "-c", str(count), "-W", "2", "-i", "0.2", other.inner, check=False)
        if check:
            assert r.returncode == 0, f"ping {self.side}->{other.side} failed:\n{r.stdout}\n{self.lab.logs()}"
        return r.returncode == 0


class Lab(nslab.Lab):
    """vpncrypt.bench.nslab's Lab, set up at once, with what the tests add:
    their nodes, notify sockets, the test tools and `vpncrypt up` with
    READY=1 awaited."""

    def __init__(self, veth_mtu=1500):
        need("ip")
        need("wg")
        super().__init__(
            prefix="vc", outer=OUTER, veth_mtu=veth_mtu, cwd=REPO, tmp_prefix="vpncrypt-interop-"
        )
        self.nodes = []
        self.notify_socks = []
        try:
            self.setup()
        except BaseException:
            self.close()
            raise

    def popen_in(self, side, *cmd, **kw):
        p = subprocess.Popen(
            self.ns_cmd(side, *cmd),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )
        self.procs.append(Proc(cmd[0], p, None))
        return p

    def tool(self, side, *args, timeout=120):
        r = self.run_in(side, sys.executable, "-m", "tests.interop.tools", *args, timeout=timeout)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def tool_bg(self, side, *args):
        p = self.popen_in(side, sys.executable, "-m", "tests.interop.tools", *args)
        line = p.stdout.readline()  # {"listening": true}
        assert "listening" in line, f"tool {args} did not start: {p.stderr.read()}"
        return p

    def node(self, side, kind):
        n = Node(self, side, kind)
        self.nodes.append(n)
        self.ifaces.append(n.iface)
        return n

    def notify_socket(self):
        path = os.path.join(self.tmp, f"notify-{len(self.notify_socks)}.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        self.notify_socks.append(s)
        return s, path

    def spawn_vpncrypt(
        self,
        side,
        iface,
        conf_path,
        *,
        env=None,
        wait_ready=True,
        extra_args=(),
        prefix=(),
        log_level="debug",
        command=None,
    ):
        """Start `vpncrypt up` in a namespace with a NOTIFY_SOCKET; wait for
        READY=1.  `prefix`: a command to run it under (e.g. prlimit);
        `command`: the vpncrypt to run (default: the venv's)."""
        ns_sock, ns_path = self.notify_socket()
        log = os.path.join(self.tmp, f"{iface}.log")
        args = [
            *prefix,
            *([command] if command else vpncrypt_command(env)),
            "up",
            iface,
            "--log-level",
            log_level,
            *extra_args,
        ]
        if conf_path:
            args += ["-c", conf_path]
        with open(log, "wb") as f:
            p = subprocess.Popen(
                self.ns_cmd(side, *args),
                cwd=REPO,
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {}), "NOTIFY_SOCKET": ns_path},
            )
        proc = Proc(iface, p, log)
        proc.notify = ns_sock
        self.procs.append(proc)
        if wait_ready:
            msgs = self.wait_notify(proc, "READY=1")
            proc.ready_message = msgs
        return proc

    def wait_notify(self, proc, what, timeout=15):
        deadline = time.monotonic() + timeout
        proc.notify.settimeout(0.1)
        seen = []
        while time.monotonic() < deadline:
            try:
                msg = proc.notify.recv(4096).decode()
                seen.append(msg)
                if what in msg.split("\n"):
                    return seen
            except socket.timeout:
                if proc.popen.poll() is not None:
                    raise AssertionError(
                        f"{proc.name} exited with {proc.popen.returncode} before {what}:\n{proc.log()}"
                    )
        raise AssertionError(f"{proc.name}: no {what} within {timeout}s; got {seen}:\n{proc.log()}")

    def logs(self):
        out = []
        for p in self.procs:
            if p.log_path:
                out.append(f"----- {p.name} -----\n{p.log()[-6000:]}")
        return "\n".join(out)

    def link_exists(self, side, iface):
        r = subprocess.run(
            ["ip", "-n", self.ns[side], "link", "show", iface], capture_output=True, timeout=10
        )
        return r.returncode == 0

    def close(self):
        try:
            super().close()
        finally:
            for s in self.notify_socks:
                s.close()


def pair(lab, kind_a, kind_b, *, initiator="A", psk=False, mtu=None, env_a=None, env_b=None, keepalive=0):
    """Start a tunnel: A is `kind_a`, B is `kind_b`; only the initiator has
    the other's Endpoint (so it must be the one to start the handshake)."""
    a, b = lab.node("A", kind_a), lab.node("B", kind_b)
    key = keys.genpsk() if psk else None
    pa = {"public": b.public, "inner": b.inner, "psk": key, "keepalive": keepalive}
    pb = {"public": a.public, "inner": a.inner, "psk": key}
    if initiator == "A":
        pa["endpoint"] = f"{b.outer}:{PORT}"
    else:
        pb["endpoint"] = f"{a.outer}:{PORT}"
    a.start(a.conf([pa], mtu=mtu), mtu=mtu, env=env_a)
    b.start(b.conf([pb], mtu=mtu), mtu=mtu, env=env_b)
    a.peer_conf, b.peer_conf = pa, pb
    return a, b
