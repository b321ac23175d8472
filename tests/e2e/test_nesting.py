"""WireGuard through WireGuard, then a routing loop made of the two.

The outer tunnel is the moved pair (sockets in ns0) carrying only
fd00::5:1 <-> fd00::5:2; inner daemons started in ns1 and ns2 (sockets
there, port 5) carry 192.168.241.0/24 and fd00::/112 through it at MTU 1340.
Then the inner interface of ns1 moves to ns0, and the outer tunnel's
endpoint is pointed into the inner one: every outer packet goes back into
the inner tunnel, which sends it through the outer one again.  Each lap adds
headers, so a packet dies at the MTU; the daemons must neither spin, nor
grow, nor stop answering."""

import sys
import time

from tests.e2e.conftest import impls
from tests.e2e.netns import genkey
from tests.e2e.test_traffic import traffic
from tests.e2e.topology import moved_pair

MiB = 1 << 20
# through two userspace tunnels: 256 MiB each way keeps the run within its
# budget (the 1 GiB figure is test_traffic's)
NESTED_SIZE = 256 * MiB

BLAST = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
    "n=int(sys.argv[1])\n"
    "for i in range(n):\n"
    "  try: s.sendto(b'x'*100,('192.168.241.2',9))\n"
    "  except OSError: pass\n"
)


def nest(w):
    p = moved_pair(w)
    for i in (1, 2):
        w.ip(p.dev[i].ns, "address", "flush", "dev", p.dev[i].iface)
    w.ip(p.dev[1].ns, "address", "add", "fd00::5:1/112", "dev", p.dev[1].iface)
    w.ip(p.dev[2].ns, "address", "add", "fd00::5:2/112", "dev", p.dev[2].iface)
    p.set_peer(1, "fd00::5:2/128", "127.0.0.1:2")
    p.set_peer(2, "fd00::5:1/128", "127.0.0.1:1", listen_port=True)
    key = {3: genkey(), 4: genkey()}
    inner = {1: w.daemon("1"), 2: w.daemon("2")}
    for i, me, other, far in ((1, 3, 4, "fd00::5:2"), (2, 4, 3, "fd00::5:1")):
        d = inner[i]
        o = 3 - i
        w.ip(d.ns, "address", "add", f"192.168.241.{i}/24", "dev", d.iface)
        w.ip(d.ns, "address", "add", f"fd00::{i}/112", "dev", d.iface)
        w.ip(d.ns, "link", "set", "mtu", "1340", "up", "dev", d.iface)
        w.wg_set(
            d,
            "listen-port",
            "5",
            "peer",
            key[other][1],
            "allowed-ips",
            f"192.168.241.{o}/32,fd00::{o}/128",
            "endpoint",
            f"[{far}]:5",
            private=key[me][0],
        )
    return p, inner


@impls()
def test_wireguard_through_wireguard(world):
    p, inner = nest(world)
    traffic(world, NESTED_SIZE)
    world.assert_running()


LAPS_FRAGMENTED = (
    "the loop never dies out: one ping keeps 80-300 MB/s circulating between the two tunnels for "
    "as long as they exist (memory stays flat and the UAPI answers).  A lap that outgrows the "
    "inner interface's MTU (1340) leaves the outer daemon's UDP socket anyway: the kernel "
    "fragments it locally (IP_PMTUDISC_WANT, the socket default; ~84,000 datagrams of 1400+ "
    "bytes without DF seen at POSTROUTING in ns0 within 3 s), and each fragment enters the inner "
    "tunnel as a packet of its own, so laps multiply instead of dying at the MTU.  The Linux "
    "module sends < 70,000 bytes"
)


@impls(
    # Neither daemon sees its own datagram come back here (each one's goes
    # into the other's tunnel), so wg_loop.c's check cannot cut it: the laps
    # must die at the MTU.  With sockets that never fragment locally
    # (IP_PMTUDISC_PROBE, IPV6_PMTUDISC_PROBE) vpncrypt-go passes: 63,360 bytes
    # in each of 3 runs, the laps up to the MTU.  The path-MTU work keeps the
    # kernel's WANT until probing can find a black hole (an IPv4 path that
    # filters ICMP carries today only because bulk leaves without DF), so the
    # sockets still fragment locally: 324 MB in the second after 10 pings.
    vpncrypt_bug=LAPS_FRAGMENTED + " (this mark goes once the sockets never fragment locally)",
    wireguard_go_bug=LAPS_FRAGMENTED,
)
def test_routing_loop_neither_hangs_nor_grows(world):
    p, inner = nest(world)
    world.ping("1", "192.168.241.2")
    world.move(inner[1], "0")
    world.ip("0", "address", "add", "192.168.241.1/24", "dev", inner[1].iface)
    world.ip("0", "link", "set", "up", "dev", inner[1].iface)
    world.ping("0", "192.168.241.2")
    # the outer tunnel's peer now lies behind the inner tunnel: a loop
    world.wg_set(p.dev[1], "peer", p.pub(2), "endpoint", "192.168.241.2:7")
    world.remove(p.dev[2])
    world.remove(inner[2])
    looping = [p.dev[1], inner[1]]

    tx_before = sum(tx for _, tx in world.transfer(inner[1]).values())
    r = world.ping("0", "192.168.241.2", count=10, flood=True, check=False)
    assert r.returncode != 0, "a reply came back from a peer that is gone"
    time.sleep(1)
    tx_after = sum(tx for _, tx in world.transfer(inner[1]).values())

    # memory: a first burst of looping datagrams lets buffer pools grow (the
    # control); a second identical one must not grow the daemons further
    def burst():
        world.run("0", sys.executable, "-c", BLAST, "20000", timeout=120)
        time.sleep(1)
        return [d.rss_kib() for d in looping]

    warm = burst()
    after = burst()
    for d, a, b in zip(looping, warm, after):
        assert b - a < 8 * 1024, f"{d.iface}: RSS {a} KiB after the first burst, {b} after the second"
    # still serving: both answer the UAPI and run
    for d in looping:
        world.wg("show", d.iface)
    world.assert_running()
    # and the loop died out: the Linux module's bound for the 10 pings' laps
    assert tx_after - tx_before < 70000, (
        f"{tx_after - tx_before} bytes sent in the second after 10 looping pings: the loop runs on"
    )
