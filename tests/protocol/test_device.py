"""Two in-memory devices with a fake clock, on each backend."""

import pytest

from vpncrypt.protocol import Output, ProtocolConfig
from vpncrypt.protocol.messages import MSG_COOKIE_REPLY, MSG_INITIATION, MSG_RESPONSE, MSG_TRANSPORT

from tests.transport.helpers import PADDING_CASES
from tests.protocol.helpers import (
    A_ADDR,
    A_IP,
    B_ADDR,
    B_IP,
    a2b,
    b2a,
    drops,
    established,
    ipv4,
    ipv6,
    make_device,
    make_pair,
    no_internal_errors,
    session,
    sessions,
)


@pytest.mark.parametrize("psk", [None, bytes(range(32))])
def test_handshake_and_data_both_ways(crypto, clock, psk):
    a, b, net = make_pair(crypto, clock, psk=psk)
    net.send(A_ADDR, [a2b(1), a2b(2, 100), ipv6("fd00::1", "fd00::2")])
    assert net.types() == [MSG_INITIATION, MSG_RESPONSE] + [MSG_TRANSPORT] * 3
    assert net.delivered[B_ADDR] == [a2b(1), a2b(2, 100), ipv6("fd00::1", "fd00::2")]
    pb = b.peers[a.public_key]
    assert pb.endpoint == A_ADDR  # learnt from the handshake
    ca, cb = session(a, b, clock), session(b, a, clock)
    assert ca is not None and cb is not None and sessions(b, a, clock)[2] is None
    assert ca.local_index == cb.remote_index and cb.local_index == ca.remote_index
    assert ca.initiator and not cb.initiator
    net.send(B_ADDR, [b2a(3), b2a(4, 1400)])
    assert net.delivered[A_ADDR] == [b2a(3), b2a(4, 1400)]
    pa = a.peers[b.public_key]
    assert pa.counters.handshakes_completed == 1 and pb.counters.handshakes_completed == 1
    assert pa.last_handshake == clock.wall()
    assert pb.stats(clock.now).rx_packets == 3 and pa.stats(clock.now).rx_packets == 2
    assert a.drops() == {} and b.drops() == {}


def test_handshake_responder_role_initiates(crypto, clock):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    net.send(B_ADDR, [b2a(1)])
    assert net.delivered[A_ADDR] == [b2a(1)]
    assert session(b, a, clock).initiator
    assert not session(a, b, clock).initiator
    net.send(A_ADDR, [a2b(2)])
    assert net.delivered[B_ADDR] == [a2b(2)]


def test_psk_mismatch_fails(crypto, clock):
    a, b, net = make_pair(crypto, clock, psk=bytes(32 * [7]))
    b.update_peer(a.public_key, preshared_key=bytes(32 * [8]))
    net.send(A_ADDR, [a2b(1)])
    assert net.delivered[B_ADDR] == []
    assert drops(a, "bad_tag") == 1


def test_responder_waits_for_key_confirmation(crypto, clock):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    # A's initiation reaches B, but B's response is lost
    net.drop = lambda s, d, data: data[0] == MSG_RESPONSE
    net.send(A_ADDR, [a2b(1)])
    pb = b.peers[a.public_key]
    cur, _prev, nxt = sessions(b, a, clock)
    assert nxt is not None and cur is None
    n_before = len(net.log)
    net.send(B_ADDR, [b2a(1)])  # B may not send on the unconfirmed keypair: staged
    assert all(d[0] != MSG_TRANSPORT for _, _, d in net.log[n_before:])
    assert list(pb.staged) == [b2a(1)]
    # nor does it initiate: it sent a handshake message (the response) just now
    assert all(d[0] != MSG_INITIATION for s, _, d in net.log[n_before:] if s == B_ADDR)
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
    assert list(a.peers[b.public_key].staged) == [a2b(1)]
    net.advance(t0 + 5.0)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 1  # not before REKEY_TIMEOUT
    net.advance(t0 + 5.34)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2
    net.advance(t0 + 11)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 3
    assert net.delivered[B_ADDR] == [a2b(1)]  # the staged packet went after the handshake


