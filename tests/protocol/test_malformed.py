"""Malformed input of every type and length is dropped and counted; nothing escapes."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vpncrypt.crypto import get_backend
from vpncrypt.protocol import ProtocolConfig
from vpncrypt.protocol.messages import MSG_INITIATION, MSG_RESPONSE, MSG_TRANSPORT

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, Clock, ipv4, make_device, make_pair


def total_drops(dev):
    return sum(dev.drops().values())


def captured(crypto):
    """A fresh pair and one of each valid message A -> B or B -> A."""
    clock = Clock()
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [ipv4(A_IP, B_IP)])
    init = net.log[0][2]
    resp = net.log[1][2]
    data = a.send_packets([ipv4(A_IP, B_IP)], clock.now).datagrams[0][0]
    # a cookie reply from B's twin that is always under load (queue of 8: depth 1)
    loaded = make_device(crypto, clock, 2, ProtocolConfig(handshake_queue_size=8))
    loaded.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    clock.now += 1
    from vpncrypt.protocol import Output

    out = Output()
    a.peers[b.public_key].last_sent_handshake = float("-inf")
    a.handshakes.initiate(a.peers[b.public_key], clock.now, out)
    cookie = loaded.receive_datagram(out.datagrams[0][0], A_ADDR, clock.now).datagrams[0][0]
    return clock, a, b, {"init": init, "resp": resp, "data": data, "cookie": cookie}


@pytest.mark.parametrize("kind", ["init", "resp", "data", "cookie"])
def test_truncated_oversized_wrong_type(crypto, kind):
    clock, a, b, msgs = captured(crypto)
    msg = msgs[kind]
    target = a if kind in ("resp", "cookie") else b
    src = B_ADDR if target is a else A_ADDR
    variants = [msg[:n] for n in range(len(msg))]
    variants += [msg + b"\x00", msg + bytes(100)] if kind != "data" else []
    variants += [bytes([t]) + msg[1:] for t in (0, 5, 255) + tuple(x for x in (1, 2, 3, 4) if x != msg[0])]
    variants += [msg[:1] + b"\x01" + msg[2:]]  # reserved byte not zero
    for v in variants:
        before = total_drops(target)
        out = target.receive_datagram(v, src, clock.now)
        assert out.packets == []
        assert total_drops(target) > before, (kind, len(v))


def test_unknown_index_bad_mac1_bad_tag(crypto):
    clock, a, b, msgs = captured(crypto)
    data = bytearray(msgs["data"])
    data[4] ^= 0xFF
    b.receive_datagram(bytes(data), A_ADDR, clock.now)
    assert b.drops()["unknown_index"] == 1
    init = bytearray(msgs["init"])
    init[120] ^= 1
    b.receive_datagram(bytes(init), A_ADDR, clock.now)
    assert b.drops()["bad_mac1"] == 1
    fresh = a.send_packets([ipv4(A_IP, B_IP)], clock.now).datagrams[0][0]
    bad = bytearray(fresh)
    bad[-1] ^= 1
    assert b.receive_datagram(bytes(bad), A_ADDR, clock.now).packets == []
    assert b.drops()["bad_tag"] == 1
    # the replay window was not touched by the forgery: the real packet still goes through
    assert b.receive_datagram(fresh, A_ADDR, clock.now).packets == [ipv4(A_IP, B_IP)]
    resp = bytearray(msgs["resp"])
    resp[8] ^= 1
    a.receive_datagram(bytes(resp), B_ADDR, clock.now)
    assert a.drops()["bad_mac1"] == 1  # receiver index is covered by mac1
    # a low-order ephemeral: rejected without an exception
    from vpncrypt.protocol.noise import HASH, LABEL_MAC1, MAC

    body = bytearray(msgs["init"][:116])
    body[8:40] = bytes(32)
    forged = bytes(body) + MAC(HASH(LABEL_MAC1, b.public_key), bytes(body)) + bytes(16)
    before = total_drops(b)
    b.receive_datagram(forged, A_ADDR, clock.now)
    assert total_drops(b) == before + 1


def test_inner_packet_malformed(crypto):
    clock, a, b, msgs = captured(crypto)
    # hand-craft data on A's keypair with a bad inner packet (claims more bytes than present)
    bad_ip = bytearray(ipv4(A_IP, B_IP))
    bad_ip[2:4] = (500).to_bytes(2, "big")
    # (sealed for the peer directly: A's own table refuses to route it)
    assert a.send_packets([bytes(bad_ip)], clock.now).datagrams == []
    out = a.table.seal([bytes(bad_ip)], a.table.clock(clock.now), peer=a.peers[b.public_key].pid)
    assert b.receive_datagram(out.datagrams[0][0], A_ADDR, clock.now).packets == []
    assert b.drops()["malformed"] >= 1


_backend = get_backend("native")
_STATE = captured(_backend)


def _mutate(draw_bytes, msg, flips):
    m = bytearray(msg)
    for pos, val in flips:
        if m:
            m[pos % len(m)] = val
    return bytes(m)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=300),
        st.tuples(
            st.sampled_from(["init", "resp", "data", "cookie"]),
            st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
            st.integers(-5, 300),
        ),
    )
)
def test_fuzz_receive_datagram(case):
    clock, a, b, msgs = _STATE
    if isinstance(case, bytes):
        datagrams = [case, b"\x01\x00\x00\x00" + case, b"\x04\x00\x00\x00" + case]
    else:
        kind, flips, cut = case
        m = _mutate(None, msgs[kind], flips)
        datagrams = [m, m[:cut] if cut >= 0 else m + bytes(-cut)]
    for dev, src in ((a, B_ADDR), (b, A_ADDR)):
        for d in datagrams:
            out = dev.receive_datagram(d, src, clock.now)
            for dg, _ in out.datagrams:
                assert dg[0] in (MSG_INITIATION, MSG_RESPONSE, 3, MSG_TRANSPORT)
        out = dev.receive_datagrams([(d, src) for d in datagrams], clock.now)
        dev.handle_timers(clock.now)
