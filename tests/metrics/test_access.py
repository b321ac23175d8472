"""Who can read the metrics: a UNIX socket with the operator's mode and
group (`--metrics unix:PATH`, `--metrics-socket-mode/-group`), refused to
other local users, replaced safely after a kill -9; TLS and basic auth from
an exporter web config (`--metrics-web-config`); and the peers' endpoints
served only with `--metrics-endpoints`.  A daemon in a lab namespace; the
scrapes are made with tests/metrics/scrape_client.py, as root or, through
setpriv, as nobody."""

import base64
import os
import shutil
import signal
import socket
import tempfile

import pytest

from tests.interop.lab import Lab, need
from tests.metrics.webtls import PASSWORD, web_config
from vpncrypt.protocol import keys

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scrape_client.py")
PYTHON = "/usr/bin/python3"  # the system's: nobody cannot run the venv's from a root-only tree
AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
# nobody with a group of its own that is not the socket's (the Debian
# prometheus group's number does not matter: any but nogroup)
AS_NOBODY_OTHER_GROUP = ("setpriv", "--reuid=nobody", "--regid=1", "--clear-groups")
PEER_ENDPOINT = "192.0.2.77:51820"


@pytest.fixture(scope="module")
def lab():
    assert os.geteuid() == 0, "the metrics tests run as root"
    need("setpriv")
    lab = Lab()
    # a folder everyone may enter (lab.tmp is root's only), made for the sockets
    top = tempfile.mkdtemp(prefix="vpncrypt-metrics-")
    os.chmod(top, 0o755)
    lab.top = top
    # the client too: nobody cannot read it inside the checkout when that lies
    # in a root-only folder (CI clones into a mktemp -d folder, mode 0700)
    lab.client = shutil.copy(CLIENT, os.path.join(top, "scrape_client.py"))
    os.chmod(lab.client, 0o644)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(top, ignore_errors=True)


class Daemon:
    """vpncrypt up in namespace A with one peer (an Endpoint in the file) and `args`."""

    def __init__(self, lab, *args, wait_ready=True, log_level="info", prefix=()):
        self.lab = lab
        self.node = lab.node("A", "vpncrypt")
        self.peer_public = keys.pubkey(keys.genkey())
        text = self.node.conf(
            [{"public": self.peer_public, "allowed": "10.9.0.0/24", "endpoint": PEER_ENDPOINT}]
        )
        path = self.node.write_conf(text)
        self.proc = lab.spawn_vpncrypt(
            "A",
            self.node.iface,
            path,
            extra_args=args,
            wait_ready=wait_ready,
            log_level=log_level,
            prefix=prefix,
        )

    def exit_code(self, timeout=30):
        return self.proc.popen.wait(timeout)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.popen.poll() is None:
            self.proc.popen.send_signal(sig)
        return self.proc.popen.wait(20)


def scrape(lab, target, *opts, user=()):
    """(status or None, body or error text) of a GET /metrics made in A."""
    r = lab.run_in("A", *user, PYTHON, lab.client, target, *opts, check=False, timeout=60)
    first, _, rest = r.stdout.partition("\n")
    if first.startswith("status: "):
        return int(first[8:]), rest
    assert r.returncode == 2 and first.startswith("error: "), (r.returncode, r.stdout, r.stderr)
    return None, first


def _socket_path(lab, name):
    return os.path.join(lab.top, "run", f"{name}.sock")  # run/ is made by the daemon


def test_unix_socket_default_mode_refuses_other_users(lab):
    path = _socket_path(lab, "default")
    d = Daemon(lab, "--metrics", f"unix:{path}")
    try:
        st = os.lstat(path)
        assert oct(st.st_mode & 0o777) == oct(0o600) and st.st_uid == 0 and st.st_gid == 0
        assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == oct(0o755)
        status, body = scrape(lab, f"unix:{path}")
        assert status == 200 and "vpncrypt_peers" in body, body
        status, err = scrape(lab, f"unix:{path}", user=AS_NOBODY)
        assert status is None and "PermissionError" in err, err
    finally:
        assert d.stop() == 0, d.proc.log()
    assert not os.path.lexists(path), "the socket stays after a stop"


