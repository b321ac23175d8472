"""The session table's cheap checks of handshake messages, on both backends:
sizes and types, mac1, under load mac2 with a cookie reply (opened here
with the sending side's own code, vpncrypt.protocol.cookie.CookieState),
the per-source rate limiter, unknown indices, and the bounded queue the
protocol core takes them from, newest first.  The numbers are WireGuard's
(wireguard-go's device/constants.go and ratelimiter, the whitepaper's
cookie section): a queue of 1024, under load from 128 waiting and for 1 s
after, 20 messages per second per source with bursts of 5, a cookie secret
replaced every 120 s."""

import hashlib

import pytest

from vpncrypt.crypto import get_backend
from vpncrypt.protocol.cookie import CookieState
from vpncrypt.transport import new_table, status as S

from tests.transport.helpers import KEY_AB, KEY_BA, install, message, table_with_peer

PUB = bytes(range(32, 64))
SEED = bytes(range(7, 39))
T0 = 0.0


def mac(key, data, size=16):
    return hashlib.blake2s(data, key=key, digest_size=size).digest()


MAC1_KEY = hashlib.blake2s(b"mac1----" + PUB).digest()


def body(kind=1, n=0, receiver=0):
    """The bytes before mac1 of an initiation (116) or a response (60)."""
    sender = (1000 + n).to_bytes(4, "little")
    if kind == 1:
        return b"\x01\x00\x00\x00" + sender + n.to_bytes(4, "little") * 27
    return b"\x02\x00\x00\x00" + sender + receiver.to_bytes(4, "little") + bytes(48)


def signed(b, mac2=bytes(16)):
    return b + mac(MAC1_KEY, b) + mac2


def src(n, port=51820):
    return (f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}", port)


def gate(backend, peer=False):
    if peer:
        t, pid = table_with_peer(backend)
    else:
        t, pid = new_table(backend), None
    t.set_public_key(PUB)
    t.seed(SEED)
    return t, pid


def fill(t, n=127, now=T0):
    """n initiations without mac2 from n sources: they wait in the queue."""
    res = t.open([(signed(body(1, 50000 + i)), src(50000 + i)) for i in range(n)], now)
    assert res.queued == n


def cookie_for(t, crypto, b, addr, now):
    """Ask for a cookie the way a sender does (no mac2 under load) and open
    the reply with the sender's code; returns the CookieState holding it."""
    st = CookieState(PUB)
    res = t.open([(st.add_macs(b, now), addr)], now)
    assert res.status == [S.COOKIE_SENT]
    ((reply, to),) = res.replies
    assert to == addr and len(reply) == 64 and reply[:4] == b"\x03\x00\x00\x00"
    assert reply[4:8] == b[4:8]  # the sender index of the message
    assert st.consume_reply(reply, now, crypto)
    return st


@pytest.fixture
def crypto(backend):
    return get_backend(backend)


def test_wrong_sizes_and_types_are_dropped_as_malformed(backend):
    t, _ = gate(backend)
    good = signed(body(1))
    bad = [
        good[:147],
        good + b"\x00",
        signed(body(2))[:91],
        signed(body(2)) + b"\x00",
        b"\x03\x00\x00\x00" + bytes(59),
        b"\x03\x00\x00\x00" + bytes(61),
        b"\x05" + good[1:],
        b"\x00" + good[1:],
        b"\x01\x00\x00\x01" + good[4:],  # type word
        b"",
        b"\x01",
        b"\x01\x00\x00",
        bytes(148),
        b"\x02\x00\x00\x00" + bytes(144),
    ]
    res = t.open([(d, src(1)) for d in bad], T0)
    assert res.status == [S.MALFORMED] * len(bad)
    assert res.queued == 0 and t.handshakes_waiting(T0) == (0, False)
    assert t.drops() == {"malformed": len(bad)}
    assert t.open([(good, src(1))], T0).status == [S.HANDSHAKE]


