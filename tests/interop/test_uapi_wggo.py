"""The UAPI edge cases side by side with wireguard-go, and `vpncrypt show`
on a wireguard-go interface (issue 10 d, i)."""

import os
import socket
import tempfile
import time


from tests.installed import script
from tests.unix_server import UnixServer
from tests.interop.lab import pair
from vpncrypt.protocol import keys


def _exchange(path, data, half_close=False, timeout=3.0):
    """Send `data`; everything the server sends until it closes, the time that
    took, and whether it closed (rather than our timeout ending it)."""
    t0 = time.monotonic()
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        buf, closed = b"", False
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    closed = True
                    break
                buf += chunk
        except socket.timeout:
            pass
    return buf, time.monotonic() - t0, closed


def test_uapi_edge_cases_like_wireguard_go(lab):
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    for node in (a, b):
        # get=1 with CRLF: never waits for a blank line that will not come
        got, took, closed = _exchange(node.sock, b"get=1\r\n\r\n")
        assert closed and took < 1.0, (node.kind, got, took)
        assert got in (b"", b"errno=-22\n\n"), (node.kind, got)
        # set=1 ending at EOF without the blank line: applied, answered errno=0
        peer = keys.pubkey(keys.genkey())
        body = (
            f"set=1\npublic_key={keys.decode(peer).hex()}\n"
            "allowed_ip=10.250.0.0/24\npersistent_keepalive_interval=17"
        )
        got, took, closed = _exchange(node.sock, body.encode(), half_close=True)
        assert got == b"errno=0\n\n" and closed, (node.kind, got)
        d = node.dump()
        assert d[peer]["allowed_ips"] == "10.250.0.0/24" and d[peer]["keepalive"] == "17", (node.kind, d)
    a.ping(b)


def test_show_on_a_wireguard_go_interface(lab):
    """wireguard-go hangs up on get=vpncrypt: show asks get=1 instead and
    prints the device (without vpncrypt's drop counters)."""
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    a.ping(b)
    r = b.run(script("vpncrypt"), "show", b.iface)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"interface: {b.iface}" in out
    assert f"public key: {b.public}" in out and "listening port: 51820" in out
    assert f"peer: {a.public}" in out and "latest handshake:" in out, out
    assert "drops:" not in out
    # asked get=1 only: wireguard-go logs any other operation as an ERROR
    assert "invalid UAPI operation" not in b.proc.log(), b.proc.log()
    # and on vpncrypt itself, the drop counters are there
    out = a.run(script("vpncrypt"), "show", a.iface).stdout
    assert f"peer: {b.public}" in out and "drops:" in out


def test_show_fails_clearly_when_nothing_answers():
    """A socket whose server hangs up on every request: an error, exit 1,
    never an empty device."""
    with tempfile.TemporaryDirectory() as d:

        def hang_up(c: socket.socket) -> None:
            c.recv(100)

        with UnixServer(os.path.join(d, "mute0.sock"), hang_up):
            import subprocess

            r = subprocess.run(
                [script("vpncrypt"), "show", "--socket-dir", d, "mute0"],
                capture_output=True,
                text=True,
                timeout=30,
            )
    assert r.returncode == 1
    assert r.stdout == ""
    assert "mute0" in r.stderr and "without an answer" in r.stderr, r.stderr