def test_unix_socket_group_lets_its_members_in(lab):
    # under the unit's UMask=0077: the folder made and the socket get their modes all the same
    path = os.path.join(lab.top, "run077", "group.sock")
    umask = ("sh", "-c", 'umask 077 && exec "$@"', "sh")
    d = Daemon(lab, "--metrics", f"unix:{path}", "--metrics-socket-group", "nogroup", prefix=umask)
    try:
        st = os.lstat(path)
        assert oct(st.st_mode & 0o777) == oct(0o660) and st.st_gid == 65534
        assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == oct(0o755)
        status, body = scrape(lab, f"unix:{path}", user=AS_NOBODY)  # nobody, group nogroup
        assert status == 200 and "vpncrypt_peers" in body, body
        status, err = scrape(lab, f"unix:{path}", user=AS_NOBODY_OTHER_GROUP)
        assert status is None and "PermissionError" in err, err
    finally:
        assert d.stop() == 0, d.proc.log()


def test_unix_socket_mode_as_given(lab):
    path = _socket_path(lab, "mode")
    d = Daemon(lab, "--metrics", f"unix:{path}", "--metrics-socket-mode", "0666")
    try:
        assert oct(os.lstat(path).st_mode & 0o777) == oct(0o666)
        status, _ = scrape(lab, f"unix:{path}", user=AS_NOBODY_OTHER_GROUP)
        assert status == 200
    finally:
        d.stop()


def test_stale_socket_after_kill_9_is_replaced(lab):
    path = _socket_path(lab, "stale")
    d = Daemon(lab, "--metrics", f"unix:{path}")
    d.stop(signal.SIGKILL)
    lab.run_in("A", "ip", "link", "del", d.node.iface, check=False)
    assert os.path.lexists(path), "kill -9 left no socket: nothing to test"
    old = os.lstat(path).st_ino
    d = Daemon(lab, "--metrics", f"unix:{path}")
    try:
        assert os.lstat(path).st_ino != old
        status, _ = scrape(lab, f"unix:{path}")
        assert status == 200
    finally:
        assert d.stop() == 0, d.proc.log()


def _start_fails(lab, *args):
    d = Daemon(lab, *args, wait_ready=False, log_level="warning")
    code = d.exit_code()
    lines = d.proc.log().strip().splitlines()
    assert code == 1 and len(lines) == 1, d.proc.log()
    assert not lab.link_exists("A", d.node.iface)
    return lines[0]


def test_symlink_or_live_socket_at_the_path_is_refused(lab):
    path = _socket_path(lab, "link")
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    target = os.path.join(lab.top, "target")
    with open(target, "w") as f:
        f.write("untouched\n")
    os.symlink(target, path)
    try:
        line = _start_fails(lab, "--metrics", f"unix:{path}")
        why = "exists and is not a socket; refusing to replace it"
        assert line == f"--metrics unix:{path}: cannot listen: {path}: {why}"
        assert os.path.islink(path) and open(target).read() == "untouched\n"
    finally:
        os.unlink(path)
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(path)
        live.listen(1)
        line = _start_fails(lab, "--metrics", f"unix:{path}")
        assert line == f"--metrics unix:{path}: cannot listen: {path}: another process listens on it"
    finally:
        live.close()
        os.unlink(path)


def _peer_info(body):
    return [line for line in body.splitlines() if line.startswith("vpncrypt_peer_info{")]


def test_endpoints_only_with_the_flag(lab):
    path = _socket_path(lab, "endpoints")
    d = Daemon(lab, "--metrics", f"unix:{path}")
    try:
        _, body = scrape(lab, f"unix:{path}")
        (info,) = _peer_info(body)
        assert 'endpoint=""' in info and "192.0.2.77" not in body, info
    finally:
        d.stop()
    d = Daemon(lab, "--metrics", f"unix:{path}", "--metrics-endpoints")
    try:
        _, body = scrape(lab, f"unix:{path}")
        (info,) = _peer_info(body)
        assert f'endpoint="{PEER_ENDPOINT}"' in info, info
    finally:
        d.stop()


# ---------------------------------------------------------------- TLS and basic auth


