"""Issue 31 items 1 and 2: Endpoint host names that resolve late, never, or
move, with `vpncrypt up` in namespace A asking a lab DNS server of the
test's own (lab_dns.py) whose answers the test changes while it runs.

* a start whose name cannot be resolved yet comes up; the other peer works
  meanwhile; the peer gets its endpoint once the resolver answers, without
  a restart or a reload (wg-quick would have retried for ~70 s and failed;
  vpncrypt exited 1 at once);
* a name that does not exist is one log line, and the peer waits;
* a name that moves is followed, without a reload, once the handshake at
  the old address fails;
* a peer that roamed in and works is not moved to what the name says;
* a reload with a name that does not resolve applies the rest of the file;
  an endpoint set over the UAPI replaces the name until the next reload.
"""

import signal
import time

import pytest

from tests.interop.lab import PORT
from tests.interop.lab_dns import LabDNS
from vpncrypt.bench.nslab import SOCKET_DIR
from vpncrypt.cli.show import show_json
from vpncrypt.config.keytypes import fingerprint
from vpncrypt.daemon.uapiclient import get_device
from vpncrypt.protocol import keys

NAME = "peer.vpncrypt.test"
B_OUTER = "192.168.241.2"
METRICS = 19586


@pytest.fixture
def dns(lab):
    server = LabDNS(lab, "A", {NAME: "servfail"})
    try:
        yield server
    finally:
        server.close()


def wait_for(what, fn, timeout=120, logs=None):
    """fn()'s first true value, asked every 0.2 s (the deadline is only
    there to end a test that fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}" + (f"\n{logs.logs()}" if logs else ""))


def shown(node, peer):
    """`vpncrypt show --json`'s entry of `peer` on `node`."""
    dev, ours = get_device(node.iface, SOCKET_DIR)
    return next(p for p in show_json(node.iface, dev, ours)["peers"] if p["public_key"] == peer.public)


def name_state(node, peer):
    entry = shown(node, peer)["endpoint_name"]
    return entry["state"] if entry else None


def metrics(lab):
    code = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{METRICS}/metrics').read().decode())"
    return lab.run_in("A", "python3", "-c", code).stdout


def second_b(lab):
    """Another wireguard-go in B, on port 51821, tunnel address 10.201.0.3."""
    b2 = lab.node("B", "wggo")
    b2.iface = "wgc" + lab.id
    lab.ifaces[-1] = b2.iface
    b2.inner = "10.201.0.3"
    return b2


def test_start_with_the_resolver_down_comes_up_and_follows_it(lab, dns):
    a, b, b2 = lab.node("A", "vpncrypt"), lab.node("B", "wggo"), second_b(lab)
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    b2.start(
        b2.conf([{"public": a.public, "inner": a.inner}], listen=False, extra_iface="ListenPort = 51821")
    )
    a.start(
        a.conf(
            [
                {"public": b.public, "inner": b.inner, "endpoint": f"{NAME}:{PORT}"},
                {"public": b2.public, "allowed": "10.201.0.3/32", "endpoint": f"{B_OUTER}:51821"},
            ]
        ),
        extra_args=("--metrics", f"127.0.0.1:{METRICS}"),
    )
    # up, with the named peer waiting and the other one working
    assert a.dump()[b.public]["endpoint"] == "(none)"
    wait_for(
        "a handshake with the other peer",
        lambda: (
            a.run("ping", "-c", "1", "-W", "1", "10.201.0.3", check=False)
            and a.dump()[b2.public]["handshake"] > 0
        ),
    )
    # (no next lookup is shown while one is under way)
    entry = wait_for("a next lookup", lambda: (e := shown(a, b)["endpoint_name"]) and e["next_try"] and e)
    assert entry["name"] == f"{NAME}:{PORT}" and entry["state"] == "pending", entry
    assert entry["resolved"] is None and entry["next_try"] > 0, entry
    assert shown(a, b2)["endpoint_name"] is None
    text = metrics(lab)
    assert any(
        line.startswith("vpncrypt_peer_endpoint_name_state{")
        and 'state="pending"' in line
        and 'name=""' in line  # where the peer is: only with --metrics-endpoints
        and line.endswith(" 1.0")
        for line in text.splitlines()
    ), text
    assert a.dump()[b.public]["endpoint"] == "(none)"  # still waiting

    dns.set({NAME: B_OUTER})  # the resolver comes up
    wait_for("the endpoint from the name", lambda: a.dump()[b.public]["endpoint"] == f"{B_OUTER}:{PORT}")
    a.ping(b)
    entry = shown(a, b)["endpoint_name"]
    assert entry["state"] == "resolved" and entry["resolved"] > 0 and entry["next_try"] is None, entry
    assert any(
        line.startswith("vpncrypt_peer_endpoint_name_state{")
        and 'state="resolved"' in line
        and line.endswith(" 1.0")
        for line in metrics(lab).splitlines()
    )
    log = a.proc.log()
    assert "SIGHUP" not in log and a.proc.popen.poll() is None, log[-3000:]
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()[-3000:]


