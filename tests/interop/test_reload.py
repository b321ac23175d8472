"""SIGHUP is `wg syncconf`: the file is applied against the running state,
so what `wg set` changed goes back to what the file says, exactly as
`wg syncconf` does it to wireguard-go (issue 10 c)."""

import signal

from tests.interop.lab import PORT, pair
from vpncrypt.protocol import keys


def _state(node):
    peers = node.dump()
    port = node.wg("show", node.iface, "listen-port").stdout.strip()
    return port, {k: (v["allowed_ips"], v["keepalive"]) for k, v in peers.items()}


def test_sighup_applies_the_file_like_wg_syncconf(lab):
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    a.ping(b)
    b.run("wg", "set", b.iface, "peer", a.public, "endpoint", f"{a.outer}:{PORT}")
    want = {"A": _state(a), "B": _state(b)}
    stranger = keys.pubkey(keys.genkey())
    for node, other in ((a, b), (b, a)):
        # what an operator might do by hand with `wg set`
        node.wg("set", node.iface, "peer", other.public, "remove")
        node.wg(
            "set", node.iface, "peer", stranger, "allowed-ips", "10.203.0.0/24", "persistent-keepalive", "9"
        )
        node.wg("set", node.iface, "listen-port", "51999")
        assert _state(node) != want[node.side]
    # wireguard-go: `wg syncconf` with its file; vpncrypt: SIGHUP with its file
    b.wg("syncconf", b.iface, b.conf_path)
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    assert _state(b) == want["B"]
    assert _state(a) == want["A"], a.proc.log()[-3000:]
    a.ping(b)
    b.ping(a)


def test_sighup_keeps_sessions_of_unchanged_peers(lab):
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    a.ping(b)
    hs = a.dump()[b.public]["handshake"]
    completed = a.counters()["handshakes_completed"]
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    a.ping(b)
    assert a.dump()[b.public]["handshake"] == hs
    assert a.counters()["handshakes_completed"] == completed
