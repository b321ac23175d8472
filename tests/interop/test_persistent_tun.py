"""Persistent TUN devices, as wireguard-go treats them: vpncrypt attaches to
one that the administrator made, and leaves it and its addresses in place
on exit; what vpncrypt created it deletes by ifindex, never by name
(issue 10 b)."""

import json
import os
import signal

import pytest

from tests.interop.lab import PORT


def _link(lab, side, name):
    r = lab.run_in(side, "ip", "-j", "address", "show", "dev", name, check=False)
    if r.returncode != 0:
        return None
    info = json.loads(r.stdout)[0]
    return {
        "ifindex": info["ifindex"],
        "flags": info["flags"],
        "addrs": {
            f"{a['local']}/{a['prefixlen']}" for a in info.get("addr_info", []) if a.get("scope") != "link"
        },
    }


def _peers(lab):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    conf = a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}])
    return a, b, conf


def test_attaches_to_a_persistent_device_and_leaves_it(lab):
    a, b, conf = _peers(lab)
    lab.run_in("A", "ip", "tuntap", "add", "dev", a.iface, "mode", "tun")
    lab.run_in("A", "ip", "address", "add", "10.77.0.1/24", "dev", a.iface)
    before = _link(lab, "A", a.iface)
    for round_ in range(2):  # and again: attaching twice works the same
        a.start(conf)
        a.ping(b)
        log = a.proc.log()
        assert "attached to the persistent TUN device" in log and "created TUN" not in log, log
        during = _link(lab, "A", a.iface)
        assert during["ifindex"] == before["ifindex"]
        assert during["addrs"] == before["addrs"] | {f"{a.inner}/24"}
        assert a.stop(signal.SIGTERM) == 0
        after = _link(lab, "A", a.iface)
        assert after is not None, f"vpncrypt deleted the administrator's device:\n{a.proc.log()}"
        assert after["ifindex"] == before["ifindex"]
        assert after["addrs"] == before["addrs"], (round_, after, before)
        assert not os.path.exists(a.sock)


def test_deletes_what_it_created_by_ifindex(lab):
    """The interface vpncrypt created is renamed and another takes its old
    name: on exit vpncrypt deletes its own (by index), not the newcomer."""
    a, b, conf = _peers(lab)
    a.start(conf)
    a.ping(b)
    mine = _link(lab, "A", a.iface)["ifindex"]
    lab.run_in("A", "ip", "link", "set", "dev", a.iface, "down")
    lab.run_in("A", "ip", "link", "set", "dev", a.iface, "name", "vcrenamed")
    lab.run_in("A", "ip", "tuntap", "add", "dev", a.iface, "mode", "tun")
    newcomer = _link(lab, "A", a.iface)["ifindex"]
    assert newcomer != mine
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()
    assert _link(lab, "A", a.iface)["ifindex"] == newcomer, a.proc.log()
    assert _link(lab, "A", "vcrenamed") is None, a.proc.log()


def _host(lab):
    """The host's routing state in A: rules and routes of both families
    (without the kernel's own routes for the persistent device's addresses
    and link, which come and go with its up state) and the nft ruleset."""
    out = {}
    for v in ("-4", "-6"):
        out[f"rules{v}"] = lab.run_in("A", "ip", v, "rule", "show").stdout
        routes = lab.run_in("A", "ip", v, "route", "show", "table", "all").stdout.splitlines()
        out[f"routes{v}"] = sorted(r for r in routes if not ("proto kernel" in r or "table local" in r))
    out["nft"] = lab.run_in("A", "nft", "list", "ruleset").stdout
    return out


def _host_with_default_routes(lab):
    """A as a host with its own IPv4 and IPv6 default routes (via B), and
    the peer's endpoint address 198.18.7.2 on B's link: what a full tunnel
    takes over and must give back."""
    lab.run_in("B", "ip", "address", "add", "198.18.7.2/32", "dev", lab.veth["B"])
    lab.run_in("A", "ip", "route", "add", "default", "via", "192.168.241.2")
    for side, addr in (("A", "fd00:241::1"), ("B", "fd00:241::2")):
        lab.run_in(side, "ip", "-6", "address", "add", f"{addr}/64", "dev", lab.veth[side], "nodad")
    lab.run_in("A", "ip", "-6", "route", "add", "default", "via", "fd00:241::2")


