"""Traffic through the moved topology (tests/e2e/topology.py: daemons
started in ns0, interfaces moved to ns1 and ns2): ping, TCP and UDP, IPv4
and IPv6 inside, over IPv4 and IPv6 outside, at the default MTU and at a big
one; and the interface counters after 10 pings."""

import pytest

from tests.e2e.conftest import impls
from tests.e2e.netns import DEFAULT_MTU
from tests.e2e.topology import iperf, moved_pair

GiB = 1 << 30
# WireGuard's test sends 1 GB each way; so does this one (see README: the
# whole e2e run stays within its budget at this size)
SIZE = GiB
# the big MTU WireGuard's test uses: 34816 - 1500 + the default
BIG_MTU = 34816 - 1500 + DEFAULT_MTU
OUTER = {"v4": ("127.0.0.1", "127.0.0.1"), "v6": ("[::1]", "[::1]")}


def traffic(w, size):
    # pings, flood mode as WireGuard's test: 10 each way, v4 and v6 inside
    w.ping("2", "192.168.241.1", count=10, flood=True)
    w.ping("1", "192.168.241.2", count=10, flood=True)
    w.ping("2", "fd00::1", count=10, flood=True)
    w.ping("1", "fd00::2", count=10, flood=True)
    # TCP each way (v4 1->2, v6 2->1), UDP each way (v4 2->1, v6 1->2)
    for server, client, addr, udp in (
        ("2", "1", "192.168.241.2", False),
        ("1", "2", "fd00::1", False),
        ("1", "2", "192.168.241.1", True),
        ("2", "1", "fd00::2", True),
    ):
        end = iperf(w, server, client, addr, size, udp=udp)
        what = f"{'UDP' if udp else 'TCP'} to {addr}"
        if udp:
            assert end["sum"]["bytes"] >= size, (what, end["sum"])
            # unpaced UDP loses datagrams anywhere; some must arrive
            assert end["sum"]["packets"] > end["sum"]["lost_packets"], (what, end["sum"])
        else:
            assert end["sum_sent"]["bytes"] >= size, (what, end["sum_sent"])
            # TCP is reliable: the receiver's count can miss only the last
            # report interval's tail, never the stream
            assert end["sum_received"]["bytes"] >= size * 0.9, (what, end["sum_received"])


@impls()
def test_counters_after_ten_pings(world):
    """10 pings of 84 bytes (56 + ICMP 8 + IPv4 20) received; the kernel's
    bounds for a userspace TUN (wireguard-go's test): rx >= 840, tx >= 880
    (the replies and the handshake's first packet), each below 2500."""
    p = moved_pair(world)
    p.endpoints("127.0.0.1", "127.0.0.1")
    world.ping("2", "192.168.241.1", count=10, flood=True)
    s = world.link_stats("2", p.dev[2])
    assert 840 <= s["rx_bytes"] < 2500 and 880 <= s["tx_bytes"] < 2500, s
    world.assert_running()


@impls()
@pytest.mark.parametrize("outer", ["v4", "v6"])
@pytest.mark.parametrize("mtu", ["default", "big"])
def test_traffic(world, outer, mtu):
    p = moved_pair(world)
    p.endpoints(*OUTER[outer])
    if mtu == "big":
        p.mtu(BIG_MTU)
    else:
        s = world.ip(p.dev[1].ns, "link", "show", "dev", p.dev[1].iface).stdout
        assert f" mtu {DEFAULT_MTU} " in s, s
    traffic(world, SIZE)
    world.assert_running()
