"""Handshake messages served in two phases (Device.take_handshake_work, each
item's compute() anywhere, then Device.finish_handshake_work): the same
answers as serving them at once, whatever order the computes ran in; work
computed for a configuration that changed meanwhile is never answered; and
a peer's newest initiation is the one answered."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from vpncrypt.protocol import Output
from vpncrypt.protocol.messages import MSG_INITIATION, MSG_RESPONSE

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, ipv4, make_device, make_pair
from tests.protocol.helpers import no_internal_errors, session


def drops(dev, reason):
    return dev.drops().get(reason, 0)


def initiation(dev, peer_dev, now):
    """A fresh initiation from dev to peer_dev (its REKEY_TIMEOUT skipped)."""
    p = dev.peers[peer_dev.public_key]
    p.last_sent_handshake = float("-inf")
    out = Output()
    dev.handshakes.initiate(p, now, out)
    ((data, _),) = out.datagrams
    assert data[0] == MSG_INITIATION
    return data


def responses(out):
    return [d for d, _ in out.datagrams if d[0] == MSG_RESPONSE]


def two_phase(dev, now, limit=16, order=reversed):
    work = dev.take_handshake_work(now, limit)
    for w in order(list(work)):
        w.compute()
    return dev.finish_handshake_work(work, now)


def test_two_phases_complete_the_handshake(crypto, clock):
    """Computed in reverse order, applied in the order taken: the response
    completes A's handshake and data flows both ways."""
    a, b, net = make_pair(crypto, clock)
    data = initiation(a, b, clock.now)
    b.table.open([(data, A_ADDR)], b.table.clock(clock.now))
    out, left = two_phase(b, clock.now)
    assert left == 0
    (resp,) = responses(out)
    assert resp[8:12] == data[4:8]  # the response names the initiation's sender index
    back = a.receive_datagram(resp, B_ADDR, clock.now)
    assert session(a, b, clock) is not None
    net.run(A_ADDR, back)  # A's keepalive confirms the keys to B
    net.send(B_ADDR, [ipv4(B_IP, A_IP, b"reply")])
    assert net.delivered[A_ADDR] == [ipv4(B_IP, A_IP, b"reply")]
    assert no_internal_errors(a, b)


def test_newest_initiation_answered_whatever_the_compute_order(crypto, clock):
    """Three initiations of one peer in one slice, computed in any order:
    only the newest is answered, the two it replaced are refused by their
    timestamps and get no response."""
    a, b, net = make_pair(crypto, clock)
    msgs = []
    for _ in range(3):
        msgs.append(initiation(a, b, clock.now))
        clock.now += 0.05  # past the 16.8 ms timestamp whitening
    b.table.open([(m, A_ADDR) for m in msgs], b.table.clock(clock.now))
    out, left = two_phase(b, clock.now, order=reversed)
    (resp,) = responses(out)
    assert resp[8:12] == msgs[2][4:8]
    assert drops(b, "replay") == 2
    assert no_internal_errors(a, b)


def test_a_replay_gets_no_response_work(crypto, clock):
    """An initiation whose timestamp the peer already used is refused by the
    compute phase before it draws an ephemeral key or does the response's
    X25519 operations."""
    a, b, net = make_pair(crypto, clock)
    data = initiation(a, b, clock.now)
    b.table.open([(data, A_ADDR)], b.table.clock(clock.now))
    two_phase(b, clock.now)
    clock.now += 1.0
    b.table.open([(data, ("203.0.113.9", 4000))], b.table.clock(clock.now))
    work = b.take_handshake_work(clock.now, 16)
    (w,) = work
    w.compute()
    assert w.outcome == "replay" and w.response is None
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and drops(b, "replay") == 1
    assert b.peers[a.public_key].endpoint == A_ADDR  # a replay does not move the endpoint


def _queued_and_computed(a, b, clock):
    data = initiation(a, b, clock.now)
    b.table.open([(data, A_ADDR)], b.table.clock(clock.now))
    work = b.take_handshake_work(clock.now, 16)
    for w in work:
        w.compute()
    assert [w.outcome for w in work] == ["ok"]
    return work


