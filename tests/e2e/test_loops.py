"""A tunnel whose peer's endpoint is routed back into the tunnel itself.

ns1 and ns2 run their daemons where their interfaces stay, joined by a veth
pair 10.9.0.1 - 10.9.0.2.  A third daemon in ns2 (port 5, 192.168.242.2) is
wg1's second peer, reached through the first: its endpoint 192.168.241.2:5
lies inside the first peer's AllowedIPs, so wg1's datagrams to it go into
wg1's own TUN and out again sealed for the first peer (onion routing through
one interface, which the Linux module carries).  Then that endpoint is moved
to 192.168.242.2:5, inside the second peer's own AllowedIPs: every datagram
wg1 sends to it comes back in on wg1 for the same peer, a loop that adds
60 bytes a lap (IPv4, UDP, WireGuard)."""

import time

from tests.e2e.conftest import impls
from tests.e2e.netns import genkey
from tests.e2e.topology import linked_pair

# The Linux module lets such a lap die where it outgrows the MTU: a ping of
# 84 bytes laps at most (1420 - 84) / 60 + 1 = 23 times, each message at most
# 1420 + 32 bytes, so 10 pings send less than 10 * 23 * 1452 = 333,960 bytes.
# A loop whose laps are fragmented (each fragment a packet of its own) sends
# megabytes a second, for as long as the session lasts.
MODULE_BOUND = 10 * 23 * 1452


def onion(world):
    """The pair, the third daemon, and wg1's second peer reached through the
    first; returns (pair, third daemon, its public key)."""
    p = linked_pair(world)
    world.ping("1", "192.168.241.2")
    far = world.daemon("2")
    priv3, pub3 = genkey()
    world.ip("2", "address", "add", "192.168.242.2/24", "dev", far.iface)
    world.ip("2", "link", "set", "up", "dev", far.iface)
    world.wg_set(far, "listen-port", "5", "peer", p.pub(1), "allowed-ips", "192.168.242.1/32", private=priv3)
    world.ip("1", "address", "add", "192.168.242.1/24", "dev", p.dev[1].iface)
    world.wg_set(p.dev[1], "peer", pub3, "allowed-ips", "192.168.242.2/32", "endpoint", "192.168.241.2:5")
    return p, far, pub3


@impls(
    wireguard_go_bug=(
        "the loop never dies out: a lap that outgrows the MTU is fragmented by the kernel (its socket's "
        "IP_PMTUDISC_WANT) and each fragment laps on as a packet of its own"
    )
)
def test_own_endpoint_routed_into_the_tunnel(world):
    p, far, pub3 = onion(world)
    wg1 = p.dev[1]
    # onion routing through one interface works (the module's behaviour)
    world.ping("1", "192.168.242.2")
    # now the second peer's endpoint lies inside its own AllowedIPs
    world.wg_set(wg1, "peer", pub3, "endpoint", "192.168.242.2:5")
    tx_before = world.transfer(wg1)[pub3][1]
    r = world.ping("1", "192.168.242.2", count=10, flood=True, check=False)
    assert r.returncode != 0, "a reply came back through a loop"
    time.sleep(1)
    sent = world.transfer(wg1)[pub3][1] - tx_before
    assert sent < MODULE_BOUND, f"{sent} bytes sent to the looping peer for 10 pings: the loop runs on"
    # still serving: the first peer carries traffic, the UAPI answers
    world.ping("1", "192.168.241.2")
    world.wg("show", wg1.iface)
    world.assert_running()
