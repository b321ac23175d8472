"""The UAPI edge cases side by side with wireguard-go, and `vpncrypt show`
on a wireguard-go interface (issue 10 d, i)."""

import os
import socket
import tempfile
import time


from tests.installed import script
from tests.unix_server import UnixServer
from tests.interop.lab import pair
from vpncrypt.daemon.uapiclient import read_answer
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


def _answer(path, data, timeout=20.0):
    """The first answer to `data` (up to its blank line), or what came
    before the server hung up; the connection stays open meanwhile (no
    half-close: the server must answer without waiting for EOF)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        return read_answer(s)


def _get(node) -> dict:
    """The device lines and the peers' endpoints of a get=1, by key."""
    out: dict = {}
    for line in node.uapi("get=1\n\n").splitlines():
        k, _, v = line.partition("=")
        out.setdefault(k, []).append(v)
    return out


def test_set_framing_and_endpoints_like_wireguard_go(lab):
    """Issue 31 item 10: the same bytes to both daemons, the same answers.
    A bad line without a blank line after it is answered at once (vpncrypt
    answered at its 5 s request timeout, or never); a blank line "\\r\\n"
    after "\\n" lines ends the body (vpncrypt took the next request into
    it); endpoint port 0 is taken and listed (vpncrypt refused it, -22)."""
    a, b = pair(lab, "vpncrypt", "wggo-current", initiator="A")
    peer = keys.decode(keys.pubkey(keys.genkey())).hex().encode()
    at_once = [
        b"set=1\nfwmark=abc\n",
        b"set=1\nfwmark=1\n\r\r\n",
        b"set=1\nlisten_port=51820\nnokey\n",
        b"set=1\npublic_key=" + peer + b"\nendpoint=1.2.3.4\r\n",
    ]
    for data in at_once:
        answers = {n.kind: _answer(n.sock, data) for n in (a, b)}
        assert answers["vpncrypt"] == answers["wggo"] != b"", (data, answers)
    for node in (a, b):
        # "\r\n" ends the body after "\n" lines: applied, answered at once
        got = _answer(node.sock, b"set=1\nfwmark=5\nfwmark=6\n\r\n")
        assert got == b"errno=0\n\n", (node.kind, got)
        assert _get(node)["fwmark"] == ["6"], node.kind
        body = b"set=1\npublic_key=" + peer + b"\nendpoint=127.0.0.1:0\npersistent_keepalive_interval=1\n\n"
        assert _answer(node.sock, body) == b"errno=0\n\n", node.kind
        assert "127.0.0.1:0" in _get(node)["endpoint"], node.kind
        assert _answer(node.sock, b"set=1\nfwmark=0\n\n") == b"errno=0\n\n"
    # sends to port 0 fail (the kernel refuses the destination); the daemon
    # goes on, and the tunnel with it
    time.sleep(2.5)
    assert a.proc.popen.poll() is None and "Traceback" not in a.proc.log(), a.proc.log()[-3000:]
    a.ping(b)


def test_a_zone_shows_in_wg_as_wireguard_gos(lab):
    """A stricter choice (issue 31 item 10): vpncrypt resolves an IPv6
    zone when the endpoint is set, as wg(8) does for the kernel module, and
    lists the scope id (`%1`) where wireguard-go keeps the text (`%lo`,
    `%01`); `wg show` prints both as the interface's name.  A zone naming
    no interface is refused (-99) where wireguard-go takes it, and then
    lists a text that wg (tools 1.0.20210914) crashes on (SIGSEGV)."""
    a, b = pair(lab, "vpncrypt", "wggo-current", initiator="A")
    for zone in ("lo", "01"):
        peer = keys.pubkey(keys.genkey())
        body = f"set=1\npublic_key={keys.decode(peer).hex()}\nendpoint=[fe80::1%{zone}]:51820\n\n"
        shown = {}
        for node in (a, b):
            assert _answer(node.sock, body.encode()) == b"errno=0\n\n", (node.kind, zone)
            lines = node.wg("show", node.iface, "endpoints").stdout.splitlines()
            shown[node.kind] = [line.split("\t")[1] for line in lines if line.startswith(peer)]
        assert shown == {"vpncrypt": ["[fe80::1%lo]:51820"], "wggo": ["[fe80::1%lo]:51820"]}, zone
    other = keys.decode(keys.pubkey(keys.genkey())).hex()
    body = f"set=1\npublic_key={other}\nendpoint=[fe80::1%nosuchif]:1\n\n"
    assert _answer(a.sock, body.encode()) == b"errno=-99\n\n"
