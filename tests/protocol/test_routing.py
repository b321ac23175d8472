"""AllowedIPs longest-prefix match."""
import ipaddress

from hypothesis import given, settings, strategies as st

from vpncrypt.protocol.routing import AllowedIPs, packet_destination, packet_source

from tests.protocol.helpers import ipv4, ipv6


def ip(s):
    return ipaddress.ip_address(s).packed


def test_lpm_v4_v6():
    t = AllowedIPs()
    t.insert("0.0.0.0/0", "default")
    t.insert("10.0.0.0/8", "p8")
    t.insert("10.1.0.0/16", "p16")
    t.insert("10.1.2.3/32", "host")
    t.insert("::/0", "v6default")
    t.insert("fd00::/64", "v6a")
    t.insert("fd00::1/128", "v6host")
    assert t.lookup(ip("10.1.2.3")) == "host"
    assert t.lookup(ip("10.1.2.4")) == "p16"
    assert t.lookup(ip("10.2.0.1")) == "p8"
    assert t.lookup(ip("11.0.0.1")) == "default"
    assert t.lookup(ip("fd00::1")) == "v6host"
    assert t.lookup(ip("fd00::2")) == "v6a"
    assert t.lookup(ip("2001:db8::1")) == "v6default"
    assert t.lookup(b"\x00" * 5) is None


def test_move_remove_entries():
    t = AllowedIPs()
    t.insert("10.0.0.0/24", "a")
    t.insert("10.0.0.7/24", "b")  # host bits are masked; the prefix moves to b
    assert t.lookup(ip("10.0.0.1")) == "b"
    assert t.entries("b") == ["10.0.0.0/24"] and t.entries("a") == []
    t.insert("fd00::/8", "b")
    assert t.entries("b") == ["10.0.0.0/24", "fd00::/8"]
    t.remove("10.0.0.0/24", "a")  # not a's: kept
    assert t.lookup(ip("10.0.0.1")) == "b"
    t.remove_peer("b")
    assert t.lookup(ip("10.0.0.1")) is None and t.lookup(ip("fd00::1")) is None


def test_many_peers():
    t = AllowedIPs()
    for i in range(2000):
        t.insert(f"10.{i // 256}.{i % 256}.0/24", i)
        t.insert(f"fd00:{i:x}::/32", i)
    for i in range(0, 2000, 37):
        assert t.lookup(ip(f"10.{i // 256}.{i % 256}.9")) == i
        assert t.lookup(ip(f"fd00:{i:x}::9")) == i


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2 ** 32 - 1), st.integers(0, 32), st.integers(0, 5)), max_size=30),
       st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=30))
def test_against_brute_force(prefixes, probes):
    t = AllowedIPs()
    model = {}
    for addr, plen, peer in prefixes:
        net = ipaddress.ip_network((addr, plen), strict=False)
        t.insert(str(net), peer)
        model[net] = peer
    for p in probes:
        a = ipaddress.IPv4Address(p)
        best = max((n for n in model if a in n), key=lambda n: n.prefixlen, default=None)
        assert t.lookup(a.packed) == (model[best] if best is not None else None)


def test_packet_addresses():
    assert packet_source(ipv4("1.2.3.4", "5.6.7.8")) == bytes([1, 2, 3, 4])
    assert packet_destination(ipv4("1.2.3.4", "5.6.7.8")) == bytes([5, 6, 7, 8])
    assert packet_source(ipv6("fd00::1", "fd00::2")) == ip("fd00::1")
    assert packet_destination(b"\x45") is None