def test_work_for_a_removed_peer_is_not_answered(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    work = _queued_and_computed(a, b, clock)
    b.remove_peer(a.public_key)
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and drops(b, "unknown_peer") == 1
    assert no_internal_errors(b)


def test_work_for_a_peer_removed_and_added_again_is_not_answered(crypto, clock):
    """Removed and added again with a new PSK while the work computed: the
    work used the old PSK, so its keys would not match the initiator's; the
    new Peer is not the one the work saw."""
    a, b, net = make_pair(crypto, clock)
    work = _queued_and_computed(a, b, clock)
    b.remove_peer(a.public_key)
    b.add_peer(a.public_key, preshared_key=bytes(range(32)), allowed_ips=[A_IP + "/32"])
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and drops(b, "unknown_peer") == 1
    assert session(b, a, clock) is None


def test_work_for_a_changed_psk_is_not_answered(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    work = _queued_and_computed(a, b, clock)
    b.update_peer(a.public_key, preshared_key=bytes(range(32)))
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and drops(b, "unknown_peer") == 1
    assert b.peers[a.public_key].last_timestamp == b""  # the message was not consumed


def test_work_for_our_old_private_key_is_not_answered(crypto, clock):
    """Our key replaced and set back to the same value while the work
    computed: every handshake begun before is stale (set_private_key ends
    them all)."""
    a, b, net = make_pair(crypto, clock)
    work = _queued_and_computed(a, b, clock)
    key = b.private_key
    b.set_private_key(bytes(32))
    b.set_private_key(key)
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and drops(b, "unknown_peer") == 1


def test_work_not_computed_is_an_internal_error_not_a_response(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    data = initiation(a, b, clock.now)
    b.table.open([(data, A_ADDR)], b.table.clock(clock.now))
    work = b.take_handshake_work(clock.now, 16)
    out, _ = b.finish_handshake_work(work, clock.now)
    assert responses(out) == [] and b.counters.drops["internal_error"] == 1


@pytest.mark.parametrize("psk", [None, bytes(range(32))])
def test_storm_computed_on_real_threads(crypto, clock, psk):
    """40 peers, each with two initiations queued (the older sent first),
    computed on a pool of two threads: every peer's newest initiation is
    answered, and that response completes its handshake; the 40 older ones
    get no response."""
    b = make_device(crypto, clock, 2)
    peers, sent = [], []
    for i in range(40):
        a = make_device(crypto, clock, 100 + i)
        a.add_peer(b.public_key, preshared_key=psk, endpoint=B_ADDR)
        b.add_peer(a.public_key, preshared_key=psk)
        peers.append(a)
    for round_ in range(2):
        for i, a in enumerate(peers):
            sent.append((initiation(a, b, clock.now), ("192.0.2.%d" % (i + 1), 5000 + round_)))
        clock.now += 0.05
    b.table.open(sent, b.table.clock(clock.now))
    answered = []
    with ThreadPoolExecutor(2) as pool:
        while True:
            work = b.take_handshake_work(clock.now, 16)
            if not work:
                break
            list(pool.map(lambda w: w.compute(), work))
            out, _ = b.finish_handshake_work(work, clock.now)
            answered.extend(out.datagrams)
    assert len(answered) == 40 and drops(b, "replay") == 40
    newest = {m[4:8]: addr for m, addr in sent[40:]}
    for resp, addr in answered:
        assert newest[resp[8:12]] == addr
    by_sender = {m[4:8]: a for (m, _), a in zip(sent[40:], peers)}
    for resp, addr in answered:
        a = by_sender[resp[8:12]]
        a.receive_datagram(resp, B_ADDR, clock.now)
        assert session(a, b, clock) is not None
    assert no_internal_errors(b, *peers)


def test_an_initiation_whose_timestamp_fails_authentication(crypto, clock):
    """An initiation from a known static key whose encrypted timestamp was
    tampered with (mac1 made again, so it passes the cheap checks) is dropped
    as bad_tag and answered by nothing, in two phases and at once; the device
    goes on (the apply phase compared the missing timestamp before)."""
    from vpncrypt.protocol.cookie import CookieState

    a, b, net = make_pair(crypto, clock)
    for serve in ("two_phase", "at_once"):
        data = bytearray(initiation(a, b, clock.now))
        data[100] ^= 1  # inside the encrypted timestamp (bytes 88..116 of 148)
        forged = CookieState(b.public_key).add_macs(bytes(data[:116]), clock.now)
        assert len(forged) == 148
        before = drops(b, "bad_tag")
        if serve == "two_phase":
            b.table.open([(forged, A_ADDR)], b.table.clock(clock.now))
            out, left = two_phase(b, clock.now)
        else:
            out = b.receive_datagrams([(forged, A_ADDR)], clock.now)
        assert responses(out) == []
        assert drops(b, "bad_tag") == before + 1
        no_internal_errors(b)
    clock.now += 1.0  # past the initiation rate limit (50 per second from one peer)
    genuine = initiation(a, b, clock.now)
    assert len(responses(b.receive_datagrams([(genuine, A_ADDR)], clock.now))) == 1  # it goes on
