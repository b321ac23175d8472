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