def test_full_tunnel_on_a_persistent_device_killed_then_restarted(lab):
    """F1: a full tunnel on a persistent TUN, killed with SIGKILL, leaves its
    default routes in table 51820 (the device stays) and its policy rules.
    The next start removes them, uses table 51820 again, and its handshake
    goes out by the main table; a clean stop leaves the host as it was."""
    far = "10.210.0.7"
    _host_with_default_routes(lab)
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    b.run("ip", "address", "add", f"{far}/32", "dev", b.iface)
    lab.run_in("A", "ip", "tuntap", "add", "dev", a.iface, "mode", "tun")
    before = _host(lab)
    conf = a.conf([{"public": b.public, "allowed": "0.0.0.0/0, ::/0", "endpoint": f"198.18.7.2:{PORT}"}])
    a.start(conf)
    a.run("ping", "-c", "2", "-W", "2", far)
    assert a.stop(signal.SIGKILL) == -9
    left = _host(lab)
    for v in ("-4", "-6"):  # what the killed run left: the host is offline
        assert f"default dev {a.iface} table 51820" in "\n".join(left[f"routes{v}"]), left
        assert "fwmark 0xca6c lookup 51820" in left[f"rules{v}"], left

    a.start(conf)
    assert a.wg("show", a.iface, "fwmark").stdout.strip() == "0xca6c", a.proc.log()
    for v in ("-4", "-6"):
        rules = lab.run_in("A", "ip", v, "rule", "show").stdout
        assert rules.count("not from all fwmark 0xca6c lookup 51820") == 1, rules
        assert rules.count("suppress_prefixlength 0") == 1, rules
        assert "51821" not in rules, rules
    r = a.run("ping", "-c", "3", "-W", "2", "-i", "0.3", far, check=False)
    assert r.returncode == 0, f"no ping through the restarted full tunnel:\n{r.stdout}\n{lab.logs()}"
    assert a.dump()[b.public]["handshake"] > 0
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()
    after = _host(lab)
    assert after == before, (after, before)
    got = lab.run_in("A", "ip", "-4", "route", "get", "198.18.7.2").stdout
    assert f"dev {lab.veth['A']}" in got, got
    got = lab.run_in("A", "ip", "-6", "route", "get", "2001:db8::1").stdout
    assert f"dev {lab.veth['A']}" in got, got


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "created"])
@pytest.mark.parametrize("restart", ["table-off", "split"])
def test_full_tunnel_killed_then_restarted_without_one(lab, persistent, restart):
    """F1's leftovers when the next run has no full tunnel: with `Table =
    off` (it adds no routes, yet the killed run's table 51820 and rules must
    go, or the host stays offline) and with a split tunnel; on a persistent
    TUN (the default route stays with the device) and on one the daemon made
    (the kernel takes the routes, the rules over the empty table and the nft
    tables stay).  After the restart nothing of the killed run is left, and
    a clean stop leaves the host as it was."""
    _host_with_default_routes(lab)
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    if persistent:
        lab.run_in("A", "ip", "tuntap", "add", "dev", a.iface, "mode", "tun")
    before = _host(lab)
    peer = {"public": b.public, "endpoint": f"198.18.7.2:{PORT}"}
    a.start(a.conf([dict(peer, allowed="0.0.0.0/0, ::/0")]))
    assert a.stop(signal.SIGKILL) == -9
    left = _host(lab)
    for v in ("-4", "-6"):
        assert "fwmark 0xca6c lookup 51820" in left[f"rules{v}"], left
    assert "vpncrypt-" in left["nft"], left
    if restart == "table-off":
        a.start(a.conf([dict(peer, allowed="10.77.0.2/32")], extra_iface="Table = off\n"))
    else:
        a.start(a.conf([dict(peer, allowed="10.77.0.2/32")]))
    now = _host(lab)
    for v in ("-4", "-6"):
        assert "51820" not in now[f"rules{v}"], (v, now, a.proc.log())
        assert "suppress_prefixlength" not in now[f"rules{v}"], (v, now)
        assert not any("table 51820" in r for r in now[f"routes{v}"]), (v, now)
    assert "vpncrypt-" not in now["nft"], now
    got = lab.run_in("A", "ip", "-4", "route", "get", "198.18.7.2").stdout
    assert f"dev {lab.veth['A']}" in got, got  # the host is online
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()
    assert _host(lab) == before
