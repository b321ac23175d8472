"""Handshake rules a peer relies on: forged responses change nothing,
replayed initiations are refused, timestamps are whitened, state is wiped."""

import struct

from vpncrypt.protocol import noise
from vpncrypt.protocol.messages import MSG_INITIATION, MSG_RESPONSE, RESP_MAC1
from vpncrypt.protocol.noise import HASH, LABEL_MAC1, MAC

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, a2b, ipv4, make_pair, session


def forged_response(real: bytes, to_public: bytes) -> bytes:
    """The real response's indices with a garbage ephemeral and tag, and a
    valid mac1 (anyone who knows the initiator's public key can compute it)."""
    body = bytearray(real[: RESP_MAC1[0]])
    body[12:44] = bytes(range(7, 39))  # ephemeral
    body[44:60] = bytes(16)  # encrypted nothing: a wrong tag
    mac1 = MAC(HASH(LABEL_MAC1, to_public), bytes(body))
    return bytes(body) + mac1 + bytes(16)


def test_forged_response_does_not_block_the_handshake(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    resp = b.receive_datagram(init, A_ADDR, clock.now).datagrams[0][0]
    assert resp[0] == MSG_RESPONSE
    # the forgery arrives first, from anywhere
    out = a.receive_datagram(forged_response(resp, a.public_key), ("203.0.113.5", 9), clock.now)
    assert out.datagrams == [] and a.drops().get("bad_tag") == 1
    assert a.peers[b.public_key].endpoint == B_ADDR
    # the real response still completes the handshake, and the staged packet flows
    out = a.receive_datagram(resp, B_ADDR, clock.now)
    assert session(a, b, clock) is not None
    ((data, dst),) = out.datagrams
    assert dst == B_ADDR and b.receive_datagram(data, A_ADDR, clock.now).packets == [a2b(1)]


def test_captured_initiation_replayed_later_gets_no_response(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [a2b(1)])
    init = next(d for s, _, d in net.log if d[0] == MSG_INITIATION)
    before = b.drops()
    clock.now += 5  # long past the 20 ms initiation limit
    out = b.receive_datagram(init, ("198.18.0.1", 4444), clock.now)
    assert out.datagrams == []
    after = b.drops()
    assert after.get("replay", 0) == before.get("replay", 0) + 1
    assert after.get("rate_limited", 0) == before.get("rate_limited", 0)
    assert b.peers[a.public_key].endpoint == A_ADDR  # no roaming from a replay


def test_initiation_timestamp_is_whitened(crypto, clock):
    """TAI64N nanoseconds are rounded down to a multiple of 2^24 (WireGuard's
    whitening against timing leaks)."""
    for nanos in (0, 1, 16_777_215, 16_777_216, 16_777_217, 999_999_999, 123_456_789):
        stamp = noise.tai64n(1000 + nanos / 1e9)  # (a small base: exact to the nanosecond)
        secs, ns = struct.unpack(">QI", stamp)
        assert secs == 0x400000000000000A + 1000
        assert ns == nanos - nanos % 16_777_216


def test_handshake_state_is_wiped(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    init = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    pending = a.peers[b.public_key].pending
    ss = pending.ss
    assert any(ss.ck) and any(ss.h) and any(pending.e_priv)
    resp = b.receive_datagram(init, A_ADDR, clock.now).datagrams[0][0]
    a.receive_datagram(resp, B_ADDR, clock.now)
    assert a.peers[b.public_key].pending is None
    assert ss.ck == bytearray(32) and ss.h == bytearray(32) and pending.e_priv == bytearray(32)
    assert isinstance(ss.ck, bytearray) and isinstance(ss.h, bytearray)


def test_answering_replaces_our_own_initiation(crypto, clock):
    """WireGuard keeps one handshake per peer: answering the peer's
    initiation ends ours, so a late response to ours is refused."""
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    init_a = a.send_packets([a2b(1)], clock.now).datagrams[0][0]
    clock.now += 0.1
    init_b = b.send_packets([ipv4(B_IP, A_IP)], clock.now).datagrams[0][0]
    resp_to_b = a.receive_datagram(init_b, B_ADDR, clock.now).datagrams[0][0]  # A answers B
    resp_to_a = b.receive_datagram(init_a, A_ADDR, clock.now).datagrams[0][0]  # B answers A
    assert a.peers[b.public_key].pending is None
    before = a.drops().get("unknown_index", 0)
    a.receive_datagram(resp_to_a, B_ADDR, clock.now)
    assert a.drops().get("unknown_index", 0) == before + 1
    assert resp_to_b[0] == MSG_RESPONSE
