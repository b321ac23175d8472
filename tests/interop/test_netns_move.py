"""WireGuard's netns deployment (wireguard.com/netns): the daemon is started
in the namespace that owns its UDP socket, and its interface is then moved
into another one (`ip link set IFACE netns NS`).  The same scenario runs
against vpncrypt-go and against the current wireguard-go, in the same test:

    ns0: the daemon under test and its UDP socket; a veth to ns2
    ns1: the daemon's interface, after the move (configured there with `wg`,
         through the UAPI socket, which stays in the file system)
    ns2: the peer (the other implementation), on the veth

A handshake and pings over the moved interface; an MTU set in ns1 is what the
daemon pads to (the padded size is read off the peer's byte counter); the
interface moved back and used from ns0; deleted in ns1, the daemon exits; a
clean stop while moved deletes a created interface there and leaves a
persistent one there."""

import os
import secrets
import signal
import subprocess
import time

import pytest

from tests.installed import script
from tests.interop.lab import current_wireguard_go, need
from vpncrypt.protocol import keys

SOCKET_DIR = "/var/run/wireguard"
OUTER = ("192.168.79.1", "192.168.79.2")  # ns0, ns2
INNER = ("10.79.0.1", "10.79.0.2")  # the moved interface, the peer
PORT = 51820
# WireGuard pads a data packet to a multiple of 16 bytes, but never past the
# interface MTU (the paper, 5.4.6); a transport message adds 16 bytes of
# header and 16 of tag.  An inner packet of 1299 bytes at MTU 1300 is sent as
# 1300 + 32 = 1332 bytes; padded to 1312 (as at MTU 1420) it would be 1344.
PROBE_PACKET = 1299
PADDED_AT_1300 = 1300 + 32
KEEPALIVE = 32  # a keepalive message that may fall in the window


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check:
        assert r.returncode == 0, f"ip {' '.join(args)}: {r.stderr}"
    return r


def _wg(*args, check=True):
    r = subprocess.run(["wg", *args], capture_output=True, text=True, timeout=20)
    if check:
        assert r.returncode == 0, f"wg {' '.join(args)}: {r.stderr}"
    return r


class Daemon:
    """vpncrypt-go or wireguard-go, started in a namespace (`-f`)."""

    def __init__(self, net, kind, ns, iface):
        self.net, self.kind, self.ns, self.iface = net, kind, ns, iface
        self.binary = script("vpncrypt-go") if kind == "vpncrypt" else current_wireguard_go()
        self.log_path = os.path.join(net.tmp, f"{iface}-{secrets.token_hex(2)}.log")
        with open(self.log_path, "wb") as f:
            self.popen = subprocess.Popen(
                ["ip", "netns", "exec", ns, self.binary, "-f", iface],
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, "LOG_LEVEL": "debug"},
            )
        net.daemons.append(self)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.sock):
            assert self.popen.poll() is None, f"{kind} exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"{kind} made no UAPI socket:\n{self.log()}"
            time.sleep(0.05)

    @property
    def sock(self):
        return os.path.join(SOCKET_DIR, f"{self.iface}.sock")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-6000:]

    def alive(self):
        return self.popen.poll() is None

    def wait_exit(self, timeout):
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        return self.wait_exit(10)


