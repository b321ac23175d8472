"""AllowedIPs in the session table: longest-prefix match over IPv4 and IPv6,
on both backends."""

import ipaddress

from hypothesis import given, settings, strategies as st

from vpncrypt.transport import TableConfig, new_table


def ip(s):
    return ipaddress.ip_address(s).packed


def peers(t, n):
    return [t.add_peer() for _ in range(n)]


def test_longest_prefix_v4_v6(backend):
    t = new_table(backend)
    default, p8, p16, host, v6d, v6a, v6h = peers(t, 7)
    for cidr, p in (
        ("0.0.0.0/0", default),
        ("10.0.0.0/8", p8),
        ("10.1.0.0/16", p16),
        ("10.1.2.3/32", host),
        ("::/0", v6d),
        ("fd00::/64", v6a),
        ("fd00::1/128", v6h),
    ):
        t.route_add(p, cidr)
    assert t.lookup(ip("10.1.2.3")) == host
    assert t.lookup(ip("10.1.2.4")) == p16
    assert t.lookup(ip("10.2.0.1")) == p8
    assert t.lookup(ip("11.0.0.1")) == default
    assert t.lookup(ip("fd00::1")) == v6h
    assert t.lookup(ip("fd00::2")) == v6a
    assert t.lookup(ip("2001:db8::1")) == v6d
    assert t.lookup(b"\x00" * 5) is None


def test_host_bits_cleared_moves_and_removal(backend):
    t = new_table(backend)
    a, b = peers(t, 2)
    t.route_add(a, "10.0.0.7/24")  # host bits are cleared
    assert [str(n) for n in t.routes(a)] == ["10.0.0.0/24"]
    t.route_add(b, "10.0.0.0/24")  # the prefix moves to the peer that adds it last
    assert t.routes(a) == [] and t.lookup(ip("10.0.0.1")) == b
    t.route_add(b, "fd00::/8")
    t.route_add(b, "10.9.0.0/16")
    assert [str(n) for n in t.routes(b)] == ["10.0.0.0/24", "10.9.0.0/16", "fd00::/8"]
    assert not t.route_remove(a, "10.0.0.0/24")  # not a's: kept
    assert t.lookup(ip("10.0.0.1")) == b
    assert t.route_remove(b, "10.9.0.0/16")
    t.routes_clear(b)
    assert t.lookup(ip("10.0.0.1")) is None and t.lookup(ip("fd00::1")) is None
    t.route_add(a, "10.0.0.0/24")
    t.remove_peer(a)
    assert t.lookup(ip("10.0.0.1")) is None


def test_many_peers_and_removal_touches_only_theirs(backend):
    t = new_table(backend, TableConfig())
    ids = peers(t, 3000)
    for i, p in enumerate(ids):
        t.route_add(p, f"10.{i // 256}.{i % 256}.0/24")
        t.route_add(p, f"fd00:{i:x}::/32")
    for i in range(0, 3000, 37):
        assert t.lookup(ip(f"10.{i // 256}.{i % 256}.9")) == ids[i]
        assert t.lookup(ip(f"fd00:{i:x}::9")) == ids[i]
    for i in range(0, 3000, 2):
        t.remove_peer(ids[i])
    for i in range(3000):
        want = None if i % 2 == 0 else ids[i]
        assert t.lookup(ip(f"10.{i // 256}.{i % 256}.9")) == want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 32), st.integers(0, 5)), max_size=30),
    st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30),
)
def test_against_brute_force(prefixes, probes):
    tables = [new_table(b) for b in ("native", "pynacl")]
    ids = [[t.add_peer() for _ in range(6)] for t in tables]
    model = {}
    for addr, plen, peer in prefixes:
        net = ipaddress.ip_network((addr, plen), strict=False)
        for t, pid in zip(tables, ids):
            t.route_add(pid[peer], net)
        model[net] = peer
    for p in probes:
        a = ipaddress.IPv4Address(p)
        best = max((n for n in model if a in n), key=lambda n: n.prefixlen, default=None)
        for t, pid in zip(tables, ids):
            assert t.lookup(a.packed) == (pid[model[best]] if best is not None else None)