def test_a_name_that_does_not_exist_is_one_line_and_the_peer_waits(lab, dns):
    dns.set({})  # every name: NXDOMAIN
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    text = a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{NAME}:{PORT}"}])
    a.start(text)
    assert wait_for("the name failed", lambda: name_state(a, b) == "failed", timeout=90)
    entry = shown(a, b)["endpoint_name"]
    assert entry["next_try"] > time.time() + 200, entry  # then every 5 minutes
    log = a.proc.log()
    lines = [line for line in log.splitlines() if NAME in line and ("WARNING" in line or "ERROR" in line)]
    assert len(lines) == 1, log[-4000:]
    n = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("Endpoint"))
    assert f"{a.conf_path}:{n}: [Peer] Endpoint:" in lines[0] and "no such name" in lines[0], lines
    assert fingerprint(keys.decode(b.public)) in lines[0], lines
    assert a.private not in log and "Traceback" not in log
    assert a.proc.popen.poll() is None and a.dump()[b.public]["endpoint"] == "(none)"
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()[-3000:]


def test_a_moved_name_is_followed_without_a_reload(lab, dns):
    dns.set({NAME: B_OUTER})
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{NAME}:{PORT}"}]))
    a.ping(b)
    # B moves to another address, and the name with it; B starts afresh
    # there, not knowing where A is (else B's own initiation would bring A
    # its new address: roaming, not the name)
    b.stop()
    veth = lab.veth["B"]
    lab.run_in("B", "ip", "address", "del", f"{B_OUTER}/24", "dev", veth)
    lab.run_in("B", "ip", "address", "add", "192.168.241.3/24", "dev", veth)
    dns.set({NAME: "192.168.241.3"})
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    wait_for("a ping through the moved peer", lambda: a.ping(b, count=1, check=False), timeout=180, logs=lab)
    assert a.dump()[b.public]["endpoint"] == f"192.168.241.3:{PORT}"
    log = a.proc.log()
    assert f"endpoint set to 192.168.241.3:{PORT}" in log and "SIGHUP" not in log, log[-4000:]
    assert name_state(a, b) == "resolved"
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()[-3000:]


def test_a_roamed_endpoint_that_works_is_not_overridden(lab, dns):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{NAME}:{PORT}"}]))
    # B knows where A is and keeps in touch: A's peer roams in at B's address
    b.start(
        b.conf([{"public": a.public, "inner": a.inner, "endpoint": f"192.168.241.1:{PORT}", "keepalive": 1}])
    )
    wait_for("a handshake B started", lambda: a.dump()[b.public]["handshake"] > 0)
    assert a.dump()[b.public]["endpoint"] == f"{B_OUTER}:{PORT}"
    dns.set({NAME: "192.168.241.9"})  # a stale answer: nothing is there
    wait_for("the name resolved", lambda: name_state(a, b) == "resolved")
    assert a.dump()[b.public]["endpoint"] == f"{B_OUTER}:{PORT}"
    a.ping(b)
    assert a.dump()[b.public]["endpoint"] == f"{B_OUTER}:{PORT}"
    assert "kept" in a.proc.log(), a.proc.log()[-3000:]
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()[-3000:]


def test_a_reload_with_a_name_not_found_applies_the_rest(lab, dns):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    other = keys.pubkey(keys.genkey())
    a.start(a.conf([{"public": other, "allowed": "10.9.0.0/24", "endpoint": "192.0.2.1:51820"}]))
    a.write_conf(
        a.conf(
            [
                {"public": other, "allowed": "10.9.1.0/24", "endpoint": "192.0.2.1:51820"},
                {"public": b.public, "inner": b.inner, "endpoint": f"{NAME}:{PORT}"},
            ]
        )
    )
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    log = a.proc.log()
    assert "reload failed" not in log and "reloaded" in log, log[-3000:]
    dump = a.dump()
    assert dump[other]["allowed_ips"] == "10.9.1.0/24", dump
    assert dump[b.public]["endpoint"] == "(none)", dump
    assert name_state(a, b) == "pending"
    dns.set({NAME: B_OUTER})
    wait_for("the endpoint from the name", lambda: a.dump()[b.public]["endpoint"] == f"{B_OUTER}:{PORT}")
    a.ping(b)
    assert name_state(a, b) == "resolved"
    # an endpoint set over the UAPI replaces the name: no longer followed
    a.wg("set", a.iface, "peer", b.public, "endpoint", f"{B_OUTER}:{PORT}")
    assert shown(a, b)["endpoint_name"] is None
    # ... until a reload applies the file's Endpoint again
    a.proc.popen.send_signal(signal.SIGHUP)
    wait_for("the name followed again", lambda: name_state(a, b) == "resolved")
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()[-3000:]
