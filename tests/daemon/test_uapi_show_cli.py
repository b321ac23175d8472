"""`vpncrypt show` as a command, against stand-in UAPI servers: wg's words
for an interface that is not there, quiet on a reader that went away, and
only get=1 to a daemon that is not vpncrypt (issue 31, item 8)."""

import os
import socket
import subprocess
import sys
import textwrap

from tests.installed import script
from tests.unix_server import UnixServer

ANSWER = (
    b"listen_port=51820\n"
    + b"".join(
        b"public_key=%064x\nprotocol_version=1\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\n"
        b"tx_bytes=0\nrx_bytes=0\npersistent_keepalive_interval=0\nallowed_ip=10.%d.%d.0/24\n"
        % (n + 1, n >> 8, n & 255)
        for n in range(2000)
    )
    + b"errno=0\n\n"
)


def _answer(c: socket.socket) -> None:
    got = b""
    while not got.endswith(b"\n\n"):
        chunk = c.recv(100)
        if not chunk:
            return
        got += chunk
    c.sendall(ANSWER)


def _show(*args, **kw):
    return subprocess.run([script("vpncrypt"), "show", *args], timeout=60, **kw)


def test_no_such_interface_in_wgs_words(tmp_path):
    """wg(8): perror("Unable to access interface") and exit 1; the kernel,
    asked after the missing socket, says ENODEV."""
    r = _show("--socket-dir", str(tmp_path), "nosuch", capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "Unable to access interface: No such device\n")
    # a socket file nothing listens on (a daemon that died): the same
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / "gone0.sock"))
    stale.close()
    r = _show("--socket-dir", str(tmp_path), "gone0", capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (1, "Unable to access interface: No such device\n")


def test_a_reader_that_went_away_ends_it_quietly(tmp_path):
    """`vpncrypt show | head`: the pipe's reader is gone before show writes
    (its read end closed here first, so every run meets it): no traceback,
    exit 141 as wg's SIGPIPE death gives the shell."""
    with UnixServer(str(tmp_path / "pipe0.sock"), _answer):
        for extra in ([], ["--json"]):
            r_fd, w_fd = os.pipe()
            os.close(r_fd)
            try:
                r = _show("--socket-dir", str(tmp_path), "pipe0", *extra, stdout=w_fd, stderr=subprocess.PIPE)
            finally:
                os.close(w_fd)
            assert (r.returncode, r.stderr) == (141, b""), r.stderr.decode()


SERVER = textwrap.dedent(
    """
    import socket, sys
    if sys.argv[3] == "vpncrypt":
        import vpncrypt._native  # the native core a vpncrypt daemon maps
    s = socket.socket(socket.AF_UNIX)
    s.bind(sys.argv[1])
    s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
    got = b""
    while not got.endswith(b"\\n\\n"):
        got += c.recv(100)
    open(sys.argv[2], "wb").write(got)
    c.sendall(b"listen_port=51820\\nerrno=0\\n\\n")
    """
)


def _asked(tmp_path, kind):
    """The request `vpncrypt show` sends to a server process of this kind."""
    sock, seen = str(tmp_path / f"{kind}0.sock"), str(tmp_path / f"{kind}.req")
    p = subprocess.Popen([sys.executable, "-c", SERVER, sock, seen, kind], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        r = _show("--socket-dir", str(tmp_path), f"{kind}0", capture_output=True, text=True)
        assert r.returncode == 0 and "listening port: 51820" in r.stdout, r.stderr
        assert p.wait(30) == 0
    finally:
        p.kill()
        p.wait()
    with open(seen, "rb") as f:
        return f.read()


def test_a_foreign_daemon_is_asked_get_1_only(tmp_path):
    """wireguard-go logs every get=vpncrypt as an ERROR ("invalid UAPI
    operation"): a server process without vpncrypt's native core is asked
    get=1, and nothing else, on the first try; a vpncrypt one get=vpncrypt."""
    assert _asked(tmp_path, "other") == b"get=1\n\n"
    assert _asked(tmp_path, "vpncrypt") == b"get=vpncrypt\n\n"


def _random_answer(rng) -> str:
    """A get answer: a device, peers in the order vpncrypt and wireguard-go
    list them, and now and then one that is not (lines swapped, a line of
    another kind among its allowed IPs), an all-zero preshared key, counters."""
    out = ["private_key=" + "11" * 32, "listen_port=51820"][: rng.randrange(3)]
    for n in range(rng.randrange(0, 30)):
        lines = [f"public_key={n:064x}"]
        if rng.random() < 0.3:
            lines.append("preshared_key=" + rng.choice(["00" * 32, "ab" * 32]))
        lines.append("protocol_version=1")
        if rng.random() < 0.5:
            lines.append(rng.choice(["endpoint=192.0.2.1:51820", "endpoint=[fe80::1%2]:0"]))
        lines += [f"last_handshake_time_sec={rng.randrange(3)}", "last_handshake_time_nsec=5"]
        lines += [f"tx_bytes={rng.randrange(10**12)}", "rx_bytes=7", "persistent_keepalive_interval=25"]
        lines += [f"allowed_ip=10.{n}.{i}.0/24" for i in range(rng.randrange(4))]
        if rng.random() < 0.1:
            i = rng.randrange(1, len(lines))
            lines.insert(i, rng.choice(["unknown_key=x", "rx_bytes=9", "allowed_ip=::/0"]))
        if rng.random() < 0.05:
            i, j = rng.randrange(1, len(lines)), rng.randrange(1, len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        out += lines
    out += ["vpncrypt_drop_replay=3", "vpncrypt_info_chacha=avx2"][: rng.randrange(3)]
    return "\n".join(out + ["errno=0", "", ""])


def test_parse_get_reads_any_answer_as_a_line_at_a_time():
    """parse_get's one regular expression over the peers (the usual order)
    gives what reading a line at a time gives, and falls back to that for
    a peer listed otherwise."""
    import random

    from vpncrypt.daemon.uapiclient import _parse_lines, parse_get

    rng = random.Random(5)
    for _ in range(2000):
        text = _random_answer(rng)
        want = {"peers": [], "counters": {}, "info": {}}
        _parse_lines(text.split("\n"), want, want)
        assert parse_get(text) == want, text


def test_plain_show_gives_a_followed_endpoint_name():
    """A peer whose Endpoint names a host has one more line in plain
    `vpncrypt show`: the name, its state and when it is looked up next; a
    peer without one has no such line."""
    from vpncrypt.cli.show import format_show
    from vpncrypt.daemon.uapiclient import parse_get

    named, plain = "%064x" % 1, "%064x" % 2
    text = "\n".join(
        [
            "listen_port=51820",
            f"public_key={named}",
            "allowed_ip=10.1.0.0/24",
            f"public_key={plain}",
            "endpoint=192.0.2.2:51820",
            "allowed_ip=10.2.0.0/24",
            f"vpncrypt_endpoint_name={named} pending 0 1000012 peer.example.net:51820",
            "vpncrypt_drop_replay=0",
            "errno=0",
            "",
            "",
        ]
    )
    shown = format_show("wg0", parse_get(text), now=1000000).split("\n")
    line = "  endpoint name: peer.example.net:51820 (pending, next lookup in 12 s)"
    assert shown.count(line) == 1, shown
    assert shown[shown.index(line) - 1] == "peer: " + _b64(named), shown
    assert sum("endpoint name" in s for s in shown) == 1, shown
    # resolved 90 s ago, no lookup wanted (its handshake works)
    dev = parse_get(text.replace("pending 0 1000012", "resolved 999910 0"))
    assert "  endpoint name: peer.example.net:51820 (resolved 1 minute, 30 seconds ago)" in format_show(
        "wg0", dev, now=1000000
    )


def _b64(hexkey: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(hexkey)).decode()


def test_a_daemon_slow_to_answer_is_waited_for(tmp_path):
    """A get whose answer starts after 6 s (a 100,000-peer daemon on a loaded
    machine took 4.9 s): shown, as `wg show` shows it, not "timed out"."""
    import time

    def slow(c: socket.socket) -> None:
        time.sleep(6.0)
        _answer(c)

    with UnixServer(str(tmp_path / "slow0.sock"), slow):
        r = _show("slow0", "--socket-dir", str(tmp_path), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("peer: ") == 2000