def test_bad_mac1_dropped_before_the_protocol_core(backend):
    t, _ = gate(backend)
    good = signed(body(1))
    flipped = bytearray(good)
    flipped[116] ^= 1
    other_key = body(1) + mac(hashlib.blake2s(b"mac1----" + bytes(32)).digest(), body(1)) + bytes(16)
    body_changed = bytearray(good)
    body_changed[20] ^= 1
    res = t.open(
        [(bytes(flipped), src(1)), (other_key, src(1)), (bytes(body_changed), src(1)), (good, src(1))], T0
    )
    assert res.status == [S.BAD_MAC1, S.BAD_MAC1, S.BAD_MAC1, S.HANDSHAKE]
    assert t.drops() == {"bad_mac1": 3} and res.queued == 1
    assert t.take_handshakes(10) == [(good, src(1))]


def test_no_private_key_drops_initiations_and_responses(backend):
    t, _ = gate(backend)
    t.set_public_key(None)
    res = t.open([(signed(body(1)), src(1)), (signed(body(2)), src(1))], T0)
    assert res.status == [S.UNKNOWN_PEER] * 2 and t.drops() == {"unknown_peer": 2}


def test_under_load_from_128_waiting_and_for_1_second_after(backend):
    t, _ = gate(backend)
    fill(t, 127)
    assert t.handshakes_waiting(T0) == (127, False)
    res = t.open([(signed(body(1, 1)), src(1))], T0)  # the 128th
    assert res.status == [S.COOKIE_SENT] and len(res.replies) == 1
    assert t.handshakes_waiting(T0) == (127, True)
    assert len(t.take_handshakes(1024)) == 127
    assert t.open([(signed(body(1, 2)), src(2))], T0 + 0.999).status == [S.COOKIE_SENT]
    assert t.handshakes_waiting(T0 + 0.999) == (0, True)
    assert t.handshakes_waiting(T0 + 1.0) == (0, False)
    assert t.open([(signed(body(1, 3)), src(3))], T0 + 1.0).status == [S.HANDSHAKE]
    assert t.drops() == {"cookie_sent": 2}


def test_cookie_reply_opens_with_the_senders_code_and_mac2_passes(backend, crypto):
    t, _ = gate(backend)
    fill(t)
    b = body(1, 1)
    st = cookie_for(t, crypto, b, src(1), T0)
    # the cookie is a MAC of the source address and port
    assert len(st.cookie) == 16
    st_port = cookie_for(t, crypto, b, src(1, 4000), T0)
    assert st_port.cookie != st.cookie
    # with it, mac2 is valid from that address and port only
    assert t.open([(st.add_macs(b, T0), src(1))], T0).status == [S.HANDSHAKE]
    assert t.open([(st.add_macs(b, T0), src(1, 4000))], T0).status == [S.COOKIE_SENT]
    wrong = bytearray(st.add_macs(b, T0))
    wrong[-1] ^= 1
    assert t.open([(bytes(wrong), src(1))], T0).status == [S.COOKIE_SENT]
    # a reply made for another message (another mac1) does not open
    other = CookieState(PUB)
    other.add_macs(body(1, 9), T0)
    res = t.open([(signed(body(1, 8)), src(5))], T0)
    assert not other.consume_reply(res.replies[0][0], T0, crypto)
    # responses get the same defence
    t2, pid = gate(backend, peer=True)
    assert t2.reserve_index(77, pid)
    fill(t2)
    rb = body(2, 3, receiver=77)
    rst = cookie_for(t2, crypto, rb, src(3), T0)
    assert t2.open([(rst.add_macs(rb, T0), src(3))], T0).status == [S.HANDSHAKE]


def test_cookie_secret_is_replaced_every_120_seconds(backend, crypto):
    t, _ = gate(backend)
    fill(t)
    b = body(1, 1)
    st = cookie_for(t, crypto, b, src(1), T0)
    st.valid_for = 1000.0  # (a sender stops at 115 s: test the receiver)
    assert t.open([(st.add_macs(b, T0 + 119.9), src(1))], T0 + 119.9).status == [S.HANDSHAKE]
    first = st.cookie
    res = t.open([(st.add_macs(b, T0 + 120.0), src(1))], T0 + 120.0)
    assert res.status == [S.COOKIE_SENT]
    assert st.consume_reply(res.replies[0][0], T0 + 120.0, crypto) and st.cookie != first


