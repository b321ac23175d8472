"""Routes for AllowedIPs, as wg-quick adds them, removed on exit; the
default route with a fwmark and policy rules so that the tunnel's own UDP
does not loop; Table = off and Table = N (issue 10 g)."""
import signal

from tests.interop.lab import INNER, PORT

FAR = "10.210.0.7"        # an address behind B, outside A's Address prefix


def _nodes(lab, allowed, endpoint=None, table=None):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    b.run("ip", "address", "add", f"{FAR}/32", "dev", b.iface)
    extra = f"Table = {table}" if table is not None else ""
    a.start(a.conf([{"public": b.public, "allowed": allowed,
                     "endpoint": endpoint or f"{b.outer}:{PORT}"}], extra_iface=extra))
    return a, b


def _routes(lab, *args):
    return lab.run_in("A", "ip", "-4", "route", "show", *args).stdout


def _rules(lab):
    return lab.run_in("A", "ip", "-4", "rule", "show").stdout


def _rx(a, b):
    return a.dump()[b.public]["rx"]


def test_routes_for_allowed_ips_outside_the_address(lab):
    a, b = _nodes(lab, f"{INNER['B']}/32, 10.210.0.0/24")
    got = lab.run_in("A", "ip", "-4", "route", "get", FAR).stdout
    assert f"dev {a.iface}" in got, got
    before = _rx(a, b)
    a.run("ping", "-c", "2", "-W", "2", FAR)
    assert _rx(a, b) > before                   # the reply came through the tunnel
    main = _routes(lab)
    assert f"10.210.0.0/24 dev {a.iface}" in main, main
    # 10.200.0.2/32 lies in the Address prefix (10.200.0.0/24): no extra route
    assert "10.200.0.2" not in main, main
    assert a.stop(signal.SIGTERM) == 0
    assert "10.210.0.0/24" not in _routes(lab)


def test_default_route_uses_a_fwmark_and_policy_rules(lab):
    # B's endpoint is reached through A's own default route, as on a real host
    lab.run_in("B", "ip", "address", "add", "198.18.7.2/32", "dev", lab.veth["B"])
    lab.run_in("A", "ip", "route", "add", "default", "via", "192.168.241.2")
    rules_before = _rules(lab)
    a, b = _nodes(lab, "0.0.0.0/0", endpoint=f"198.18.7.2:{PORT}")
    assert a.wg("show", a.iface, "fwmark").stdout.strip() == "0xca6c"     # 51820
    rules = _rules(lab)
    assert "not from all fwmark 0xca6c lookup 51820" in rules, rules
    assert "from all lookup main suppress_prefixlength 0" in rules, rules
    assert f"default dev {a.iface}" in _routes(lab, "table", "51820")
    assert f"dev {a.iface}" in lab.run_in("A", "ip", "-4", "route", "get", FAR).stdout
    before = _rx(a, b)
    a.run("ping", "-c", "2", "-W", "2", FAR)
    # a handshake completed: the tunnel's UDP (marked) went out by the main
    # table instead of looping into the tunnel; and the traffic came back inside
    assert a.dump()[b.public]["handshake"] > 0
    assert _rx(a, b) > before
    assert a.stop(signal.SIGTERM) == 0
    assert _rules(lab) == rules_before
    assert _routes(lab, "table", "51820") == ""


def test_table_off_and_table_n(lab):
    a, b = _nodes(lab, "10.210.0.0/24, 10.211.0.0/16", table="off")
    assert "10.210.0.0/24" not in _routes(lab) and "10.211.0.0/16" not in _routes(lab)
    assert a.stop(signal.SIGTERM) == 0
    a.start(a.conf([{"public": b.public, "allowed": "10.210.0.0/24, 10.211.0.0/16",
                     "endpoint": f"{b.outer}:{PORT}"}], extra_iface="Table = 1234"))
    in_table = _routes(lab, "table", "1234")
    assert f"10.210.0.0/24 dev {a.iface}" in in_table and f"10.211.0.0/16 dev {a.iface}" in in_table
    assert "10.210.0.0/24" not in _routes(lab)
    assert a.stop(signal.SIGTERM) == 0
    assert _routes(lab, "table", "1234") == ""
