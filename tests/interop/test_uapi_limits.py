"""The UAPI socket cannot take the daemon down: under a small file limit,
many idle clients are refused or timed out, accept() failures only pause
accepting, and the interface is never taken for deleted (issue 10 a)."""

import os
import socket
import time

from tests.installed import script
from tests.interop.lab import need


def _closed_by_server(s, wait):
    s.settimeout(wait)
    try:
        return s.recv(100) == b""
    except socket.timeout:
        return False
    except ConnectionError:
        return True


def test_idle_clients_under_a_small_file_limit(lab):
    need("prlimit")
    a = lab.node("A", "vpncrypt")
    b = lab.node("B", "wggo")
    b.start(b.conf([{"public": a.public, "inner": a.inner}]))
    a.start(
        a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:51820"}]),
        prefix=("prlimit", "--nofile=64:64", "--"),
        log_level="info",
    )
    a.ping(b)
    clients = []
    try:
        for _ in range(80):  # more than the daemon has descriptors for
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(a.sock)  # the backlog takes them even when accept() cannot
            clients.append(s)
        time.sleep(2.5)  # two housekeeping rounds (interface checks)
        assert a.proc.popen.poll() is None, a.proc.log()
        assert lab.link_exists("A", a.iface)
        log = a.proc.log()
        assert "was deleted" not in log, log
        # 32 clients at a time: the other 48 are closed at once, and the
        # refusals are logged at a limited rate
        closed_at_once = sum(_closed_by_server(s, 0.01) for s in clients)
        assert closed_at_once == 80 - 32, closed_at_once
        refused = [line for line in log.splitlines() if "UAPI: connection refused" in line]
        assert 1 <= len(refused) <= 2, refused
        # clients that never complete a request are closed after a few seconds
        assert all(_closed_by_server(s, 8) for s in clients)
    finally:
        for s in clients:
            s.close()
    # the tunnel and the UAPI work throughout and after
    a.ping(b)
    assert a.dump()[b.public]["handshake"] > 0
    assert a.proc.popen.poll() is None
    assert a.stop() == 0
    assert not lab.link_exists("A", a.iface)


def test_accept_failures_pause_but_never_stop():
    """accept() failing with EMFILE pauses accepting briefly (logged, at a
    limited rate); the server then serves again."""
    import asyncio
    import errno
    import tempfile

    from tests.daemon.fakes import FakeControl
    from vpncrypt.daemon import uapi, uapiclient

    async def main(path):
        server = await uapi.start_uapi_server(path, FakeControl())
        real_accept = server._sock.accept
        fails = {"n": 0}

        def failing_accept():
            if fails["n"] < 5:
                fails["n"] += 1
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            return real_accept()

        server._sock = type(
            "S",
            (),
            {
                "accept": staticmethod(failing_accept),
                "fileno": server._sock.fileno,
                "close": server._sock.close,
            },
        )()
        loop = asyncio.get_running_loop()
        answers = []
        for _ in range(3):
            answers.append(
                await loop.run_in_executor(None, lambda: uapiclient.request(path, "get=1", timeout=10))
            )
        server.close()
        await server.wait_closed()
        return answers, fails["n"]

    with tempfile.TemporaryDirectory() as d:
        answers, failed = asyncio.run(main(os.path.join(d, "t.sock")))
    assert failed == 5
    assert all(a.endswith("errno=0\n\n") for a in answers), answers


def test_too_few_files_is_one_clear_line(lab):
    # below the floor of 64 open files the daemon refuses to start, with
    # one line and nothing created, instead of tracebacks from wherever a
    # descriptor ran out
    need("prlimit")
    a = lab.node("A", "vpncrypt")
    for limit in (10, 20, 63):
        r = lab.run_in(
            "A", "prlimit", f"--nofile={limit}:{limit}", "--", script("vpncrypt"), "up", a.iface, check=False
        )
        assert r.returncode == 1, r
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"the open files limit (ulimit -n) is {limit}; vpncrypt needs at least 64" in lines[0], lines
        assert not lab.link_exists("A", a.iface)
        assert not os.path.exists(a.sock)


def test_soft_file_limit_raised_to_the_hard_one(lab):
    # as Go programs (wireguard-go) do at startup
    need("prlimit")
    a = lab.node("A", "vpncrypt")
    a.start(a.conf([]), prefix=("prlimit", "--nofile=40:4096", "--"), log_level="info")
    limits = open(f"/proc/{a.proc.popen.pid}/limits").read()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3:5] == ["4096", "4096"], line
    assert a.stop() == 0