def test_rate_limit_is_20_per_second_with_bursts_of_5_per_address(backend, crypto):
    t, _ = gate(backend)
    fill(t)
    b = body(1, 1)
    st = cookie_for(t, crypto, b, src(1), T0)
    msg = st.add_macs(b, T0)
    res = t.open([(msg, src(1))] * 7, T0)
    assert res.status == [S.HANDSHAKE] * 5 + [S.RATE_LIMITED] * 2
    assert t.open([(msg, src(1))], T0 + 0.04).status == [S.RATE_LIMITED]
    assert t.open([(msg, src(1))], T0 + 0.1).status == [S.HANDSHAKE]  # one token per 50 ms: 2 - 1 left
    # per address: another address has a bucket of its own, another port does not
    st2 = cookie_for(t, crypto, b, src(2), T0 + 0.1)
    st3 = cookie_for(t, crypto, b, src(1, 999), T0 + 0.1)
    assert t.open([(st2.add_macs(b, T0 + 0.1), src(2))], T0 + 0.1).status == [S.HANDSHAKE]
    m3 = st3.add_macs(b, T0 + 0.1)
    assert t.open([(m3, src(1, 999))] * 2, T0 + 0.1).status == [S.HANDSHAKE, S.RATE_LIMITED]
    # over 2 s at 1000 messages per second: a burst of 5, then 20 per second
    t2, _ = gate(backend)
    fill(t2, now=10.0)
    st4 = cookie_for(t2, crypto, b, src(4), 10.0)
    msg4 = st4.add_macs(b, 10.0)
    passed = sum(t2.open([(msg4, src(4))], 10.0 + i / 1000).status == [S.HANDSHAKE] for i in range(2000))
    assert 5 + 39 <= passed <= 5 + 41
    assert t2.drops()["rate_limited"] == 2000 - passed


def test_queue_holds_1024_and_drops_the_oldest(backend, crypto):
    t, _ = gate(backend)
    fill(t, 127)
    n = 1100
    msgs = []
    first = t.open([(CookieState(PUB).add_macs(body(1, i), T0), src(i)) for i in range(n)], T0)
    assert first.status == [S.COOKIE_SENT] * n
    for i, (reply, _) in enumerate(first.replies):
        st = CookieState(PUB)
        st.add_macs(body(1, i), T0)  # the message the reply answered
        assert st.consume_reply(reply, T0, crypto)
        msgs.append((st.add_macs(body(1, i), T0), src(i)))
    res = t.open(msgs, T0)
    assert res.status == [S.HANDSHAKE] * n
    # 127 + 1100 went in; the queue holds 1024, the 203 oldest were dropped
    assert t.handshakes_waiting(T0) == (1024, True)
    assert t.drops()["handshake_queue_full"] == 127 + n - 1024
    taken = t.take_handshakes(2000)
    assert len(taken) == 1024
    assert taken == msgs[::-1][:1024]  # newest first: none of the filler is left


def test_unknown_indices_dropped(backend):
    t, pid = gate(backend, peer=True)
    assert t.reserve_index(5, pid)  # a handshake of ours in flight
    install(t, pid, 9, 90, KEY_BA, KEY_AB, True)  # a session

    def cookie_reply(index):
        return b"\x03\x00\x00\x00" + index.to_bytes(4, "little") + bytes(56)

    res = t.open(
        [
            (signed(body(2, 1, receiver=6)), src(1)),  # nobody's index
            (signed(body(2, 1, receiver=9)), src(1)),  # a session's, not a handshake's
            (signed(body(2, 1, receiver=5)), src(1)),
            (cookie_reply(6), src(1)),
            (cookie_reply(9), src(1)),
            (cookie_reply(5), src(1)),
            (message(KEY_AB, 12345, 0, b""), src(1)),
        ],
        T0,
    )  # transport data
    assert res.status == [
        S.UNKNOWN_INDEX,
        S.UNKNOWN_INDEX,
        S.HANDSHAKE,
        S.UNKNOWN_INDEX,
        S.HANDSHAKE,
        S.HANDSHAKE,
        S.UNKNOWN_INDEX,
    ]
    assert t.drops() == {"unknown_index": 4} and res.queued == 3


def test_take_is_newest_first_and_bounded(backend):
    t, _ = gate(backend)
    msgs = [(signed(body(1, i)), src(i)) for i in range(5)]
    t.open(msgs, T0)
    assert t.take_handshakes(2) == [msgs[4], msgs[3]]
    assert t.take_handshakes(0) == [] and t.handshakes_waiting(T0) == (3, False)
    assert t.take_handshakes(10) == [msgs[2], msgs[1], msgs[0]]
