"""The source address of the outer packets: sticky (a reply leaves from the
address the peer sent to, on a host with several) but not too sticky (a
removed address is given up).  The daemons started in ns1 and ns2, joined
by a veth pair:

    ns1: veth1 10.0.0.1/24 fd00:aa::1/96 ...   ns2: veth2 10.0.0.2/24 ...
"""

import pytest

from tests.e2e.conftest import impls
from tests.e2e.topology import routed_pair, veth, wait_up

NO_STICKY_SOURCE = (
    "no sticky source address: a reply leaves from the address routing picks (the link's "
    "primary v4 / preferred v6 one), not from the one the peer sent to as the Linux module "
    "does; wireguard-go 0.0.20250522's batched reads drop the PKTINFO control message (the "
    "amneziawg-go fork traced it in the same StdNetBind code, its PR #144)"
)

HOST = {"v4": lambda a: a, "v6": lambda a: f"[{a}]"}


def sticky_topology(w, addrs1, addrs2):
    p = routed_pair(w)
    veth(w, "1", "veth1", "2", "veth2")
    for k, dev in (("1", "veth1"), ("2", "veth2")):
        w.sysctl(k, "net.ipv6.conf.all.accept_dad", 0)
        w.sysctl(k, f"net.ipv6.conf.{dev}.accept_dad", 0)
    w.sysctl("1", "net.ipv4.conf.veth1.promote_secondaries", 1)
    for k, dev, addrs in (("1", "veth1", addrs1), ("2", "veth2", addrs2)):
        for a in addrs:
            w.ip(k, "address", "add", a, "dev", dev)
        w.ip(k, "link", "set", dev, "up")
    wait_up(w, "1", "veth1")
    wait_up(w, "2", "veth2")
    return p


@impls()
@pytest.mark.parametrize("family", ["v4", "v6"])
def test_a_removed_source_address_is_given_up(world, family):
    old, new, peer, plen = {
        "v4": ("10.0.0.1", "10.0.0.10", "10.0.0.2", 24),
        "v6": ("fd00:aa::1", "fd00:aa::10", "fd00:aa::2", 96),
    }[family]
    p = sticky_topology(world, [f"{old}/{plen}"], [f"{peer}/{plen}"])
    host = HOST[family]
    world.wg_set(p.dev[1], "peer", p.pub(2), "endpoint", f"{host(peer)}:2")
    world.ping("1", "192.168.241.2")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{host(old)}:1"
    world.ip("1", "address", "add", f"{new}/{plen}", "dev", "veth1")
    world.ip("1", "address", "del", f"{old}/{plen}", "dev", "veth1")
    world.ping("1", "192.168.241.2")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{host(new)}:1"
    world.assert_running()


@impls(wireguard_go_bug=NO_STICKY_SOURCE)
def test_reply_from_the_address_the_peer_sent_to(world):
    """ns1 has two v4 and two v6 addresses on one link; whichever ns2 sends
    to, ns1 answers from it (else ns2 would roam to ns1's primary)."""
    p = sticky_topology(
        world,
        ["10.0.0.1/24", "10.0.0.2/24", "fd00:aa::1/96", "fd00:aa::2/96"],
        ["10.0.0.3/24", "fd00:aa::3/96"],
    )
    for ep in ("10.0.0.1:1", "[fd00:aa::1]:1", "10.0.0.2:1", "[fd00:aa::2]:1"):
        world.wg_set(p.dev[2], "peer", p.pub(1), "endpoint", ep)
        world.ping("2", "192.168.241.1")
        assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{ep}", ep
    world.assert_running()


@impls(wireguard_go_bug=NO_STICKY_SOURCE)
def test_inbound_destination_on_another_interface(world):
    """ns2 reaches ns1 at 10.50.0.1, an address of another of ns1's
    interfaces than the one the packets arrive on (and leave by): the reply
    still comes from 10.50.0.1.  (WireGuard's test uses a dummy interface;
    this kernel has no dummy driver, and a veth pair, both ends in ns1, is
    the same for the routing: an address on an interface the packet never
    crosses.)"""
    p = sticky_topology(world, ["10.0.0.1/24", "fd00:aa::1/96"], ["10.0.0.3/24", "fd00:aa::3/96"])
    veth(world, "1", "vd0", "1", "vd1")
    world.ip("1", "address", "add", "10.50.0.1/24", "dev", "vd0")
    world.ip("1", "link", "set", "vd1", "up")
    world.ip("1", "link", "set", "vd0", "up")
    world.ip("2", "route", "add", "10.50.0.0/24", "dev", "veth2")
    world.wg_set(p.dev[2], "peer", p.pub(1), "endpoint", "10.50.0.1:1")
    world.ping("2", "192.168.241.1")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t10.50.0.1:1"
    world.assert_running()


