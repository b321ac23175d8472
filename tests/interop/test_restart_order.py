"""Issue 31 item 5: a restart onto a persistent TUN that an earlier run,
killed with SIGKILL, left with a full tunnel's default route and policy
rules.  Nothing may leave the UDP socket before the new run has removed
those and put its own routes and fwmark in place: an initiation sent
before that follows the dead default route back into the TUN, and the
tunnel comes up one REKEY_TIMEOUT (5 s) late, on the retry.  So the
handshake after the restart completes on the first initiation."""

import signal
import time

from tests.interop.lab import PORT
from tests.interop.test_persistent_tun import _host_with_default_routes


def _first_handshake(node, peer, timeout=60):
    """The node's counters once its first handshake with `peer` is seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.dump()[peer.public]["handshake"] > 0:
            return node.counters()
        node.run("ping", "-c", "1", "-W", "1", "10.210.0.7", check=False)
    raise AssertionError(f"no handshake within {timeout} s:\n{node.lab.logs()}")


def test_restart_sends_nothing_before_the_routes_and_fwmark(lab):
    _host_with_default_routes(lab)
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    b.run("ip", "address", "add", "10.210.0.7/32", "dev", b.iface)
    lab.run_in("A", "ip", "tuntap", "add", "dev", a.iface, "mode", "tun")
    peer = {"public": b.public, "allowed": "0.0.0.0/0, ::/0", "endpoint": f"198.18.7.2:{PORT}"}
    conf = a.conf([dict(peer, keepalive=1)])  # an initiation at once, whatever the traffic
    a.start(conf)
    _first_handshake(a, b)
    assert a.stop(signal.SIGKILL) == -9
    left = lab.run_in("A", "ip", "-4", "route", "show", "table", "51820").stdout
    assert f"default dev {a.iface}" in left, left  # the killed run's dead default route

    a.start(conf)
    c = _first_handshake(a, b)
    # one initiation, answered: none went into the dead tunnel first
    assert c["handshakes_sent"] == 1, (c["handshakes_sent"], a.proc.log()[-6000:])
    assert c["handshakes_completed"] == 1, c
    assert a.stop(signal.SIGTERM) == 0, a.proc.log()
