"""The Endpoint-name state machine (vpncrypt.daemon.endpoint_names), on a
clock of the test's own: when a name is looked up, what an answer does to
the peer, and what is logged.  The live daemon's side (the lookups in
threads, a lab resolver whose answers change) is in
tests/interop/test_endpoint_names_live.py."""

import errno
import logging
import socket

import pytest

from vpncrypt import endpoints
from vpncrypt.daemon.endpoint_names import FAILED, PENDING, RESOLVED, EndpointNames, says_missing
from vpncrypt.endpoints import Endpoint, resolve_endpoint

KEY = bytes(range(32))
EP = Endpoint("peer.vpncrypt.test", 51820, "peer.vpncrypt.test:51820")
WHERE = "/etc/vpncrypt/wg0.conf:7"
PATIENCE = 5.333  # REKEY_TIMEOUT (5 s) plus its jitter (1/3 s)


def gai_error(code: int, monkeypatch) -> OSError:
    """The OSError resolve_endpoint raises when getaddrinfo fails with `code`."""

    def fail(*_a, **_kw):
        raise socket.gaierror(code, "test")

    monkeypatch.setattr(endpoints.socket, "getaddrinfo", fail)
    with pytest.raises(OSError) as e:
        resolve_endpoint(EP)
    monkeypatch.undo()
    return e.value


def test_what_getaddrinfo_said_is_told_apart(monkeypatch):
    assert says_missing(gai_error(socket.EAI_NONAME, monkeypatch))
    assert not says_missing(gai_error(socket.EAI_AGAIN, monkeypatch))
    assert not says_missing(OSError(errno.EADDRNOTAVAIL, "cannot resolve"))


def test_a_resolver_that_is_not_there_yet_is_asked_again_with_backoff(monkeypatch):
    again = gai_error(socket.EAI_AGAIN, monkeypatch)
    names = EndpointNames(PATIENCE)
    out = names.track(KEY, EP, WHERE, 0.0, 0.0, found=again)
    assert out.address is None and out.level == logging.WARNING
    assert WHERE in out.message and "background" in out.message
    # 1, 2, 4, 8, 16 s between lookups, then every 30 s
    t, gaps = 0.0, []
    for _ in range(8):
        nxt = names.next_deadline()
        assert names.due(nxt - 0.01) == [] and names.due(nxt) == [KEY]
        gaps.append(nxt - t)
        t = nxt
        names.asking(KEY, t)
        assert names.next_deadline() is None  # none while one is under way
        out = names.answered(KEY, t, t, again)
        assert out.level == logging.DEBUG  # one warning only
    assert gaps == [1, 2, 4, 8, 16, 30, 30, 30]
    assert names.names[KEY].state == PENDING
    # the resolver answers: the peer gets the address, with the peer's port
    names.asking(KEY, t)
    out = names.answered(KEY, t, t + 1, ("192.0.2.7", 0))
    assert out.address == ("192.0.2.7", 51820) and out.level == logging.INFO
    assert names.names[KEY].state == RESOLVED and names.next_deadline() is None


def test_a_name_that_does_not_exist_is_one_line_and_the_peer_waits(monkeypatch):
    missing = gai_error(socket.EAI_NONAME, monkeypatch)
    names = EndpointNames(PATIENCE)
    lines = [names.track(KEY, EP, WHERE, 0.0, 0.0, found=missing)]
    t = 0.0
    while names.names[KEY].state != FAILED:
        t = names.next_deadline()
        lines.append(names.answered(KEY, t, t, missing))
    assert t == 15.0  # five answers in a row, at 0, 1, 3, 7 and 15 s
    loud = [o for o in lines if o.level > logging.DEBUG]
    assert len(loud) == 1 and loud[0] is lines[-1] and loud[0].level == logging.ERROR
    line = loud[0].message
    assert line.startswith(WHERE + ": [Peer] Endpoint:") and "no such name" in line
    assert "AAECAwQF" in line  # the public key's first characters (base64 of bytes 0..5)
    # then every 5 minutes, without another line
    for _ in range(3):
        assert names.next_deadline() == t + 300
        t += 300
        assert names.answered(KEY, t, t, missing).level == logging.DEBUG
    # registered at last: the peer gets it
    out = names.answered(KEY, t, t, ("192.0.2.8", 0))
    assert out.address == ("192.0.2.8", 51820) and names.names[KEY].state == RESOLVED