@impls(wireguard_go_bug=NO_STICKY_SOURCE)
@pytest.mark.parametrize("queues", ["1", "4"])
def test_reply_from_the_address_sent_to_with_queues(world, monkeypatch, queues):
    """As above, vpncrypt with one queue and with four (VPNCRYPT_QUEUES: four
    SO_REUSEPORT sockets, any of which may take a datagram; wireguard-go
    ignores it), each address twice over: the handshake answers from it and
    the data that follows does."""
    monkeypatch.setenv("VPNCRYPT_QUEUES", queues)
    p = sticky_topology(
        world,
        ["10.0.0.1/24", "10.0.0.2/24", "fd00:aa::1/96", "fd00:aa::2/96"],
        ["10.0.0.3/24", "fd00:aa::3/96"],
    )
    for ep in ("10.0.0.2:1", "[fd00:aa::2]:1", "10.0.0.1:1", "[fd00:aa::1]:1") * 2:
        world.wg_set(p.dev[2], "peer", p.pub(1), "endpoint", ep)
        world.ping("2", "192.168.241.1", count=3)
        assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{ep}", ep
    world.assert_running()


@impls(wireguard_go_bug=NO_STICKY_SOURCE)
def test_ipv6_reply_from_the_address_sent_to_after_a_routed_one(world):
    """wireguard-go's netns.sh step: ns1 first reaches ns2 from the address
    routing picks among fd00:aa::1 and fd00:aa::2 (the newer, ::2); then ns2
    sends to fd00:aa::1: the replies come from fd00:aa::1, and ns2 keeps it
    as ns1's endpoint (before, they came from ::2 and ns2 roamed there)."""
    p = sticky_topology(world, ["fd00:aa::1/96", "fd00:aa::2/96"], ["fd00:aa::3/96"])
    world.wg_set(p.dev[1], "peer", p.pub(2), "endpoint", "[fd00:aa::3]:2")
    world.ping("1", "192.168.241.2")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t[fd00:aa::2]:1"  # routing's pick
    world.wg_set(p.dev[2], "peer", p.pub(1), "endpoint", "[fd00:aa::1]:1")
    world.ping("2", "192.168.241.1", count=3)
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t[fd00:aa::1]:1"
    world.ping("1", "192.168.241.2", count=3)  # ns1's own traffic too
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t[fd00:aa::1]:1"
    world.assert_running()


@impls(wireguard_go_bug=NO_STICKY_SOURCE)
@pytest.mark.parametrize("family", ["v4", "v6"])
def test_a_sticky_source_removed_falls_back_to_the_routed_one(world, family):
    """Sticky, but not too sticky: ns2 reaches ns1 at the one of its two
    addresses routing does not pick (v4: the secondary; v6: the older), and
    ns1 answers from it; the address is removed; ns1's next packets leave
    from the one routing picks (the kernel refuses the old one: the source
    is given up for the peer), ns2 roams to it, and the tunnel works both
    ways."""
    addrs, sticky, routed, peer, plen = {
        "v4": (("10.0.0.1", "10.0.0.2"), "10.0.0.2", "10.0.0.1", "10.0.0.3", 24),
        "v6": (("fd00:aa::1", "fd00:aa::2"), "fd00:aa::1", "fd00:aa::2", "fd00:aa::3", 96),
    }[family]
    host = HOST[family]
    p = sticky_topology(world, [f"{a}/{plen}" for a in addrs], [f"{peer}/{plen}"])
    world.wg_set(p.dev[2], "peer", p.pub(1), "endpoint", f"{host(sticky)}:1")
    world.ping("2", "192.168.241.1", count=3)
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{host(sticky)}:1"
    world.ip("1", "address", "del", f"{sticky}/{plen}", "dev", "veth1")
    world.ping("1", "192.168.241.2", count=3)
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{host(routed)}:1"
    world.ping("2", "192.168.241.1", count=3)
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{host(routed)}:1"
    world.assert_running()