def test_tls_and_basic_auth_from_the_web_config(lab):
    path, ca = web_config(lab)
    d = Daemon(lab, "--metrics", "127.0.0.1:9597", "--metrics-web-config", path)
    url = "https://127.0.0.1:9597"
    try:
        status, body = scrape(lab, url, "--cafile", ca, "--user", "scraper", "--password", PASSWORD)
        assert status == 200 and "vpncrypt_peers" in body, body
        for creds in (
            ("--user", "scraper", "--password", "wrong"),
            (),
            ("--user", "nobody", "--password", PASSWORD),
        ):
            status, body = scrape(lab, url, "--cafile", ca, *creds)
            assert status == 401 and "vpncrypt" not in body.replace("unauthorized", ""), (creds, body)
        # plain HTTP to the TLS port: no answer with metrics in it
        status, body = scrape(lab, "http://127.0.0.1:9597", "--user", "scraper", "--password", PASSWORD)
        assert status != 200 and "vpncrypt_peers" not in body, body
        # a client that does not trust the certificate: refused in the handshake
        status, err = scrape(lab, url, "--user", "scraper", "--password", PASSWORD)
        assert status is None and "SSL" in err, err
    finally:
        assert d.stop() == 0, d.proc.log()


def test_basic_auth_without_tls_on_a_unix_socket(lab):
    path, _ = web_config(lab, "auth-only.yml", tls=False)
    sock = _socket_path(lab, "auth")
    d = Daemon(lab, "--metrics", f"unix:{sock}", "--metrics-web-config", path)
    try:
        assert scrape(lab, f"unix:{sock}")[0] == 401
        assert scrape(lab, f"unix:{sock}", "--user", "scraper", "--password", PASSWORD)[0] == 200
    finally:
        d.stop()


def test_bad_web_configs_fail_the_start_in_one_line(lab):
    path, _ = web_config(lab, "readable.yml", mode=0o644)
    line = _start_fails(lab, "--metrics", "127.0.0.1:9598", "--metrics-web-config", path)
    assert line == (
        f"{path}: holds password hashes (basic_auth_users) but is accessible by group or others "
        f"(mode 0644); fix it with `chmod 600 {path}`"
    )
    path, _ = web_config(lab, "unknown.yml", extra="tls_server_confg: {}\n")
    line = _start_fails(lab, "--metrics", "127.0.0.1:9598", "--metrics-web-config", path)
    assert line == f"{path}: tls_server_confg: unknown key"
    path, _ = web_config(lab, "rate.yml", extra="rate_limit:\n  interval: 1s\n  burst: 2\n")
    line = _start_fails(lab, "--metrics", "127.0.0.1:9598", "--metrics-web-config", path)
    assert line == f"{path}: rate_limit: not supported by vpncrypt; remove it"


def test_stop_with_a_client_mid_request_logs_no_error(lab):
    """A scraper that sent half a request, and one whose request waits for
    bcrypt, when the daemon stops: an orderly stop (exit 0), no ERROR and
    no traceback in the log."""
    path, _ = web_config(lab, "mid.yml", tls=False)
    sock = _socket_path(lab, "mid")
    d = Daemon(lab, "--metrics", f"unix:{sock}", "--metrics-web-config", path)
    clients = []
    try:
        for i, request in enumerate(
            (
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # half a request
                b"GET /metrics HTTP/1.1\r\nHost:",
                # whole ones with credentials to check (bcrypt in flight, or waiting)
                *(
                    b"GET /metrics HTTP/1.1\r\nAuthorization: Basic "
                    + base64.b64encode(f"scraper:guess{n}".encode())
                    + b"\r\n\r\n"
                    for n in range(4)
                ),
            )
        ):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(sock)
            c.sendall(request)
            clients.append(c)
        # the server has the half requests: a whole one after them is answered
        assert scrape(lab, f"unix:{sock}", "--user", "scraper", "--password", PASSWORD)[0] == 200
    finally:
        code = d.stop()
        for c in clients:
            c.close()
    log = d.proc.log()
    assert code == 0, log
    # the start line says where, with whose access, and the path apart
    assert f"metrics on unix:{sock} (mode 0600, group root), path /metrics with basic auth\n" in log, log
    assert " ERROR " not in log and "ERROR" not in log and "Traceback" not in log, log
