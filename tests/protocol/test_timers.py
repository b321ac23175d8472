"""WireGuard's timers, as the whitepaper (section 6), wireguard-go and the
Linux module run them; every number here is theirs."""

from vpncrypt.protocol.events import HandshakeGaveUp, KeysZeroed
from vpncrypt.protocol.messages import MSG_INITIATION, MSG_RESPONSE, MSG_TRANSPORT
from vpncrypt.protocol.timers import KEEPALIVE, RETRANSMIT, PeerTimers, TimerQueue

from tests.protocol.helpers import A_ADDR, B_ADDR, a2b, b2a, make_pair, session


def test_twenty_initiations_then_give_up(crypto, clock):
    """The first initiation, 18 retries, and one more: the retransmit timer
    gives up only when it finds more than 90 s / 5 s = 18 retries done."""
    a, b, net = make_pair(crypto, clock)
    net.drop = lambda s, d, data: True
    t0 = clock.now
    events = []
    orig = net.run

    def run(src, out):
        events.extend(out.events)
        orig(src, out)

    net.run = run
    net.send(A_ADDR, [a2b(1)])
    net.advance(t0 + 125)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 20
    gave_up = [e for e in events if isinstance(e, HandshakeGaveUp)]
    assert len(gave_up) == 1 and gave_up[0].initiations == 20
    pa = a.peers[b.public_key]
    assert not pa.staged  # what waited is dropped
    assert a.drops()["staged_flushed"] == 1  # not "stale_keypair": that is a datagram on a stale key
    assert pa.pending is not None  # the handshake state stays until zeroing
    assert a.table.index_count() == 1
    assert not pa.timers.pending(KEEPALIVE)
    # zeroing, 3 x 180 s after giving up, removes it
    net.advance(clock.now + 541)
    assert pa.pending is None and a.table.index_count() == 0
    assert any(isinstance(e, KeysZeroed) for e in events)


def test_give_up_disarms_the_keepalive_timer(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(0)])
    pb = b.peers[a.public_key]
    pb.staged.append(b2a(1))
    now = b.table.clock(clock.now)
    b.timers.arm(pb, KEEPALIVE, now + 5)  # B owes A a keepalive...
    b.timers.arm(pb, RETRANSMIT, now)  # ...when its 19th retry's timer comes up
    pb.timers.attempts = 19
    out = b.handle_timers(clock.now)
    assert [type(e) for e in out.events] == [HandshakeGaveUp]
    assert not pb.timers.pending(KEEPALIVE) and not pb.staged
    assert out.datagrams == []


def test_response_counts_as_a_handshake_sent(crypto, clock):
    """A responder that just sent a response does not also initiate within
    REKEY_TIMEOUT when it has data and no confirmed session."""
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    net.drop = lambda s, d, data: data[0] == MSG_RESPONSE  # B's response is lost
    net.send(A_ADDR, [a2b(1)])
    n = len(net.log)
    clock.now += 4.9
    net.send(B_ADDR, [b2a(1)])
    assert [d[0] for s, _, d in net.log[n:] if s == B_ADDR] == []
    clock.now += 0.2  # 5.1 s after the response
    net.send(B_ADDR, [b2a(2)])
    assert [d[0] for s, _, d in net.log[n:] if s == B_ADDR] == [MSG_INITIATION]


def test_rekey_on_receive_once_in_the_last_minute(crypto, clock):
    """From 165 s on, received data makes the initiator start one handshake,
    not one every 5 s (WireGuard's sent-last-minute-handshake flag)."""
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(0)])
    t0 = clock.now
    net.drop = lambda s, d, data: data[0] in (MSG_INITIATION, MSG_RESPONSE)
    net.advance(t0 + 165.5)
    before = net.types(A_ADDR).count(MSG_INITIATION)
    for k in range(12):  # 165.5 .. 179.3 s: data from B every 1.2 s
        net.send(B_ADDR, [b2a(k)])
        clock.now += 1.2  # (no timers run: retries are not counted)
    rekeys = net.types(A_ADDR).count(MSG_INITIATION) - before
    # one rekey-on-receive initiation; without the flag, one every REKEY_TIMEOUT
    assert rekeys == 1
    # a completed handshake clears the flag
    net.drop = None
    clock.now += 6
    net.send(A_ADDR, [a2b(1)])
    assert session(a, b, clock).age < 1
    assert not a.peers[b.public_key].timers.last_minute_sent


def test_zeroing_flushes_staged_packets(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(0)])
    pa = a.peers[b.public_key]
    net.drop = lambda s, d, data: True
    t0 = clock.now
    net.advance(t0 + 539)
    pa.staged.append(a2b(5))
    net.advance(t0 + 541)
    assert session(a, b, clock) is None
    assert not pa.staged


def test_deadline_set_by_data_is_armed_at_once(crypto, clock):
    """A keepalive owed 10 s after received data: next_deadline says so
    right after the data, whatever came shortly before."""
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(0)])
    clock.now += 0.002
    net.send(A_ADDR, [a2b(1)])
    pb = b.peers[a.public_key]
    due = pb.timers.due[KEEPALIVE]
    assert due is not None
    assert abs(b.next_deadline() - min(d for d in pb.timers.due if d is not None)) < 1e-9
    assert b.next_deadline() <= clock.now + 10.0 + 1e-9


def test_keepalive_answers_data_within_ten_seconds(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(0)])
    t0 = clock.now
    n = len(net.log)
    # drive B only by its own next_deadline, as the engine does
    while True:
        d = b.next_deadline()
        if d is None or d > t0 + 11:
            break
        clock.now = max(clock.now, d)
        net.run(B_ADDR, b.handle_timers(clock.now))
    sent = [(d[0], len(d)) for s, _, d in net.log[n:] if s == B_ADDR]
    assert sent == [(MSG_TRANSPORT, 32)]
    assert clock.now - t0 == 10.0


def test_timer_queue_order_and_moves():
    q = TimerQueue(lambda peer, timer: 1.0)

    class P:
        def __init__(self):
            self.timers = PeerTimers()

    p1, p2 = P(), P()
    q.arm(p1, RETRANSMIT, 5.0)
    q.arm(p2, KEEPALIVE, 3.0)
    assert q.next_deadline() == 3.0
    q.arm(p2, KEEPALIVE, 7.0)  # moved later: found at its new time
    assert q.next_deadline() == 5.0
    q.disarm(p1, RETRANSMIT)
    assert q.next_deadline() == 7.0
    q.arm(p1, RETRANSMIT, 2.0)  # moved earlier
    assert q.next_deadline() == 2.0
    assert q.pop_due(1.9) is None
    assert q.pop_due(2.0) == (p1, RETRANSMIT)
    assert q.pop_due(10.0) == (p2, KEEPALIVE)
    assert q.pop_due(10.0) is None and q.next_deadline() is None
    p1.timers.gone = True
    q.arm(p1, RETRANSMIT, 1.0)
    assert q.next_deadline() is None