def test_staged_packets_are_bounded(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.drop = lambda s, d, data: True
    net.send(A_ADDR, [a2b(i) for i in range(200)])
    pa = a.peers[b.public_key]
    # WireGuard keeps 128 per peer and drops the oldest
    assert list(pa.staged) == [a2b(i) for i in range(72, 200)]
    assert drops(a, "queue_full") == 72


def test_rekey_after_time_without_loss(crypto, clock):
    a, b, net = established(crypto, clock)
    pa = a.peers[b.public_key]
    first = session(a, b, clock).local_index
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
    cur, prev, _ = sessions(a, b, clock)
    assert cur.local_index != first and prev.local_index == first
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2  # initial + one rekey at 120 s
    assert pa.counters.handshakes_completed == 2
    assert a.drops() == {} and b.drops() == {}
    # idle: after 3 * REJECT_AFTER_TIME every key is gone, and every index
    net.advance(clock.now + 541)
    assert sessions(a, b, clock) == (None, None, None)
    assert a.table.index_count() == 0 and b.table.index_count() == 0


def test_rekey_with_packets_in_flight_across_key_change(crypto, clock):
    """Packets sealed with the old keypair that arrive after the switch are accepted."""
    a, b, net = established(crypto, clock)
    net.advance(clock.now + 121)
    in_flight = b.send_packets([b2a(1), b2a(2)], clock.now)  # B, old keypair, not yet delivered
    net.send(A_ADDR, [a2b(1)])  # triggers the rekey
    assert session(a, b, clock).age == 0
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
    assert drops(b, "stale_keypair") == 1
    n = len(net.log)
    net.send(A_ADDR, [a2b(10)])
    assert MSG_TRANSPORT not in [d[0] for _, _, d in net.log[n:]]  # no data on the dead keypair
    assert list(a.peers[b.public_key].staged) == [a2b(10)]


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
    assert session(b, a, clock) is not None
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


def test_forged_data_does_not_roam(crypto, clock):
    a, b, net = established(crypto, clock)
    d = bytearray(a.send_packets([a2b(1)], clock.now).datagrams[0][0])
    d[-1] ^= 1
    assert b.receive_datagram(bytes(d), ("203.0.113.66", 1), clock.now).packets == []
    assert b.peers[a.public_key].endpoint == A_ADDR
    assert drops(b, "bad_tag") == 1


def test_cookie_reply_does_not_roam(crypto, clock):
    # a handshake queue of 8 puts B under load from one waiting message on
    a, b, net = make_pair(crypto, clock)
    b2 = make_device(crypto, clock, 2, ProtocolConfig(handshake_queue_size=8))
    b2.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    reply = b2.receive_datagram(init, A_ADDR, clock.now).datagrams[0][0]
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
    # B: the 6 data packets; the initiation is refused too (its timestamp, or
    # the 20 ms limit on initiations: either way counted as a drop)
    assert drops(b, "replay") == 6 + (drops(b, "rate_limited") == 0)
    assert no_internal_errors(a, b)


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
    assert drops(b, "replay") == 1


def test_source_not_allowed_and_no_route(crypto, clock):
    a, b, net = established(crypto, clock)
    a.update_peer(b.public_key, allowed_ips=["10.9.0.0/16"])
    net.send(A_ADDR, [ipv4("10.0.0.77", "10.9.1.1")])  # A's source not in B's allowed ips for A
    assert drops(b, "source_not_allowed") == 1
    assert net.delivered[B_ADDR] == [a2b(0)]
    net.send(A_ADDR, [ipv4(A_IP, "8.8.8.8"), b"", b"\x00" * 10])
    assert drops(a, "no_route") == 1 and drops(a, "malformed") == 2


def test_padding_is_trimmed_and_lengths(crypto, clock):
    a, b, net = established(crypto, clock)
    for n in range(0, 40):
        out = a.send_packets([a2b(n, n)], clock.now)
        ((d, dst),) = out.datagrams
        assert dst == B_ADDR
        assert len(d) == 16 + ((20 + n + 15) // 16) * 16 + 16
        assert b.receive_datagram(d, A_ADDR, clock.now).packets == [a2b(n, n)]


@pytest.mark.parametrize("mtu, size, plain", PADDING_CASES)
def test_padding_never_passes_the_mtu(crypto, clock, mtu, size, plain):
    wire = 16 + plain + 16  # header, padded plaintext, tag
    a, b, net = established(crypto, clock, mtu=mtu)
    pkt = ipv4(A_IP, B_IP, bytes(size - 20))
    # straight from the table, and staged during a handshake (the path that once padded past)
    ((d, _),) = a.send_packets([pkt], clock.now).datagrams
    assert len(d) == wire
    assert b.receive_datagram(d, A_ADDR, clock.now).packets == [pkt]
    c, d2, net2 = make_pair(crypto, clock, mtu=mtu)
    net2.send(A_ADDR, [pkt])
    data = [m for s, _, m in net2.log if m[0] == MSG_TRANSPORT]
    assert [len(m) for m in data] == [wire]


def test_cookie_flow_under_load(crypto, clock):
    a, _, _ = make_pair(crypto, clock)
    b = make_device(crypto, clock, 2, ProtocolConfig(handshake_queue_size=8))  # under load at once
    b.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    from tests.protocol.helpers import Net

    net = Net(clock)
    net.add(A_ADDR, a)
    net.add(B_ADDR, b)
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    assert net.types() == [MSG_INITIATION, MSG_COOKIE_REPLY]
    assert net.delivered[B_ADDR] == []
    assert drops(b, "cookie_sent") == 1
    net.advance(t0 + 6)  # the retransmission carries mac2
    assert net.types()[2:4] == [MSG_INITIATION, MSG_RESPONSE]
    assert net.delivered[B_ADDR] == [a2b(1)]


def _flood(crypto, clock, target, n):
    """n initiations with a valid mac1 from a stranger, from n sources."""
    evil = make_device(crypto, clock, 99)
    evil.add_peer(target.public_key, allowed_ips=["10.0.0.2/32"], endpoint=B_ADDR)
    flood = []
    for i in range(n):
        evil.peers[target.public_key].last_sent_handshake = float("-inf")
        d = evil.send_packets([ipv4("10.0.0.66", B_IP)], clock.now).datagrams[0][0]
        flood.append((d, ("192.0.2.%d" % (i % 250 + 1), 1000 + i)))
    return flood


def test_under_load_is_a_queue_depth(crypto, clock):
    """Under load means 128 or more handshake messages waiting at once
    (wireguard-go: an eighth of its 1024-message queue), counting the one
    that arrives, not a rate; it lasts a second after the last time it was so."""
    a, b, net = make_pair(crypto, clock)
    flood = _flood(crypto, clock, b, 200)
    out = b.receive_datagrams(flood[:127], clock.now)
    assert out.datagrams == [] and drops(b, "cookie_sent") == 0
    assert drops(b, "unknown_peer") == 127
    clock.now += 2
    out = b.receive_datagrams(flood, clock.now)
    # 127 wait in the queue; the 128th puts B under load: it and the 72 after
    # it get cookie replies
    assert len(out.datagrams) == 73 and all(d[0] == MSG_COOKIE_REPLY for d, _ in out.datagrams)
    assert [d[4:8] for d, _ in out.datagrams] == [d[4:8] for d, _ in flood[127:]]
    assert drops(b, "cookie_sent") == 73 and drops(b, "unknown_peer") == 254
    # the legitimate peer still connects: cookie, then retransmission with mac2
    t0 = clock.now
    net.send(A_ADDR, [a2b(1)])
    assert net.delivered[B_ADDR] == [] and drops(b, "cookie_sent") == 74
    clock.now = t0 + 0.5
    b.receive_datagrams(flood, clock.now)  # still under attack
    net.advance(t0 + 5.5)
    assert net.delivered[B_ADDR] == [a2b(1)]
    # load ends a second after the flood stops
    clock.now += 1.1
    before = drops(b, "cookie_sent")
    b.receive_datagrams(flood[:5], clock.now)
    assert drops(b, "cookie_sent") == before


def test_newest_initiation_is_answered_and_the_replaced_one_is_not(crypto, clock):
    """Two initiations of one peer wait at once: the newer (later TAI64N
    timestamp) is answered, the one it replaced is refused by its timestamp
    and gets no response."""
    a, b, net = make_pair(crypto, clock)
    pa = a.peers[b.public_key]
    old = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    clock.now += 0.5
    pa.last_sent_handshake = float("-inf")
    out = Output()
    a.handshakes.initiate(pa, clock.now, out)
    new = out.datagrams[-1][0]
    assert old[0] == new[0] == MSG_INITIATION and old[4:8] != new[4:8]
    clock.now += 0.1
    out = b.receive_datagrams([(old, A_ADDR), (new, A_ADDR)], clock.now)
    responses = [d for d, _ in out.datagrams if d[0] == MSG_RESPONSE]
    assert len(responses) == 1
    assert responses[0][8:12] == new[4:8]  # the response names the newer one
    assert drops(b, "replay") == 1
    assert no_internal_errors(a, b)


def test_handshake_slice_is_bounded(crypto, clock):
    """The data plane serves the handshake queue in slices: a slice takes
    at most what it is given, newest first, and says how many still wait."""
    a, b, net = make_pair(crypto, clock)
    flood = _flood(crypto, clock, b, 40)
    res = b.table.open(flood, b.table.clock(clock.now))
    assert res.queued == 40 and res.replies == []
    out, left = b.serve_handshakes(clock.now, 16)
    assert left == 24 and drops(b, "unknown_peer") == 16
    out, left = b.serve_handshakes(clock.now, 16)
    assert left == 8 and drops(b, "unknown_peer") == 32
    out, left = b.serve_handshakes(clock.now, 16)
    assert left == 0 and drops(b, "unknown_peer") == 40


def test_rate_limit_under_load(crypto, clock):
    a, _, _ = make_pair(crypto, clock)
    b = make_device(crypto, clock, 2, ProtocolConfig(handshake_queue_size=8))
    b.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    pa = a.peers[b.public_key]
    first = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    reply = b.receive_datagram(first, A_ADDR, clock.now).datagrams[0][0]
    a.receive_datagram(reply, B_ADDR, clock.now)  # A has a cookie now
    inits = []
    for i in range(8):
        pa.last_sent_handshake = float("-inf")
        clock.now += 0.001
        o = a.send_packets([a2b(1)], clock.now)
        inits += [d for d, _ in o.datagrams if d[0] == MSG_INITIATION]
    for d in inits:
        b.receive_datagram(d, A_ADDR, clock.now)
    # a burst of 5 per source passes the limiter; the rest are refused
    assert drops(b, "rate_limited") >= 3
    assert drops(b, "cookie_sent") == 1


def test_remove_peer_and_set_private_key(crypto, clock):
    a, b, net = established(crypto, clock)
    assert a.table.index_count() == 1
    a.remove_peer(b.public_key)
    assert a.table.index_count() == 0 and a.table.peer_count() == 0
    assert a.send_packets([a2b(1)], clock.now).datagrams == []
    assert drops(a, "no_route") == 1
    # new private key on B: A (re-added) must handshake against the new public key
    from vpncrypt.protocol import keys
    from tests.protocol.helpers import make_rng

    new_priv = keys.clamp(make_rng(77)(32))
    b.set_private_key(new_priv)
    assert b.public_key == keys.public_from_private(new_priv)
    assert session(b, a, clock) is None and b.table.index_count() == 0
    a.add_peer(b.public_key, allowed_ips=[B_IP + "/32"], endpoint=B_ADDR)
    clock.now += 1
    net.send(A_ADDR, [a2b(2)])
    assert net.delivered[B_ADDR] == [a2b(0), a2b(2)]


def test_own_private_key_change_handshakes_at_once(crypto, clock):
    """A new private key ends the sessions and lifts the REKEY_TIMEOUT hold
    (5 s) on the last initiation, as the kernel's and wireguard-go's
    expire-current-keypairs do: the next packet starts a handshake at once
    (WireGuard's netns.sh changes a key and pings with a 1 s deadline)."""
    from vpncrypt.protocol import keys
    from tests.protocol.helpers import make_rng

    a, b, net = established(crypto, clock)
    clock.now += 1  # well inside REKEY_TIMEOUT of A's initiation
    new_priv = keys.clamp(make_rng(78)(32))
    old_pub = a.public_key
    a.set_private_key(new_priv)
    b.remove_peer(old_pub)
    b.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    sent = len(net.log)
    net.send(A_ADDR, [a2b(5)])
    assert [d[0] for _, _, d in net.log[sent:]][:1] == [1]  # an initiation, now
    assert net.delivered[B_ADDR][-1] == a2b(5)


def test_reprs_hide_keys(crypto, clock):
    a, b, net = established(crypto, clock)
    pa = a.peers[b.public_key]
    texts = [repr(a), repr(pa), repr(pa.stats(clock.now)), repr(pa.cookie), repr(a.counters), repr(a.table)]
    secrets = [a.private_key]
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
    cfg = ProtocolConfig(rekey_after_messages=50, reject_after_messages=80)
    a, b, net = make_pair(crypto, clock, protocol_config=cfg)
    net.drop = lambda s, d, data: data[0] in (MSG_INITIATION, MSG_RESPONSE) and len(net.log) > 3
    net.send(A_ADDR, [a2b(0)])
    pa = a.peers[b.public_key]
    clock.now += 6
    net.send(A_ADDR, [a2b(i) for i in range(60)])  # crosses 50: a rekey is attempted (and lost)
    assert net.types(A_ADDR).count(MSG_INITIATION) == 2
    clock.now += 6
    net.send(A_ADDR, [a2b(i) for i in range(30)])  # only 19 more fit under 80
    assert session(a, b, clock).send_counter == 80
    assert len(pa.staged) == 11
    assert len(net.delivered[B_ADDR]) == 80
    # the exhausted key stages packets and starts a handshake, as a missing one does
    assert net.types(A_ADDR).count(MSG_INITIATION) == 3
    net.drop = None
    clock.now += 6
    net.send(A_ADDR, [a2b(99)])  # handshake goes through now; the staged packets drain in order
    assert net.delivered[B_ADDR][80:] == [a2b(i) for i in range(19, 30)] + [a2b(99)]


def test_rekey_on_receive_before_reject(crypto, clock):
    a, b, net = established(crypto, clock)
    t0 = clock.now
    net.advance(t0 + 166)
    n = net.types(A_ADDR).count(MSG_INITIATION)
    net.send(B_ADDR, [b2a(1)])  # A is the initiator and its keypair is older than 165 s
    assert net.types(A_ADDR).count(MSG_INITIATION) == n + 1
    assert net.delivered[A_ADDR] == [b2a(1)]


class CountingTable:
    def __init__(self, inner):
        self.inner = inner
        self.calls = {"open": 0, "seal": 0}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def open(self, *a, **kw):
        self.calls["open"] += 1
        return self.inner.open(*a, **kw)

    def seal(self, *a, **kw):
        self.calls["seal"] += 1
        return self.inner.seal(*a, **kw)


def test_one_table_call_per_batch(crypto, clock):
    a, b, net = established(crypto, clock)
    a.table = ta = CountingTable(a.table)
    b.table = tb = CountingTable(b.table)
    out = a.send_packets([a2b(i) for i in range(100)] + [ipv6("fd00::1", "fd00::2")] * 10, clock.now)
    assert ta.calls["seal"] == 1 and len(out.datagrams) == 110
    got = b.receive_datagrams([(d, A_ADDR) for d, _ in out.datagrams], clock.now)
    assert tb.calls["open"] == 1 and len(got.packets) == 110


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


def test_roaming_through_a_handshake_is_an_event(crypto, clock):
    # B knows A at A_ADDR; A's initiation arrives from elsewhere: B answers
    # there and says the endpoint moved.  The response, arriving at A from a
    # new address of B's, moves A's endpoint for B the same way.
    from vpncrypt.protocol.events import EndpointChanged

    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    a_new, b_new = ("203.0.113.9", 4000), ("203.0.113.10", 5000)
    out = b.receive_datagram(init, a_new, clock.now)
    moved = [e for e in out.events if isinstance(e, EndpointChanged)]
    assert [(e.peer.public_key, e.endpoint, e.previous) for e in moved] == [(a.public_key, a_new, A_ADDR)]
    assert b.peers[a.public_key].endpoint == a_new
    resp = out.datagrams[0][0]
    assert resp[0] == MSG_RESPONSE
    out = a.receive_datagram(resp, b_new, clock.now)
    moved = [e for e in out.events if isinstance(e, EndpointChanged)]
    assert [(e.peer.public_key, e.endpoint, e.previous) for e in moved] == [(b.public_key, b_new, B_ADDR)]


def test_a_handshake_from_the_known_endpoint_is_no_move(crypto, clock):
    from vpncrypt.protocol.events import EndpointChanged

    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    out = b.receive_datagram(init, A_ADDR, clock.now)
    assert out.datagrams and not [e for e in out.events if isinstance(e, EndpointChanged)]
