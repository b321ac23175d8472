"""A lookup that never returns (a hung NSS module, a resolver that never
answers under a long resolv.conf timeout), in the Endpoint-name state
machine, on a clock of the test's own: after 30 s it is abandoned, counted
as a lookup that found nothing (the backoff goes on), and its answer, if it
ever comes, is dropped.  The daemon's side: test_endpoint_names_hung_live.py."""

import logging

from vpncrypt.daemon.endpoint_names import PENDING, RESOLVED, EndpointNames
from vpncrypt.endpoints import Endpoint

KEY = bytes(range(32))
EP = Endpoint("peer.vpncrypt.test", 51820, "peer.vpncrypt.test:51820")
WHERE = "/etc/vpncrypt/wg0.conf:7"
PATIENCE = 5.333  # REKEY_TIMEOUT (5 s) plus its jitter (1/3 s)
LIMIT = 30.0  # the bound chosen: glibc's 5 s x 2 attempts x up to 3 servers


def test_a_lookup_that_never_answers_is_abandoned_after_30_s_and_its_answer_dropped():
    names = EndpointNames(PATIENCE)
    names.track(KEY, EP, WHERE, 0.0, 0.0)  # the start's lookup, under way
    assert names.overdue(LIMIT - 0.001) == []
    assert names.overdue(LIMIT) == [KEY]
    out = names.abandon(KEY, LIMIT)
    assert out.address is None and out.level == logging.WARNING
    assert out.message.startswith(WHERE + ": [Peer] Endpoint: peer.vpncrypt.test:51820: ")
    assert "within 30 s" in out.message and "(1 so far for this name)" in out.message
    assert "AAECAwQF" in out.message and "has no endpoint" in out.message
    # a lookup that found nothing: the next one in 1 s, none under way
    assert names.names[KEY].state == PENDING and not names.names[KEY].asking
    assert names.next_deadline() == LIMIT + 1 and names.overdue(1000.0) == []
    # the abandoned lookup answers at last: an answer to an older question
    assert names.answered(KEY, 0.0, 95.0, ("192.0.2.4", 0)) is None
    assert names.names[KEY].address is None and names.names[KEY].state == PENDING
    # the next one hangs too: abandoned quietly, counted; the backoff goes on (2 s)
    names.asking(KEY, 31.0)
    assert names.overdue(60.999) == [] and names.overdue(61.0) == [KEY]
    out = names.abandon(KEY, 61.0)
    assert out.level == logging.DEBUG and "(2 so far for this name)" in out.message
    assert names.next_deadline() == 63.0
    assert names.abandon(KEY, 61.5) is None  # (none under way)
    # a lookup asked after that answers: used
    names.asking(KEY, 63.0)
    assert names.answered(KEY, 31.0, 64.0, ("192.0.2.5", 0)) is None  # the second hung one, late
    out = names.answered(KEY, 63.0, 63.5, ("192.0.2.6", 0))
    assert out.address == ("192.0.2.6", 51820) and names.names[KEY].state == RESOLVED


def test_a_resolved_name_keeps_its_address_when_its_lookup_hangs():
    names = EndpointNames(PATIENCE)
    names.track(KEY, EP, WHERE, 0.0, 0.0, (0, 0), ("192.0.2.1", 0))
    names.watch(KEY, 100.0, 1, 0)  # an initiation, unanswered for 5.333 s: failing
    names.watch(KEY, 106.0, 1, 0)
    assert names.due(106.0) == [KEY]
    names.asking(KEY, 106.0)
    out = names.abandon(KEY, 136.0)
    assert "keeps 192.0.2.1:51820" in out.message and out.address is None
    assert names.names[KEY].state == RESOLVED and names.next_deadline() == 137.0
