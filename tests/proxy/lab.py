"""The proxy's lab: a wireguard-go peer in one namespace, `vpncrypt proxy` run
as nobody with no capability in another, a veth pair between them.

    0: veth 172.31.0.1/24   wireguard-go 10.77.0.1/24 fd77::1/64, UDP 51820
       HTTP [::]:8000 serving /blob, DNS 10.77.0.1:53 (peer.test)
    h: veth 172.31.0.2/24   the proxies (as nobody), an echo server 127.0.0.1:9001

The namespaces are the test's own (random names), so the fixed addresses and
ports meet nothing else.  A proxy's files (config, runtime directory) are in
a directory of the lab's that nobody can read.  So that nobody can load the
code, the directories above the checkout and the venv that others cannot
enter (CI clones into a mktemp -d folder, mode 0700) get the search bit
(o+x, not o+r) while the lab stands, and their modes back after.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tests.e2e.conftest import binary
from tests.e2e.netns import World, genkey
from tests.installed import script

NOBODY = pwd.getpwnam("nobody")
DROP = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--bounding-set=-all"]
PEER_V4, PEER_V6 = "10.77.0.1", "fd77::1"
PEER_NAME = "peer.test"
ECHO_PORT = 9001


@dataclass
class Site:
    peer: Any  # tests.e2e.netns.Daemon: the wireguard-go
    key: tuple[str, str]  # its private and public key
    blob: str  # the file its HTTP server serves as /blob
    endpoint: str


class Proxy:
    def __init__(self, lab: "ProxyLab", name: str, popen: subprocess.Popen, log: str, rundir: str) -> None:
        self.lab, self.name, self.popen, self.log_path, self.rundir = lab, name, popen, log, rundir
        self.key: tuple[str, str] | None = None  # its key pair, where the test keeps it

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @property
    def sock(self) -> str:
        return os.path.join(self.rundir, "vpncrypt", f"{self.name}.sock")


def open_ancestors(*paths: str) -> list[tuple[str, int]]:
    """o+x on the directories at and above `paths` that lack it: [(dir, old mode)]."""
    changed: list[tuple[str, int]] = []
    for path in paths:
        d = os.path.realpath(path)
        while True:
            mode = stat.S_IMODE(os.stat(d).st_mode)
            if not mode & 0o001 and d not in [c for c, _m in changed]:
                os.chmod(d, mode | 0o001)
                changed.append((d, mode))
            if d == "/":
                break
            d = os.path.dirname(d)
    return changed


class ProxyLab:
    def __init__(self) -> None:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.opened = open_ancestors(repo, sys.prefix)
        self.proxies: list[Proxy] = []
        self.helpers: list[subprocess.Popen] = []
        try:
            self.world = World(binary("wireguard-go"), names=("0", "h"))
            self.etc = os.path.join("/etc/netns", self.world.n("h"))
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        w = self.world
        os.chmod(w.tmp, 0o755)
        # what runs in h (`ip netns exec` bind-mounts this over /etc/resolv.conf)
        # asks a resolver that is not there, and hears so at once: no host DNS
        os.makedirs(self.etc, exist_ok=True)
        with open(os.path.join(self.etc, "resolv.conf"), "w") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        site = self.add_site("0", 0)
        self.peer, self.peer_key, self.blob = site.peer, site.key, site.blob
        self._helper("h", "echo", str(ECHO_PORT))

    def add_site(self, k: str, n: int) -> "Site":
        """A wireguard-go peer in namespace k (made if new), reached from h
        over veth 172.31.N.0/24 (it .1, h .2) and UDP 51820; its tunnel
        addresses 10.(77+N).0.1/24 and fd(77+N)::1/64, where its servers
        (tests.proxy.servers peer) listen; a 3 MiB file of its own."""
        w = self.world
        if k not in w.ns:
            w.ns[k] = f"e2e{k}-{w.id}"
            w._run(["ip", "netns", "add", w.ns[k]])
            w.ip(k, "link", "set", "lo", "up")
        link = f"vx{n}{w.id}"
        w._run(["ip", "link", "add", link + "p", "netns", w.n(k), "type", "veth", "peer", "name", link + "h"])
        w._run(["ip", "link", "set", link + "h", "netns", w.n("h")])
        for ns, dev, addr in ((k, link + "p", f"172.31.{n}.1/24"), ("h", link + "h", f"172.31.{n}.2/24")):
            w.ip(ns, "address", "add", addr, "dev", dev)
            w.ip(ns, "link", "set", dev, "up")
        peer, key = w.daemon(k), genkey()
        w.wg_set(peer, "listen-port", "51820", private=key[0])
        v4, v6 = f"10.{77 + n}.0.1", f"fd{77 + n}::1"
        w.ip(k, "address", "add", f"{v4}/24", "dev", peer.iface)
        w.ip(k, "address", "add", f"{v6}/64", "dev", peer.iface, "nodad")
        w.ip(k, "link", "set", peer.iface, "up")
        blob = os.path.join(w.tmp, f"www{n}", "blob")
        os.makedirs(os.path.dirname(blob))
        with open(blob, "wb") as f:
            f.write(secrets.token_bytes(3 << 20))
        self._helper(k, "peer", blob, v4, v6, PEER_NAME)
        return Site(peer, key, blob, f"172.31.{n}.1:51820")

    def _helper(self, k: str, *args: str) -> None:
        p = self.world.popen(k, sys.executable, "-m", "tests.proxy.servers", *args, stdin=subprocess.PIPE)
        self.helpers.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", (
            f"tests.proxy.servers {args[0]} did not start: {p.stderr and p.stderr.read()}"
        )

    # ---- proxies ------------------------------------------------------------
    def add_peer(self, *addresses: str) -> tuple[str, str]:
        """A key pair for a proxy, made a peer of wireguard-go with `addresses` (host prefixes)."""
        key = genkey()
        allowed = ",".join(f"{a}/{128 if ':' in a else 32}" for a in addresses)
        self.world.wg_set(self.peer, "peer", key[1], "allowed-ips", allowed)
        return key

    def config(self, key: tuple[str, str], address: str, fronts: str, *, v6: str = "fd77::2") -> str:
        """A wireproxy config: the lab's peer, then `fronts` (sections as text)."""
        return (
            f"[Interface]\nAddress = {address}/32\nAddress = {v6}/128\n"
            f"PrivateKey = {key[0]}\nDNS = {PEER_V4}\n\n"
            f"[Peer]\nPublicKey = {self.peer_key[1]}\nEndpoint = 172.31.0.1:51820\n"
            f"AllowedIPs = 10.77.0.0/24, fd77::/64\n\n{fronts}"
        )

    def nobody_dir(self, name: str) -> str:
        path = os.path.join(self.world.tmp, name)
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        return path

    def write_config(self, name: str, text: str) -> str:
        home = self.nobody_dir(f"{name}-conf")
        path = os.path.join(home, f"{name}.conf")
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        os.chmod(path, 0o600)
        return path

    def start_proxy(self, name: str, text: str, wait: bool = True) -> Proxy:
        """`vpncrypt proxy -c NAME.conf` as nobody in h; waits for its UAPI
        socket (the end of its start) unless told not to."""
        conf = self.write_config(name, text)
        rundir = self.nobody_dir(f"{name}-run")
        log = os.path.join(self.world.tmp, f"{name}.log")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": rundir}
        with open(log, "wb") as f:
            p = subprocess.Popen(
                ["ip", "netns", "exec", self.world.n("h"), *DROP]
                + [script("vpncrypt"), "proxy", "-c", conf, "--log-level", "debug"],
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        proxy = Proxy(self, name, p, log, rundir)
        self.proxies.append(proxy)
        if wait:
            deadline = time.monotonic() + 30
            # (not by connecting: in the proxy's user namespace root is the
            # overflow uid, which the UAPI server refuses with a warning)
            while not (os.path.exists(proxy.sock) and f"{name} up:" in proxy.log()):
                assert p.poll() is None, f"the proxy exited with {p.returncode}:\n{proxy.log()}"
                assert time.monotonic() < deadline, f"no UAPI socket within 30 s:\n{proxy.log()}"
                time.sleep(0.05)
        return proxy

    # ---- clients, in h ------------------------------------------------------
    def curl(self, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
        return self.world.run("h", "curl", "-sS", "--max-time", "50", *args, check=False, timeout=timeout)

    def probe(self, cases: list) -> list:
        """tests.proxy.probe's answers for [(port, bytes), ...] or [(port, bytes, n), ...]."""
        payload = json.dumps([[port, data.hex(), *rest] for port, data, *rest in cases])
        r = self.world.run("h", sys.executable, "-m", "tests.proxy.probe", input=payload, timeout=120)
        return [(bytes.fromhex(a["reply"]), a["closed"]) for a in json.loads(r.stdout)]

    def at_peer(self, script: str, data: bytes) -> subprocess.CompletedProcess:
        """python -c SCRIPT in the first peer's namespace, `data` on its stdin."""
        return subprocess.run(
            ["ip", "netns", "exec", self.world.n("0"), sys.executable, "-c", script],
            input=data,
            capture_output=True,
            timeout=60,
        )

    def close(self) -> None:
        try:
            if hasattr(self, "world"):
                self._close_world()
        finally:
            for d, mode in reversed(self.opened):
                os.chmod(d, mode)

    def _close_world(self) -> None:
        for p in self.proxies:
            if p.popen.poll() is None:
                p.popen.terminate()
                try:
                    p.popen.wait(10)
                except subprocess.TimeoutExpired:
                    p.popen.kill()
                    p.popen.wait(5)
        for h in self.helpers:
            if h.stdin is not None:
                h.stdin.close()
        problems = self.world.close()
        shutil.rmtree(self.etc, ignore_errors=True)
        assert not problems, problems
