"""Two in-memory devices with a fake clock."""
import pytest

from vpncrypt.protocol import TimerConfig
from vpncrypt.protocol.messages import MSG_COOKIE_REPLY, MSG_INITIATION, MSG_RESPONSE, MSG_TRANSPORT

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, ipv4, ipv6, make_pair


def a2b(i=0, n=20):
    return ipv4(A_IP, B_IP, bytes([i % 256]) * n)


def b2a(i=0, n=20):
    return ipv4(B_IP, A_IP, bytes([i % 256]) * n)


def established(crypto, clock, **kw):
    a, b, net = make_pair(crypto, clock, **kw)
    net.send(A_ADDR, [a2b(0)])
    assert net.delivered[B_ADDR] == [a2b(0)]
    return a, b, net


@pytest.mark.parametrize("psk", [None, bytes(range(32))])
def test_handshake_and_data_both_ways(crypto, clock, psk):
    a, b, net = make_pair(crypto, clock, psk=psk)
    net.send(A_ADDR, [a2b(1), a2b(2, 100), ipv6("fd00::1", "fd00::2")])
    assert net.types() == [MSG_INITIATION, MSG_RESPONSE] + [MSG_TRANSPORT] * 3
    assert net.delivered[B_ADDR] == [a2b(1), a2b(2, 100), ipv6("fd00::1", "fd00::2")]
    pa = a.peers[b.public_key]
    pb = b.peers[a.public_key]
    assert pb.endpoint == A_ADDR  # learnt from the handshake
    assert pa.current is not None and pb.current is not None and pb.next is None
    assert pa.current.send_key == pb.current.recv_key and pa.current.recv_key == pb.current.send_key
    assert pa.current.local_index == pb.current.remote_index
    net.send(B_ADDR, [b2a(3), b2a(4, 1400)])
    assert net.delivered[A_ADDR] == [b2a(3), b2a(4, 1400)]
    assert pa.counters.handshakes_completed == 1 and pb.counters.handshakes_completed == 1
    assert pa.last_handshake == clock.wall()
    assert pb.counters.rx_packets >= 3 and pa.counters.rx_packets >= 3
    assert a.counters.drops["bad_tag"] == 0 and b.counters.drops["replay"] == 0


def test_handshake_responder_role_initiates(crypto, clock):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    net.send(B_ADDR, [b2a(1)])
    assert net.delivered[A_ADDR] == [b2a(1)]
    assert b.peers[a.public_key].current.is_initiator
    assert not a.peers[b.public_key].current.is_initiator
    net.send(A_ADDR, [a2b(2)])
    assert net.delivered[B_ADDR] == [a2b(2)]


def test_psk_mismatch_fails(crypto, clock):
    a, b, net = make_pair(crypto, clock, psk=bytes(32 * [7]))
    b.update_peer(a.public_key, preshared_key=bytes(32 * [8]))
    net.send(A_ADDR, [a2b(1)])
    assert net.delivered[B_ADDR] == []
    assert a.counters.drops["bad_tag"] == 1


def test_responder_waits_for_key_confirmation(crypto, clock):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    # A's initiation reaches B, but B's response is lost
    net.drop = lambda s, d, data: data[0] == MSG_RESPONSE
    net.send(A_ADDR, [a2b(1)])
    pb = b.peers[a.public_key]
    assert pb.next is not None and pb.current is None
    n_before = len(net.log)
    net.send(B_ADDR, [b2a(1)])  # B may not send on the unconfirmed keypair: queued
    assert all(d[0] != MSG_TRANSPORT for _, _, d in net.log[n_before:])
    assert list(pb.queue) == [b2a(1)]
    net.drop = None
    net.advance(clock.now + 6)  # A retransmits; handshake completes; both queues flush
    assert net.delivered[B_ADDR] == [a2b(1)]
    assert net.delivered[A_ADDR] == [b2a(1)]


