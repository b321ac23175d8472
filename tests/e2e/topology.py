"""The scenarios' topologies (the same shapes as WireGuard's own netns tests,
built here with this suite's helpers).

moved_pair:   both daemons started in ns0 (their UDP sockets on ns0's
              loopback), wg1's interface moved to ns1 and wg2's to ns2:

      ns1: wg1 192.168.241.1/24 fd00::1/112     (socket: ns0 port 1)
      ns2: wg2 192.168.241.2/24 fd00::2/112     (socket: ns0 port 2)

routed_pair:  the daemons started in ns1 and ns2 (sockets there), joined by
              `link_*` helpers (a router in ns0 with SNAT, or a veth pair).
"""

import json
import sys
import time

from tests.e2e.netns import genkey, genpsk, need

INNER = {1: ("192.168.241.1", "fd00::1"), 2: ("192.168.241.2", "fd00::2")}
PORT = {1: 1, 2: 2}


class Pair:
    """Two peers: .dev[1], .dev[2] (Daemons), their keys and the shared PSK."""

    def __init__(self, world):
        self.world = world
        self.key = {1: genkey(), 2: genkey()}
        self.psk = genpsk()
        self.dev = {}

    def pub(self, i):
        return self.key[i][1]

    def priv(self, i):
        return self.key[i][0]

    def set_peer(self, i, allowed_ips, endpoint=None, *, listen_port=False):
        """dev[i]'s private key and its one peer, the other device, with the
        PSK: `allowed_ips` (wg's comma list), the endpoint when given, and
        dev[i]'s listen port (1 or 2) with `listen_port`."""
        other = 3 - i
        args = ["listen-port", str(PORT[i])] if listen_port else []
        args += ["peer", self.pub(other), "preshared-key", "PSK", "allowed-ips", allowed_ips]
        if endpoint is not None:
            args += ["endpoint", endpoint]
        self.world.wg_set(self.dev[i], *args, private=self.priv(i), psk=self.psk)

    def configure(self):
        """Addresses, keys, listen ports 1 and 2, one peer each (with the
        PSK), links up; no endpoints yet."""
        w = self.world
        for i, other in ((1, 2), (2, 1)):
            d = self.dev[i]
            v4, v6 = INNER[i]
            w.ip(d.ns, "address", "add", f"{v4}/24", "dev", d.iface)
            w.ip(d.ns, "address", "add", f"{v6}/112", "dev", d.iface)
            o4, o6 = INNER[other]
            self.set_peer(i, f"{o4}/32,{o6}/128", listen_port=True)
        for i in (1, 2):
            w.ip(self.dev[i].ns, "link", "set", "up", "dev", self.dev[i].iface)

    def endpoints(self, host1, host2):
        """wg1's peer at host2:2, wg2's at host1:1 (hosts as wg writes them)."""
        w = self.world
        w.wg_set(self.dev[1], "peer", self.pub(2), "endpoint", f"{host2}:{PORT[2]}")
        w.wg_set(self.dev[2], "peer", self.pub(1), "endpoint", f"{host1}:{PORT[1]}")

    def mtu(self, mtu):
        for d in self.dev.values():
            self.world.ip(d.ns, "link", "set", d.iface, "mtu", str(mtu))


def moved_pair(world) -> Pair:
    p = Pair(world)
    p.dev[1] = world.daemon("0")
    p.dev[2] = world.daemon("0")
    world.move(p.dev[1], "1")
    world.move(p.dev[2], "2")
    # (each scenario ends with world.assert_running(): the daemons outlive
    # the move)
    p.configure()
    return p


def routed_pair(world) -> Pair:
    p = Pair(world)
    p.dev[1] = world.daemon("1")
    p.dev[2] = world.daemon("2")
    p.configure()
    return p


def veth(world, a, name_a, b, name_b):
    world.ip(a, "link", "add", name_a, "type", "veth", "peer", "name", name_b, "netns", world.n(b))


