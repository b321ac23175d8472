"""Basic auth under unauthenticated load (the metrics server in this
process, on loopback): a request without credentials costs no bcrypt, a
verdict is cached by (user, hash, password), one bcrypt check runs at a
time, and a hash or password bcrypt refuses gets 401 (never an empty
reply), logged once.  bcrypt.checkpw is counted through a monkeypatch."""

import asyncio
import base64
import logging
import threading
import time

import bcrypt
import pytest

from vpncrypt.daemon.metrics import MetricsServer, MetricsSettings
from vpncrypt.daemon.webconfig import WebConfig

PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4))


def _auth(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Counted:
    """bcrypt.checkpw, counted, with the most calls seen at once; `hold`
    makes the first call wait until `release` is set or a second call runs."""

    def __init__(self, monkeypatch, fail=False):
        self.real = bcrypt.checkpw
        self.calls = self.now = self.most = 0
        self.fail = fail
        self.lock = threading.Lock()
        self.hold = None  # a function: True once the first call may go on
        monkeypatch.setattr(bcrypt, "checkpw", self)

    def __call__(self, password, hashed):
        with self.lock:
            self.calls += 1
            self.now += 1
            self.most = max(self.most, self.now)
            first = self.calls == 1
        try:
            if first and self.hold is not None:
                deadline = time.monotonic() + 60
                while not self.hold() and self.now < 2:
                    assert time.monotonic() < deadline, "the requests never came"
                    time.sleep(0.01)
            if self.fail:
                raise ValueError("Invalid salt")
            return self.real(password, hashed)
        finally:
            with self.lock:
                self.now -= 1


async def _request(port, authorization=None):
    """The status of GET /nothing (404 once authorized, else 401), or None
    for a connection closed without an answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: {authorization}\r\n" if authorization is not None else ""
    writer.write(f"GET /nothing HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    if not answer:
        return None
    return int(answer.split(b" ", 2)[1])


def _serve(users, scenario):
    async def main():
        web = WebConfig(path="web.yml", users=users)
        server = await MetricsServer(None, MetricsSettings(host="127.0.0.1", port=0, web=web)).start()
        try:
            return await scenario(server)
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_no_credentials_cost_no_bcrypt(monkeypatch):
    counted = Counted(monkeypatch)

    async def scenario(server):
        return [
            await _request(server.port, h)
            for h in (None, "", "Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"no colon").decode())
        ]

    assert _serve({"alice": HASH}, scenario) == [401] * 5
    assert counted.calls == 0


def test_good_credentials_checked_once(monkeypatch):
    counted = Counted(monkeypatch)

    async def scenario(server):
        good = [await _request(server.port, _auth("alice", PASSWORD)) for _ in range(5)]
        bad = [await _request(server.port, _auth("alice", "wrong")) for _ in range(3)]
        unknown = [await _request(server.port, _auth("bob", PASSWORD)) for _ in range(3)]
        return good, bad, unknown

    good, bad, unknown = _serve({"alice": HASH}, scenario)
    assert good == [404] * 5 and bad == [401] * 3 and unknown == [401] * 3
    assert counted.calls == 3  # one per (user, hash, password)


def test_one_bcrypt_check_at_a_time(monkeypatch):
    counted = Counted(monkeypatch)
    entered = []
    real = MetricsServer._authorized

    async def authorized(self, headers):
        entered.append(1)
        return await real(self, headers)

    monkeypatch.setattr(MetricsServer, "_authorized", authorized)
    n = 6
    # the first check waits until all n requests are being authorized, and
    # then a second check running at once would end its wait (failing the
    # test below); none comes within 3 s: the rest are waiting their turn
    state = {"since": None}

    def hold():
        if len(entered) < n:
            return False
        state["since"] = state["since"] or time.monotonic()
        return time.monotonic() - state["since"] > 3

    counted.hold = hold

    async def scenario(server):
        return await asyncio.gather(*(_request(server.port, _auth("alice", f"guess{i}")) for i in range(n)))

    assert _serve({"alice": HASH}, scenario) == [401] * n
    assert counted.most == 1 and counted.calls == n


def test_password_over_72_bytes_refused(monkeypatch):
    counted = Counted(monkeypatch)
    long = PASSWORD + "x" * (73 - len(PASSWORD))  # 73 bytes: bcrypt reads 72

    async def scenario(server):
        return [await _request(server.port, _auth("alice", p)) for p in (long, "é" * 37)]

    assert _serve({"alice": HASH}, scenario) == [401, 401]
    assert counted.calls == 0


def test_hash_bcrypt_refuses_gets_401_logged_once(monkeypatch, caplog):
    Counted(monkeypatch, fail=True)

    async def scenario(server):
        return [await _request(server.port, _auth("alice", f"try{i}")) for i in range(3)]

    with caplog.at_level(logging.INFO, logger="vpncrypt.daemon"):
        assert _serve({"alice": HASH}, scenario) == [401] * 3
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "basic_auth_users.alice" in errors[0].getMessage(), errors
    assert "try" not in caplog.text and HASH.decode() not in caplog.text


@pytest.mark.parametrize("cached", [1, 150])
def test_cache_is_bounded_and_keeps_no_password(monkeypatch, cached):
    counted = Counted(monkeypatch)
    web = WebConfig(path="web.yml", users={"alice": HASH})
    for i in range(cached):
        assert not web.authorized(_auth("alice", f"secret-guess-{i}"))
    assert counted.calls == cached
    cache = web.verdicts._cache
    assert len(cache) == min(cached, 100)
    assert not any(b"secret-guess" in k for k in cache), "a password kept as a key"