def test_retransmission_when_initiation_lost(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    lost = []
    net.drop = lambda s, d, data: data[0] == MSG_INITIATION and len(lost) < 2 and not lost.append(1)
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    assert net.delivered[B_ADDR] == []
    assert list(a.peers[b.public_key].queue) == [a2b(1)]
    net.advance(t0 + 5.0)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 1  # not before REKEY_TIMEOUT
    net.advance(t0 + 5.34)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2
    net.advance(t0 + 11)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 3
    assert net.delivered[B_ADDR] == [a2b(1)]  # the queued packet went after the handshake


def test_retransmission_gives_up_after_rekey_attempt_time(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.drop = lambda s, d, data: True
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    net.advance(t0 + 120)
    n = net.types(A_ADDR).count(MSG_INITIATION)
    assert n == 19  # first + 18 retries (90 s / 5 s)
    pa = a.peers[b.public_key]
    assert not pa.queue and pa.pending is None
    assert a.counters.drops["expired"] == 1


def test_queue_is_bounded(crypto, clock):
    cfg = TimerConfig(max_queued_packets=10)
    a, b, net = make_pair(crypto, clock, timer_config=cfg)
    net.drop = lambda s, d, data: True
    net.send(A_ADDR, [a2b(i) for i in range(25)])
    assert len(a.peers[b.public_key].queue) == 10
    assert a.counters.drops["queue_full"] == 15


def test_rekey_after_time_without_loss(crypto, clock):
    a, b, net = established(crypto, clock)
    pa = a.peers[b.public_key]
    first = pa.current
    t0 = clock.now
    sent = [a2b(0)]
    back = []
    i = 1
    while clock.now < t0 + 200:
        net.advance(clock.now + 0.5)
        p = a2b(i)
        sent.append(p)
        net.send(A_ADDR, [p])
        q = b2a(i)
        back.append(q)
        net.send(B_ADDR, [q])
        i += 1
    assert net.delivered[B_ADDR] == sent
    assert net.delivered[A_ADDR] == back
    assert pa.current is not first and pa.previous is first
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2  # initial + one rekey at 120 s
    assert pa.counters.handshakes_completed == 2
    assert a.counters.drops["bad_tag"] == 0 and b.counters.drops["expired"] == 0
    # idle: after 3 * REJECT_AFTER_TIME every key is wiped
    current = pa.current
    net.advance(clock.now + 541)
    assert pa.current is None and pa.previous is None
    assert not first.alive and not current.alive
    assert first.send_key == bytearray(32) and current.recv_key == bytearray(32)
    assert not any(isinstance(k, type(first)) for k in a.index.values())


def test_rekey_with_packets_in_flight_across_key_change(crypto, clock):
    """Packets sealed with the old keypair that arrive after the switch are accepted."""
    a, b, net = established(crypto, clock)
    net.advance(clock.now + 121)
    in_flight = b.send_packets([b2a(1), b2a(2)], clock.now)  # B, old keypair, not yet delivered
    net.send(A_ADDR, [a2b(1)])  # triggers the rekey
    assert a.peers[b.public_key].current.created == clock.now
    out = a.receive_datagrams([(d, B_ADDR) for d, _ in in_flight.datagrams], clock.now)
    assert out.packets == [b2a(1), b2a(2)]


def test_reject_after_time(crypto, clock):
    a, b, net = established(crypto, clock)
    net.drop = lambda s, d, data: data[0] != MSG_TRANSPORT  # no more handshakes get through
    t0 = clock.now
    net.advance(t0 + 100)
    old = a.send_packets([a2b(9)], clock.now)  # captured, delivered late
    net.advance(t0 + 181)
    out = b.receive_datagrams([(d, A_ADDR) for d, _ in old.datagrams], clock.now)
    assert out.packets == []
    assert b.counters.drops["expired"] == 1
    n = len(net.log)
    net.send(A_ADDR, [a2b(10)])
    assert MSG_TRANSPORT not in [d[0] for _, _, d in net.log[n:]]  # no data on the dead keypair
    assert list(a.peers[b.public_key].queue) == [a2b(10)]


def test_keepalive_after_one_way_traffic(crypto, clock):
    a, b, net = established(crypto, clock)
    t0 = clock.now
    n = len(net.log)
    net.advance(t0 + 9.9)
    assert [x for x in net.log[n:] if x[0] == B_ADDR] == []
    net.advance(t0 + 10.1)
    from_b = [d for s, _, d in net.log[n:] if s == B_ADDR]
    assert len(from_b) == 1 and from_b[0][0] == MSG_TRANSPORT and len(from_b[0]) == 32
    assert net.delivered[A_ADDR] == []  # keepalives are not delivered
    # and A does not start a new handshake because it heard back
    net.advance(t0 + 30)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 1


def test_new_handshake_when_no_reply(crypto, clock):
    a, b, net = established(crypto, clock)
    net.drop = lambda s, d, data: s == B_ADDR  # B's answers are lost
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    net.advance(t0 + 14.9)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 1
    net.advance(t0 + 15.4)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2


def test_persistent_keepalive(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    a.update_peer(b.public_key, persistent_keepalive=25)
    t0 = clock.now
    net.advance(t0)  # the first one establishes the session
    assert net.types(A_ADDR)[:1] == [MSG_INITIATION]
    assert b.peers[a.public_key].current is not None
    n = len(net.log)
    net.advance(t0 + 24)
    assert [x for x in net.log[n:] if x[0] == A_ADDR] == []
    net.advance(t0 + 26)
    assert [d[0] for s, _, d in net.log[n:] if s == A_ADDR] == [MSG_TRANSPORT]


def test_roaming(crypto, clock):
    a, b, net = established(crypto, clock)
    new_addr = ("203.0.113.9", 4000)
    net.devs[new_addr] = net.devs.pop(A_ADDR)
    net.send(new_addr, [a2b(1)])
    assert b.peers[a.public_key].endpoint == new_addr
    net.send(B_ADDR, [b2a(1)])
    assert net.delivered[new_addr] == [b2a(1)]


def test_cookie_reply_does_not_roam(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    b.load.force = True
    net.drop = lambda s, d, data: data[0] == MSG_COOKIE_REPLY
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    reply = b.receive_datagram(init, A_ADDR, clock.now).datagrams[0][0]
    assert reply[0] == MSG_COOKIE_REPLY
    a.receive_datagram(reply, ("6.6.6.6", 1), clock.now)
    assert a.peers[b.public_key].endpoint == B_ADDR
    assert a.peers[b.public_key].cookie.cookie is not None


def test_replay_of_any_captured_packet_rejected(crypto, clock):
    a, b, net = established(crypto, clock)
    net.send(A_ADDR, [a2b(i) for i in range(5)])
    net.send(B_ADDR, [b2a(1)])
    captured = list(net.log)
    before = {addr: len(net.delivered[addr]) for addr in (A_ADDR, B_ADDR)}
    for s, d, data in captured:
        out = net.devs[d].receive_datagram(data, s, clock.now)
        assert out.packets == []
        assert all(x[0] != MSG_TRANSPORT for x, _ in out.datagrams)
    assert {addr: len(net.delivered[addr]) for addr in (A_ADDR, B_ADDR)} == before
    assert b.counters.drops["replay"] >= 6  # the data packets and the initiation (timestamp)


def test_reordering_within_window(crypto, clock):
    a, b, net = established(crypto, clock)
    pkts = [a2b(i) for i in range(200)]
    out = a.send_packets(pkts, clock.now)
    dgs = [(d, A_ADDR) for d, _ in out.datagrams]
    order = list(reversed(dgs[100:])) + dgs[:100][::3] + dgs[:100][1::3] + dgs[:100][2::3]
    got = b.receive_datagrams(order, clock.now).packets
    assert sorted(got) == sorted(pkts) and len(got) == 200
    # duplicates in one batch: only the first is accepted
    out = a.send_packets([a2b(1)], clock.now)
    d = out.datagrams[0][0]
    assert b.receive_datagrams([(d, A_ADDR), (d, A_ADDR)], clock.now).packets == [a2b(1)]
    assert b.counters.drops["replay"] == 1


def test_too_old_rejected(crypto, clock):
    a, b, net = established(crypto, clock)
    out = a.send_packets([a2b(i) for i in range(8200)], clock.now)
    dgs = [(d, A_ADDR) for d, _ in out.datagrams]
    assert len(b.receive_datagrams(dgs[-1:], clock.now).packets) == 1
    assert len(b.receive_datagrams(dgs[:40], clock.now).packets) == 0  # more than 8128 behind
    assert len(b.receive_datagrams(dgs[100:110], clock.now).packets) == 10


def test_source_not_allowed_and_no_route(crypto, clock):
    a, b, net = established(crypto, clock)
    a.update_peer(b.public_key, allowed_ips=["10.9.0.0/16"])
    net.send(A_ADDR, [ipv4("10.0.0.77", "10.9.1.1")])  # A's source not in B's allowed ips for A
    assert b.counters.drops["source_not_allowed"] == 1
    assert net.delivered[B_ADDR] == [a2b(0)]
    net.send(A_ADDR, [ipv4(A_IP, "8.8.8.8"), b"", b"\x00" * 10])
    assert a.counters.drops["no_route"] == 1 and a.counters.drops["malformed"] == 2


def test_padding_is_trimmed_and_lengths(crypto, clock):
    a, b, net = established(crypto, clock)
    for n in range(0, 40):
        out = a.send_packets([a2b(n, n)], clock.now)
        (d, dst), = out.datagrams
        assert dst == B_ADDR
        assert len(d) == 16 + ((20 + n + 15) // 16) * 16 + 16
        assert b.receive_datagram(d, A_ADDR, clock.now).packets == [a2b(n, n)]


def test_cookie_flow_under_load(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    b.load.force = True
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    assert net.types() == [MSG_INITIATION, MSG_COOKIE_REPLY]
    assert net.delivered[B_ADDR] == []
    assert b.counters.drops["cookie_sent"] == 1
    net.advance(t0 + 6)  # the retransmission carries mac2
    assert net.types()[2:4] == [MSG_INITIATION, MSG_RESPONSE]
    assert net.delivered[B_ADDR] == [a2b(1)]


def test_under_load_threshold_and_attackers(crypto, clock):
    a, b, net = make_pair(crypto, clock, under_load_threshold=10)
    # a flood of initiations with valid mac1 but unknown static keys, from many sources
    from vpncrypt.protocol import Device
    from tests.protocol.helpers import make_rng
    from vpncrypt.protocol import keys
    evil = Device(keys.clamp(make_rng(99)(32)), rng=make_rng(98), wallclock=clock.wall, crypto=crypto)
    evil.add_peer(b.public_key, allowed_ips=["10.0.0.2/32"], endpoint=B_ADDR)
    flood = []
    for i in range(30):
        evil.peers[b.public_key].last_sent_handshake = float("-inf")
        d = evil.send_packets([ipv4("10.0.0.66", B_IP)], clock.now).datagrams[0][0]
        flood.append((d, ("192.0.2.%d" % (i + 10), 1000)))
    out = b.receive_datagrams(flood, clock.now)
    assert b.load.under_load(clock.now)
    assert len(out.datagrams) == 30 and all(d[0] == MSG_COOKIE_REPLY for d, _ in out.datagrams)
    assert b.counters.drops["cookie_sent"] == 30
    # the legitimate peer still connects: cookie, then retransmission with mac2
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    clock.now = t0 + 0.5
    b.receive_datagrams(flood, clock.now)  # still under attack
    net.advance(t0 + 5.5)
    assert net.delivered[B_ADDR] == [a2b(1)]
    # load ends a second after the flood stops
    assert not b.load.under_load(clock.now + 1.1)


def test_rate_limit_under_load(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    b.load.force = True
    net.send(A_ADDR, [a2b(1)])  # gets A a cookie
    pa = a.peers[b.public_key]
    inits = []
    for i in range(8):
        pa.last_sent_handshake = float("-inf")
        clock.now += 0.001
        o = a.send_packets([a2b(1)], clock.now)
        inits += [d for d, _ in o.datagrams if d[0] == MSG_INITIATION]
    for d in inits:
        b.receive_datagram(d, A_ADDR, clock.now)
    # burst of 5 per source; the initiation flood guard (50/s) also applies per peer
    assert b.counters.drops["rate_limited"] >= 3
    assert b.counters.drops["cookie_sent"] == 1


def test_remove_peer_and_set_private_key(crypto, clock):
    a, b, net = established(crypto, clock)
    kp = a.peers[b.public_key].current
    a.remove_peer(b.public_key)
    assert not kp.alive and kp.local_index not in a.index
    assert a.send_packets([a2b(1)], clock.now).datagrams == []
    assert a.counters.drops["no_route"] == 1
    # new private key on B: A (re-added) must handshake against the new public key
    from vpncrypt.protocol import keys
    from tests.protocol.helpers import make_rng
    new_priv = keys.clamp(make_rng(77)(32))
    b.set_private_key(new_priv)
    assert b.public_key == keys.public_from_private(new_priv)
    assert b.peers[a.public_key].current is None
    a.add_peer(b.public_key, allowed_ips=[B_IP + "/32"], endpoint=B_ADDR)
    clock.now += 1
    net.send(A_ADDR, [a2b(2)])
    assert net.delivered[B_ADDR] == [a2b(0), a2b(2)]


def test_reprs_hide_keys(crypto, clock):
    a, b, net = established(crypto, clock)
    pa = a.peers[b.public_key]
    texts = [repr(a), repr(pa), repr(pa.current), repr(pa.cookie), repr(a.checker), repr(a.counters)]
    secrets = [bytes(pa.current.send_key), bytes(pa.current.recv_key), a.private_key]
    for t in texts:
        for s in secrets:
            assert s.hex() not in t and repr(s) not in t
            import base64
            assert base64.b64encode(s).decode() not in t


def test_next_deadline_and_idle(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    assert a.next_deadline() is None
    net.send(A_ADDR, [a2b(1)])
    d = a.next_deadline()
    assert d is not None and d > clock.now
    out = a.handle_timers(clock.now)
    assert out.datagrams == [] and out.packets == []


def test_rekey_after_messages_and_reject_after_messages(crypto, clock):
    cfg = TimerConfig(rekey_after_messages=50, reject_after_messages=80)
    a, b, net = make_pair(crypto, clock, timer_config=cfg)
    net.drop = lambda s, d, data: data[0] in (MSG_INITIATION, MSG_RESPONSE) and len(net.log) > 3
    net.send(A_ADDR, [a2b(0)])
    pa = a.peers[b.public_key]
    clock.now += 6
    net.send(A_ADDR, [a2b(i) for i in range(60)])  # crosses 50: a rekey is attempted (and lost)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2
    clock.now += 6
    net.send(A_ADDR, [a2b(i) for i in range(30)])  # only 19 more fit under 80
    assert pa.current.send_counter == 80
    assert len(pa.queue) == 11
    assert len(net.delivered[B_ADDR]) == 80
    net.drop = None
    clock.now += 6
    net.send(A_ADDR, [a2b(99)])  # handshake goes through now; the queue drains in order
    assert net.delivered[B_ADDR][80:] == [a2b(i) for i in range(19, 30)] + [a2b(99)]


def test_rekey_on_receive_before_reject(crypto, clock):
    a, b, net = established(crypto, clock)
    t0 = clock.now
    net.advance(t0 + 166)
    n = net.types(A_ADDR).count(MSG_INITIATION)
    net.send(B_ADDR, [b2a(1)])  # A is the initiator and its keypair is older than 165 s
    assert net.types(A_ADDR).count(MSG_INITIATION) == n + 1
    assert net.delivered[A_ADDR] == [b2a(1)]


class CountingCrypto:
    def __init__(self, inner):
        self.inner = inner
        self.calls = {"open_batch": 0, "seal_batch": 0}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def open_batch(self, *a):
        self.calls["open_batch"] += 1
        return self.inner.open_batch(*a)

    def seal_batch(self, *a):
        self.calls["seal_batch"] += 1
        return self.inner.seal_batch(*a)


def test_one_batch_call_per_keypair_and_peer(crypto, clock):
    cc = CountingCrypto(crypto)
    a, b, net = established(cc, clock)
    cc.calls.update(open_batch=0, seal_batch=0)
    out = a.send_packets([a2b(i) for i in range(100)] + [ipv6("fd00::1", "fd00::2")] * 10, clock.now)
    assert cc.calls["seal_batch"] == 1 and len(out.datagrams) == 110
    got = b.receive_datagrams([(d, A_ADDR) for d, _ in out.datagrams], clock.now)
    assert cc.calls["open_batch"] == 1 and len(got.packets) == 110


def test_crossing_initiations_converge(crypto, clock):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    oa = a.send_packets([a2b(1)], clock.now)
    ob = b.send_packets([b2a(1)], clock.now)
    net.run(A_ADDR, oa)
    net.run(B_ADDR, ob)
    net.advance(clock.now + 12)
    assert net.delivered[B_ADDR] == [a2b(1)] and net.delivered[A_ADDR] == [b2a(1)]
    net.send(A_ADDR, [a2b(2)])
    net.send(B_ADDR, [b2a(2)])
    assert net.delivered[B_ADDR][-1] == a2b(2) and net.delivered[A_ADDR][-1] == b2a(2)