def test_a_moved_name_is_followed_while_the_handshake_fails():
    names = EndpointNames(PATIENCE)
    out = names.track(KEY, EP, WHERE, 0.0, 0.0, (0, 0), ("192.0.2.1", 51820))
    assert out.address == ("192.0.2.1", 51820)
    names.watch(KEY, 1.0, 1, 1)  # a handshake: nothing to look up
    names.watch(KEY, 120.0, 1, 1)
    # a rekey's initiation unanswered, while the session still brings data
    for t, received in ((121.0, 0), (124.0, 1000), (128.0, 2000), (132.0, 3000)):
        names.watch(KEY, t, 2, 1, received)
        assert not names.is_failing(KEY) and names.next_deadline() is None
    names.watch(KEY, 200.0, 2, 2, 3000)
    assert names.next_deadline() is None
    names.watch(KEY, 201.0, 3, 2, 3000)  # an initiation, unanswered ...
    names.watch(KEY, 206.0, 4, 2, 3000)
    assert names.due(206.0) == []  # ... for less than REKEY_TIMEOUT + jitter
    names.watch(KEY, 206.5, 4, 2, 3000)
    assert names.due(206.5) == [KEY] and names.is_failing(KEY)
    names.asking(KEY, 206.5)
    assert names.answered(KEY, 206.5, 206.6, ("192.0.2.1", 0)).address == ("192.0.2.1", 51820)
    assert names.next_deadline() == 207.6  # the same address: asked again in 1 s, 2 s, 4 s ...
    for t in (207.6, 209.6, 213.6):
        assert names.next_deadline() == t
        names.asking(KEY, t)
        assert names.answered(KEY, t, t, ("192.0.2.1", 0)).message is None
    assert names.next_deadline() == 221.6
    names.asking(KEY, 221.6)
    out = names.answered(KEY, 221.6, 221.7, ("192.0.2.2", 0))
    assert out.address == ("192.0.2.2", 51820) and "moved to 192.0.2.2:51820" in out.message
    names.watch(KEY, 222.0, 5, 3, 3000)  # the handshake works again: nothing more
    assert not names.is_failing(KEY) and names.next_deadline() is None


def test_a_peer_that_roamed_in_and_works_keeps_its_endpoint(monkeypatch):
    names = EndpointNames(PATIENCE)
    names.track(KEY, EP, WHERE, 0.0, 0.0, (0, 0), gai_error(socket.EAI_AGAIN, monkeypatch))
    names.watch(KEY, 0.5, 0, 1)  # the peer initiated: a handshake since the name was configured
    t = names.next_deadline()
    out = names.answered(KEY, t, t, ("192.0.2.9", 0))
    assert out.address is None and "kept" in out.message
    assert names.names[KEY].state == RESOLVED
    # once its handshake fails, the name's address is used
    names.watch(KEY, 10.0, 1, 1)
    names.watch(KEY, 16.0, 1, 1)
    t = names.next_deadline()
    assert t == 16.0
    assert names.answered(KEY, t, t, ("192.0.2.9", 0)).address == ("192.0.2.9", 51820)


def test_an_answer_to_an_older_question_is_dropped():
    names = EndpointNames(PATIENCE)
    names.track(KEY, EP, WHERE, 0.0, 0.0)  # under way (the start's lookup)
    assert names.due(100.0) == []
    # a reload configured the name again at 10 s and found it
    names.track(KEY, EP, WHERE, 10.0, 10.5, found=("192.0.2.3", 0))
    assert names.answered(KEY, 0.0, 11.0, ("192.0.2.4", 0)) is None
    assert names.names[KEY].address == ("192.0.2.3", 51820)
    names.forget(KEY)  # an endpoint set over the UAPI: no longer followed
    assert names.answered(KEY, 12.0, 12.0, ("192.0.2.5", 0)) is None and names.rows() == []