def linked_pair(world) -> Pair:
    """routed_pair's daemons joined by a veth pair, ve1 10.9.0.1 in ns1 -
    ve2 10.9.0.2 in ns2, each the other's endpoint."""
    p = routed_pair(world)
    veth(world, "1", "ve1", "2", "ve2")
    for k, name, addr in (("1", "ve1", "10.9.0.1/24"), ("2", "ve2", "10.9.0.2/24")):
        world.ip(k, "address", "add", addr, "dev", name)
        world.ip(k, "link", "set", name, "up")
    wait_up(world, "1", "ve1")
    wait_up(world, "2", "ve2")
    p.endpoints("10.9.0.1", "10.9.0.2")
    return p


def wait_up(world, k, ifname, timeout=10):
    deadline = time.monotonic() + timeout
    path = f"/sys/class/net/{ifname}/operstate"
    while True:
        r = world.run(k, "cat", path, check=False)
        if r.stdout.strip() == "up":
            return
        assert time.monotonic() < deadline, f"{ifname} in {world.n(k)} not up: {r.stdout}{r.stderr}"
        time.sleep(0.05)


# ---- a UDP probe (instead of ncat) -----------------------------------------
def udp_listen(world, k, port, wait=2.0):
    """A UDP receiver on *:port in namespace k: returns a handle whose
    .result() is the bytes received within `wait` seconds (b'' if none)."""
    code = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_INET6,socket.SOCK_DGRAM)\n"
        "s.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,0)\n"
        f"s.bind(('::',{port}))\n"
        "print('ready',flush=True)\n"
        f"s.settimeout({wait})\n"
        "try:\n data=s.recv(100)\nexcept socket.timeout:\n data=b''\n"
        "sys.stdout.write(data.hex()+'\\n')\n"
    )
    p = world.popen(k, sys.executable, "-c", code)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()

    class Handle:
        @staticmethod
        def result():
            out, err = p.communicate(timeout=wait + 20)
            assert p.returncode == 0, err
            return bytes.fromhex(out.strip())

    return Handle()


def udp_send(world, k, addr, port, data: bytes):
    code = (
        "import socket,sys\n"
        f"s=socket.socket(socket.AF_INET6 if ':' in {addr!r} else socket.AF_INET,"
        "socket.SOCK_DGRAM)\n"
        f"s.sendto(bytes.fromhex({data.hex()!r}),({addr!r},{port}))\n"
    )
    world.run(k, sys.executable, "-c", code)


# ---- iperf3 -----------------------------------------------------------------
def iperf(world, server_ns, client_ns, addr, size, udp=False, timeout=180):
    """iperf3 from client_ns to a one-shot server bound to addr in
    server_ns, `-n size` bytes (zero-copy; UDP unpaced).  Returns the
    client's JSON summary."""
    need("iperf3")
    need("ss")
    world.assert_alive()
    port = "5201"
    srv = world.popen(server_ns, "iperf3", "-s", "-1", "-B", addr, "-p", port)
    deadline = time.monotonic() + 10
    while f":{port}" not in world._run(["ss", "-N", world.n(server_ns), "-tlnH", f"sport = {port}"]).stdout:
        assert srv.poll() is None, f"iperf3 server exited: {srv.stderr.read()}"
        assert time.monotonic() < deadline, "iperf3 server did not listen"
        time.sleep(0.05)
    args = ["iperf3", "-Z", "-J", "--connect-timeout", "5000", "-n", str(size), "-c", addr, "-p", port]
    if udp:
        args += ["-u", "-b", "0"]
    # the client, watched: a daemon that dies mid-stream fails the scenario
    # at once instead of leaving TCP to retransmit into nothing
    cli = world.popen(client_ns, *args)
    deadline = time.monotonic() + timeout
    while cli.poll() is None:
        dead = [d.iface for d in world.daemons if not d.deleted and not d.alive()]
        if dead or time.monotonic() > deadline:
            cli.kill()
            srv.kill()
            cli.wait(10)
            raise AssertionError(
                f"iperf3 to {addr}: "
                + (f"{dead} exited mid-stream" if dead else f"not done within {timeout} s")
                + world.logs()
            )
        time.sleep(0.1)
    out, err = cli.communicate()
    if cli.returncode != 0:
        srv.kill()
    srv.wait(30)
    assert cli.returncode == 0, (
        f"iperf3 {'UDP' if udp else 'TCP'} to {addr}: {out[-2000:]}{err}\n{world.logs()}"
    )
    return json.loads(out)["end"]
