"""Persistent TUN devices, as wireguard-go treats them: vpncrypt attaches to
one that the administrator made, and leaves it and its addresses in place
on exit; what vpncrypt created it deletes by ifindex, never by name
(issue 10 b)."""
import json
import os
import signal

from tests.interop.lab import PORT


def _link(lab, side, name):
    r = lab.run_in(side, "ip", "-j", "address", "show", "dev", name, check=False)
    if r.returncode != 0:
        return None
    info = json.loads(r.stdout)[0]
    return {"ifindex": info["ifindex"], "flags": info["flags"],
            "addrs": {f"{a['local']}/{a['prefixlen']}" for a in info.get("addr_info", [])
                      if a.get("scope") != "link"}}


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
    for round_ in range(2):          # and again: attaching twice works the same
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
