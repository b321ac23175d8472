"""A request is checked whole before any of it is applied, on a running
daemon (issue 17, F5): at SIGHUP and over the UAPI socket, next to
wireguard-go's answers."""

import signal

from tests.interop.lab import PORT, pair
from vpncrypt.protocol import keys


def test_reload_with_an_oversized_zone_keeps_the_running_peers(lab):
    """The file names a new peer with Endpoint = [fe80::1%4294967296]:1 and
    no longer names C: the reload is refused whole (one line in the log, no
    traceback), C is still there and the tunnel still carries traffic."""
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    c = keys.pubkey(keys.genkey())
    with open(a.conf_path) as f:
        base = f.read()
    a.write_conf(base + f"\n[Peer]\nPublicKey = {c}\nAllowedIPs = 10.99.0.0/16\n")
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    assert set(a.dump()) == {b.public, c}
    d = keys.pubkey(keys.genkey())
    a.write_conf(
        base + f"\n[Peer]\nPublicKey = {d}\nAllowedIPs = 10.98.0.0/16\nEndpoint = [fe80::1%4294967296]:1\n"
    )
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    log = a.proc.log()
    assert "reload failed, keeping the running configuration" in log, log[-2000:]
    assert "Traceback" not in log, log[-3000:]
    assert set(a.dump()) == {b.public, c}
    a.ping(b)
    assert a.proc.popen.poll() is None


def _set(node, body):
    return node.uapi(f"set=1\n{body}\n\n").strip()


def _listen_port(node):
    for line in node.uapi("get=1\n\n").splitlines():
        if line.startswith("listen_port="):
            return int(line[len("listen_port=") :])
    return 0


def test_values_out_of_range_answered_as_wireguard_go(lab):
    a, b = pair(lab, "vpncrypt", "wggo-current", initiator="A")
    peer = keys.decode(keys.pubkey(keys.genkey())).hex()
    same = {
        "listen_port=65536": "errno=-22",
        "fwmark=4294967296": "errno=-22",
        f"public_key={peer}\npersistent_keepalive_interval=65536": "errno=-22",
        f"public_key={peer}\nendpoint=[fe80::1%]:1": "errno=-22",
        f"public_key={peer}\npersistent_keepalive_interval=65535": "errno=0",
    }
    for body, want in same.items():
        for node in (a, b):
            assert _set(node, body) == want, (node.kind, body)
    # a numeric zone over 32 bits: the current wireguard-go takes it (and
    # cannot send to it; Debian 12's refuses it, -22); vpncrypt refuses the
    # request, and nothing before it is applied
    zone = f"public_key={peer}\nendpoint=[fe80::1%4294967296]:1"
    assert _set(b, zone) == "errno=0"
    assert _set(a, f"listen_port={PORT + 11}\n{zone}") == "errno=-22"
    assert _listen_port(a) == PORT
    assert "Traceback" not in a.proc.log()
    a.ping(b)