class Net:
    def __init__(self):
        need("ip")
        need("wg")
        need("ping")
        self.id = secrets.token_hex(3)
        self.ns = [f"vcm{i}-{self.id}" for i in range(3)]
        self.tmp = f"/tmp/vpncrypt-netns-move-{self.id}"
        os.makedirs(self.tmp)
        self.daemons = []
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip(
                "link",
                "add",
                f"vm0{self.id}",
                "netns",
                self.ns[0],
                "type",
                "veth",
                "peer",
                "name",
                f"vm2{self.id}",
                "netns",
                self.ns[2],
            )
            for ns, dev, addr in (
                (self.ns[0], f"vm0{self.id}", OUTER[0]),
                (self.ns[2], f"vm2{self.id}", OUTER[1]),
            ):
                _ip("-n", ns, "address", "add", f"{addr}/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            self.close()
            raise

    def run(self, ns, *cmd, check=True, timeout=30):
        r = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{' '.join(cmd)} in {ns}: {r.stdout}{r.stderr}\n{self.logs()}"
        return r

    def has_link(self, ns, iface):
        return _ip("-n", ns, "link", "show", iface, check=False).returncode == 0

    def logs(self):
        return "\n".join(f"----- {d.kind} {d.iface} -----\n{d.log()}" for d in self.daemons)

    def close(self):
        for d in self.daemons:
            if d.alive():
                d.popen.send_signal(signal.SIGTERM)
        for d in self.daemons:
            if d.wait_exit(5) is None:
                d.popen.kill()
                d.popen.wait(5)
        for ns in self.ns:
            _ip("netns", "del", ns, check=False)
        for d in self.daemons:
            if os.path.exists(d.sock):
                try:
                    os.unlink(d.sock)
                except OSError:
                    pass
        subprocess.run(["rm", "-rf", self.tmp], timeout=20)


@pytest.fixture
def net():
    assert os.geteuid() == 0, "the namespace tests run as root"
    n = Net()
    try:
        yield n
    finally:
        n.close()


def _conf(path, private, port, peer_public, allowed, endpoint=None):
    lines = [
        "[Interface]",
        f"PrivateKey = {private}",
        f"ListenPort = {port}",
        "",
        "[Peer]",
        f"PublicKey = {peer_public}",
        f"AllowedIPs = {allowed}",
    ]
    if endpoint:
        lines.append(f"Endpoint = {endpoint}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def _peer(net, kind):
    """The other implementation, in ns2 (its interface stays there)."""
    other = "wggo" if kind == "vpncrypt" else "vpncrypt"
    iface = f"vmp{net.id}"
    p = Daemon(net, other, net.ns[2], iface)
    p.private = keys.genkey()
    p.public = keys.pubkey(p.private)
    return p


def _configure(net, d, peer, ns):
    """Configure the moved daemon (from anywhere: the UAPI socket is a file)
    and its peer; bring the interface up in `ns`."""
    d.private = keys.genkey()
    d.public = keys.pubkey(d.private)
    _wg(
        "setconf",
        d.iface,
        _conf(
            os.path.join(net.tmp, f"{d.iface}.conf"),
            d.private,
            PORT,
            peer.public,
            f"{INNER[1]}/32",
            f"{OUTER[1]}:{PORT + 1}",
        ),
    )
    _wg(
        "setconf",
        peer.iface,
        _conf(
            os.path.join(net.tmp, f"{peer.iface}.conf"), peer.private, PORT + 1, d.public, f"{INNER[0]}/32"
        ),
    )
    net.run(ns, "ip", "address", "add", f"{INNER[0]}/24", "dev", d.iface)
    net.run(ns, "ip", "link", "set", d.iface, "up")


def _peer_up(net, peer):
    net.run(net.ns[2], "ip", "address", "add", f"{INNER[1]}/24", "dev", peer.iface)
    net.run(net.ns[2], "ip", "link", "set", peer.iface, "mtu", "1420", "up")


def _ping(net, ns, size=56, count=3):
    r = net.run(ns, "ping", "-c", str(count), "-W", "5", "-i", "0.2", "-s", str(size), INNER[1], check=False)
    assert r.returncode == 0, f"ping from {ns} failed:\n{r.stdout}\n{net.logs()}"


def _rx(peer, public):
    for line in _wg("show", peer.iface, "transfer").stdout.splitlines():
        key, rx, _tx = line.split("\t")
        if key == public:
            return int(rx)
    raise AssertionError(f"{public} not a peer of {peer.iface}")


def _padded_size(net, d, peer, ns):
    """The wire size of one data message carrying a PROBE_PACKET-byte ICMP
    echo request, as the peer counted it."""
    before = _rx(peer, d.public)
    _ping(net, ns, size=PROBE_PACKET - 28, count=1)
    return _rx(peer, d.public) - before


def _move(net, iface, src, dst):
    _ip("-n", src, "link", "set", iface, "netns", dst)
    assert net.has_link(dst, iface) and not net.has_link(src, iface)


def _scenario_created(net, kind, peer):
    ns0, ns1 = net.ns[0], net.ns[1]
    d = Daemon(net, kind, ns0, f"vmd{net.id}")
    _move(net, d.iface, ns0, ns1)
    _configure(net, d, peer, ns1)
    _ping(net, ns1)
    assert int(_wg("show", d.iface, "latest-handshakes").stdout.split()[1]) > 0
    assert d.alive(), f"{kind} stopped after the move:\n{d.log()}"

    # the MTU set in ns1 is the one the daemon pads to
    net.run(ns1, "ip", "link", "set", d.iface, "mtu", "1300")
    seen = []
    # vpncrypt looks every second; wireguard-go (not asserted) watches its own
    # namespace only and keeps padding to the MTU it had: a short look will do
    deadline = time.monotonic() + (20 if kind == "vpncrypt" else 3)
    while time.monotonic() < deadline:
        assert d.alive(), f"{kind} stopped while its interface was in ns1:\n{d.log()}"
        seen.append(_padded_size(net, d, peer, ns1))
        if seen[-1] in (PADDED_AT_1300, PADDED_AT_1300 + KEEPALIVE):
            break
        time.sleep(0.5)
    mtu_followed = seen[-1] in (PADDED_AT_1300, PADDED_AT_1300 + KEEPALIVE)
    # bigger than the MTU: the kernel in ns1 fragments, the tunnel carries it
    _ping(net, ns1, size=2000, count=2)

    # back in ns0, and used from there
    _move(net, d.iface, ns1, ns0)
    net.run(ns0, "ip", "address", "add", f"{INNER[0]}/24", "dev", d.iface)
    net.run(ns0, "ip", "link", "set", d.iface, "up")
    _ping(net, ns0)
    assert d.alive(), d.log()

    # deleted in ns1: the daemon notices and exits
    _move(net, d.iface, ns0, ns1)
    assert d.alive(), d.log()
    net.run(ns1, "ip", "link", "del", d.iface)
    code = d.wait_exit(15)
    assert code is not None, f"{kind} still runs 15 s after its interface was deleted:\n{d.log()}"
    assert not os.path.exists(d.sock), f"{kind} left its UAPI socket"

    # a clean stop while moved deletes the interface it created, there
    d = Daemon(net, kind, ns0, f"vmd{net.id}")
    _move(net, d.iface, ns0, ns1)
    time.sleep(1.5)  # a housekeeping round or more while moved
    assert d.alive(), f"{kind} stopped after the move:\n{d.log()}"
    assert d.stop() == 0, d.log()
    assert not net.has_link(ns1, d.iface), f"{kind} left its interface in ns1:\n{d.log()}"
    return mtu_followed, seen, code


def _scenario_persistent(net, kind, peer):
    ns0, ns1 = net.ns[0], net.ns[1]
    iface = f"vmt{net.id}"
    net.run(ns0, "ip", "tuntap", "add", "dev", iface, "mode", "tun")
    d = Daemon(net, kind, ns0, iface)
    _move(net, iface, ns0, ns1)
    _configure(net, d, peer, ns1)
    _ping(net, ns1)
    assert d.stop() == 0, d.log()
    assert net.has_link(ns1, iface), f"{kind} deleted the persistent interface:\n{d.log()}"
    # attached again (in ns0), moved again, deleted there: the daemon exits
    _move(net, iface, ns1, ns0)
    d = Daemon(net, kind, ns0, iface)
    _move(net, iface, ns0, ns1)
    _configure(net, d, peer, ns1)
    _ping(net, ns1)
    net.run(ns1, "ip", "link", "del", iface)
    assert d.wait_exit(15) is not None, f"{kind} runs on after its interface was deleted:\n{d.log()}"


def test_interface_moved_to_another_namespace(net):
    results = {}
    for kind in ("wggo", "vpncrypt"):  # the reference first: it proves the scenario
        peer = _peer(net, kind)
        _peer_up(net, peer)
        results[kind] = _scenario_created(net, kind, peer)
        _scenario_persistent(net, kind, peer)
        assert peer.stop() == 0, peer.log()
    mtu_followed, seen, _ = results["vpncrypt"]
    assert mtu_followed, (
        f"vpncrypt did not pad to the MTU set in ns1: data messages of {seen} "
        f"bytes, want {PADDED_AT_1300}\n{net.logs()}"
    )
