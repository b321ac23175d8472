"""Routes for AllowedIPs, as wg-quick adds them, removed on exit; the
default route with a fwmark and policy rules so that the tunnel's own UDP
does not loop; Table = off and Table = N (issue 10 g).  The full tunnel's nft
table: the fwmark restored on the peer's replies (strict rp_filter), the
tunnel address closed to the outer link; rules left by a killed daemon."""

import os
import shutil
import signal

from tests.interop.lab import INNER, PORT

FAR = "10.210.0.7"  # an address behind B, outside A's Address prefix


def _nodes(lab, allowed, endpoint=None, table=None):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    b.run("ip", "address", "add", f"{FAR}/32", "dev", b.iface)
    extra = f"Table = {table}" if table is not None else ""
    a.start(
        a.conf(
            [{"public": b.public, "allowed": allowed, "endpoint": endpoint or f"{b.outer}:{PORT}"}],
            extra_iface=extra,
        )
    )
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
    assert _rx(a, b) > before  # the reply came through the tunnel
    main = _routes(lab)
    assert f"10.210.0.0/24 dev {a.iface}" in main, main
    # 10.200.0.2/32 lies in the Address prefix (10.200.0.0/24): no extra route
    assert "10.200.0.2" not in main, main
    assert a.stop(signal.SIGTERM) == 0
    assert "10.210.0.0/24" not in _routes(lab)


def _full_tunnel_lab(lab):
    """B's endpoint (198.18.7.2) is reached through A's own default route, as
    on a real host; the full tunnel will take that default over."""
    lab.run_in("B", "ip", "address", "add", "198.18.7.2/32", "dev", lab.veth["B"])
    lab.run_in("A", "ip", "route", "add", "default", "via", "192.168.241.2")


def _full_tunnel(lab):
    return _nodes(lab, "0.0.0.0/0", endpoint=f"198.18.7.2:{PORT}")


def _nft_tables(lab):
    r = lab.run_in("A", "nft", "list", "tables", check=False)
    assert r.returncode == 0, f"nft list tables: {r.stderr} (is nftables installed?)"
    return r.stdout


def test_default_route_uses_a_fwmark_and_policy_rules(lab):
    _full_tunnel_lab(lab)
    rules_before = _rules(lab)
    a, b = _full_tunnel(lab)
    assert a.wg("show", a.iface, "fwmark").stdout.strip() == "0xca6c"  # 51820
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
    a.start(
        a.conf(
            [
                {
                    "public": b.public,
                    "allowed": "10.210.0.0/24, 10.211.0.0/16",
                    "endpoint": f"{b.outer}:{PORT}",
                }
            ],
            extra_iface="Table = 1234",
        )
    )
    in_table = _routes(lab, "table", "1234")
    assert f"10.210.0.0/24 dev {a.iface}" in in_table and f"10.211.0.0/16 dev {a.iface}" in in_table
    assert "10.210.0.0/24" not in _routes(lab)
    assert a.stop(signal.SIGTERM) == 0
    assert _routes(lab, "table", "1234") == ""


def test_full_tunnel_handshakes_under_strict_reverse_path_filtering(lab):
    # rp_filter=1: a reply is dropped unless the route back to its source
    # leaves by the interface it came in on.  The peer's UDP replies only
    # pass if they get the tunnel's fwmark back (ct mark) so that the reverse
    # lookup goes by the main table, not into the tunnel.
    lab.run_in("A", "sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=1")
    lab.run_in("A", "sysctl", "-q", "-w", "net.ipv4.conf.default.rp_filter=1")
    _full_tunnel_lab(lab)
    a, b = _full_tunnel(lab)
    r = a.run("ping", "-c", "3", "-W", "2", "-i", "0.3", FAR, check=False)
    assert r.returncode == 0, f"no ping through the full tunnel:\n{r.stdout}\n{lab.logs()}"
    assert a.dump()[b.public]["handshake"] > 0
    assert "table ip vpncrypt-" + a.iface in _nft_tables(lab)
    assert a.stop(signal.SIGTERM) == 0
    assert "vpncrypt-" not in _nft_tables(lab)


def test_full_tunnel_address_unreachable_from_outside_the_tunnel(lab):
    _full_tunnel_lab(lab)
    a, b = _full_tunnel(lab)
    # B, a neighbour on A's outer link, routes A's tunnel address over that link
    lab.run_in("B", "ip", "route", "add", f"{INNER['A']}/32", "via", "192.168.241.1")
    assert (
        lab.run_in("B", "ping", "-c", "1", "-W", "2", "192.168.241.1", check=False).returncode == 0
    )  # the link itself works
    r = lab.run_in("B", "ping", "-c", "2", "-W", "1", "-i", "0.3", INNER["A"], check=False)
    assert r.returncode != 0, f"{INNER['A']} answered from outside the tunnel:\n{r.stdout}"
    # a reload without the /0 takes the nft table and the rules away with it
    assert "table ip vpncrypt-" + a.iface in _nft_tables(lab)
    a.write_conf(a.conf([{"public": b.public, "allowed": "10.210.0.0/24", "endpoint": f"198.18.7.2:{PORT}"}]))
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    assert "vpncrypt-" not in _nft_tables(lab)
    assert "suppress_prefixlength" not in _rules(lab)
    assert a.stop(signal.SIGTERM) == 0


def test_rules_left_by_a_killed_daemon_are_removed(lab):
    _full_tunnel_lab(lab)
    rules_before = _rules(lab)
    a, b = _full_tunnel(lab)
    assert a.stop(signal.SIGKILL) == -9
    rules = _rules(lab)
    assert "not from all fwmark 0xca6c lookup 51820" in rules, rules
    a.start(a.conf([{"public": b.public, "allowed": "0.0.0.0/0", "endpoint": f"198.18.7.2:{PORT}"}]))
    rules = _rules(lab)
    assert rules.count("not from all fwmark 0xca6c lookup 51820") == 1, rules
    assert rules.count("from all lookup main suppress_prefixlength 0") == 1, rules
    assert _nft_tables(lab).count("vpncrypt-") == 1
    assert a.stop(signal.SIGTERM) == 0
    rules = _rules(lab)
    assert "fwmark 0xca6c" not in rules and "suppress_prefixlength" not in rules, rules
    assert rules == rules_before
    assert "vpncrypt-" not in _nft_tables(lab)


def test_full_tunnel_without_nft_warns(lab):
    # a PATH with `ip` but no `nft`: the tunnel comes up, and the log says
    # what is missing
    bin_dir = os.path.join(lab.tmp, "bin-without-nft")
    os.mkdir(bin_dir)
    os.symlink(shutil.which("ip"), os.path.join(bin_dir, "ip"))
    _full_tunnel_lab(lab)
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    a.start(
        a.conf([{"public": b.public, "allowed": "0.0.0.0/0", "endpoint": f"198.18.7.2:{PORT}"}]),
        env={"PATH": bin_dir},
    )
    assert a.stop(signal.SIGTERM) == 0
    log = a.proc.log()
    assert "nft not found" in log and "rp_filter=1" in log, log
    assert "LAN neighbours" in log, log
    assert "vpncrypt-" not in _nft_tables(lab)
