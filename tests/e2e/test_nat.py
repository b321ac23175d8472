"""Through a router with SNAT (the daemons started in ns1 and ns2, their
sockets there):

    ns1: wg1 192.168.241.1, vethc 192.168.1.100/24 (default via 192.168.1.1)
    ns0: vethrc 192.168.1.1/24, vethrs 10.0.0.1/24, forwarding,
         SNAT 192.168.1.0/24 -> 10.0.0.0/24 to 10.0.0.1, UDP conntrack 2 s
    ns2: wg2 192.168.241.2, veths 10.0.0.100/24

Persistent keepalive through the NAT; then, on the same topology, the
packet mark rerouting cases and wg-quick's fwmark policy routing."""

import time

from tests.e2e.conftest import impls
from tests.e2e.topology import routed_pair, veth, wait_up


def nat_topology(w):
    p = routed_pair(w)
    veth(w, "0", "vethrc", "1", "vethc")
    veth(w, "0", "vethrs", "2", "veths")
    w.ip("0", "address", "add", "192.168.1.1/24", "dev", "vethrc")
    w.ip("0", "address", "add", "10.0.0.1/24", "dev", "vethrs")
    w.ip("1", "address", "add", "192.168.1.100/24", "dev", "vethc")
    w.ip("2", "address", "add", "10.0.0.100/24", "dev", "veths")
    for k, dev in (("0", "vethrc"), ("0", "vethrs"), ("1", "vethc"), ("2", "veths")):
        w.ip(k, "link", "set", dev, "up")
    w.ip("1", "route", "add", "default", "via", "192.168.1.1")
    for k, dev in (("0", "vethrc"), ("0", "vethrs"), ("1", "vethc"), ("2", "veths")):
        wait_up(w, k, dev)
    w.sysctl("0", "net.ipv4.ip_forward", 1)
    # conntrack forgets an idle UDP flow after 2 s (the kernel's default is
    # 30 s / 120 s); these sysctls are per namespace
    w.sysctl("0", "net.netfilter.nf_conntrack_udp_timeout", 2)
    w.sysctl("0", "net.netfilter.nf_conntrack_udp_timeout_stream", 2)
    w.nft(
        "0",
        "table ip e2enat {\n"
        " chain post { type nat hook postrouting priority srcnat;\n"
        "  ip saddr 192.168.1.0/24 ip daddr 10.0.0.0/24 snat to 10.0.0.1; }\n}\n",
    )
    w.wg_set(p.dev[1], "peer", p.pub(2), "endpoint", "10.0.0.100:2")
    return p


def mapped(world) -> bool:
    """ns0's conntrack holds ns1's tunnel flow (192.168.1.100:1 -> ns2's
    10.0.0.100:2)."""
    table = world.run("0", "cat", "/proc/net/nf_conntrack").stdout
    return any("src=192.168.1.100 dst=10.0.0.100 sport=1 dport=2 " in line for line in table.splitlines())


@impls()
def test_persistent_keepalive_through_nat(world):
    p = nat_topology(world)
    # the control: without keepalives the NAT forgets the idle flow
    world.ping("1", "192.168.241.2")
    world.ping("2", "192.168.241.1")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t10.0.0.1:1"
    assert mapped(world)
    time.sleep(3)
    assert not mapped(world), "the NAT kept an idle flow for 3 s: the test proves nothing"
    # a keepalive every second holds the mapping, and ns2 can reach ns1
    world.wg_set(p.dev[1], "peer", p.pub(2), "persistent-keepalive", "1")
    world.ping("1", "192.168.241.2")
    world.ping("2", "192.168.241.1")
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t10.0.0.1:1"
    time.sleep(3)
    assert mapped(world)
    world.ping("2", "192.168.241.1")
    world.assert_running()


@impls()
def test_mark_rerouting_and_fwmark_policy_routing(world):
    p = nat_topology(world)
    wg1 = p.dev[1].iface
    world.ping("1", "192.168.241.2")
    # a socket bound to the device
    world.ping("1", "192.168.241.2", iface=wg1)
    # a mark set after routing makes the kernel route the packet again
    world.nft(
        "1",
        "table inet e2emark {\n chain out { type route hook output priority mangle; meta mark set 1; }\n}\n",
    )
    world.ping("1", "192.168.241.2")
    world.ping("1", "192.168.241.2", iface=wg1)
    world.run("1", "nft", "delete", "table", "inet", "e2emark")

    # wg-quick's default route: everything into table 51820 but the
    # daemon's own (marked) UDP; vethc has a v6 address too
    world.ip("1", "-6", "address", "add", "fc00::9/96", "dev", "vethc", "nodad")
    world.ip("1", "-6", "route", "add", "default", "via", "fc00::1")
    world.ip("2", "-4", "address", "add", "192.168.99.7/32", "dev", p.dev[2].iface)
    world.ip("2", "-6", "address", "add", "abab::1111/128", "dev", p.dev[2].iface)
    world.wg_set(p.dev[1], "fwmark", "51820", "peer", p.pub(2), "allowed-ips", "192.168.99.7,abab::1111")
    for fam in ("-4", "-6"):
        world.ip("1", fam, "route", "add", "default", "dev", wg1, "table", "51820")
        world.ip("1", fam, "rule", "add", "not", "fwmark", "51820", "table", "51820")
        world.ip("1", fam, "rule", "add", "table", "main", "suppress_prefixlength", "0")
    world.sysctl("1", "net.ipv4.conf.vethc.rp_filter", 0)
    assert world.wg("show", p.dev[1].iface, "fwmark").stdout.strip() == "0xca6c"
    # a flood, to tease out reference counting bugs in route lookups
    world.ping("1", "192.168.99.7", count=100, flood=True)
    world.ping("1", "abab::1111", count=100, flood=True)
    world.assert_running()
