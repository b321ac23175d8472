"""mac1/mac2, cookie secret rotation, rate limiter and load detection."""
from vpncrypt.protocol.cookie import CookieChecker, CookieState, LoadDetector, RateLimiter, addr_bytes
from vpncrypt.protocol import keys

from tests.protocol.helpers import make_rng


def test_rate_limiter_burst_and_rate():
    rl = RateLimiter(20, 5)
    assert [rl.allow("x", 0.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert rl.allow("y", 0.0)  # per source
    assert not rl.allow("x", 0.04)
    assert rl.allow("x", 0.1)  # 20/s refills one token in 50 ms
    # over a long run: about 20 per second
    ok = sum(rl.allow("z", 1.0 + i / 1000) for i in range(2000))
    assert 5 + 39 <= ok <= 5 + 41


def test_rate_limiter_table_is_bounded_and_pruned():
    rl = RateLimiter(20, 5, max_entries=100)
    for i in range(100):
        assert rl.allow(i, 0.0)
    assert not rl.allow("new", 0.0)  # full, nothing idle yet
    assert rl.allow("new", 1.0)      # idle sources pruned
    assert len(rl.table) == 1
    rl.maybe_prune(5.0)
    assert rl.table == {}


def test_load_detector_is_a_queue_depth_held_one_second():
    ld = LoadDetector(depth=128, hold=1.0)
    assert not ld.check(127, 0.0)
    assert ld.check(128, 0.5)
    assert ld.check(1, 1.49)          # held for a second after the last deep queue
    assert not ld.check(1, 1.5)
    assert ld.check(4000, 10.0) and not ld.check(0, 11.0)


def test_mac1_mac2_and_secret_rotation(crypto):
    priv = keys.clamp(make_rng(5)(32))
    pub = keys.public_from_private(priv)
    chk = CookieChecker(pub, crypto, make_rng(6))
    st = CookieState(pub)
    body = b"\x01\x00\x00\x00" + bytes(112)
    msg = st.add_macs(body, 0.0)
    assert chk.check_mac1(msg, 116)
    assert not chk.check_mac1(msg[:-17] + bytes([msg[-17] ^ 1]) + msg[-16:], 116)
    src = addr_bytes(("192.0.2.1", 5))
    assert not chk.check_mac2(msg, 116, src, 0.0)
    reply = chk.make_reply(msg, 116, 7, src, 0.0)
    assert st.consume_reply(reply, 1.0, crypto)
    assert not st.consume_reply(reply, 1.0, crypto)  # one per sent message
    msg2 = st.add_macs(body, 2.0)
    assert chk.check_mac2(msg2, 116, src, 2.0)
    assert not chk.check_mac2(msg2, 116, addr_bytes(("192.0.2.1", 6)), 2.0)  # another source
    assert not chk.check_mac2(msg2, 116, src, 121.0)  # the secret rotated after 2 minutes
    # the sender stops using a cookie older than 120 - 5 s
    assert st.add_macs(body, 117.0)[-16:] == bytes(16)


def test_cookie_reply_bound_to_mac1(crypto):
    pub = keys.public_from_private(keys.clamp(make_rng(5)(32)))
    chk = CookieChecker(pub, crypto, make_rng(6))
    st = CookieState(pub)
    body = b"\x01\x00\x00\x00" + bytes(112)
    st.add_macs(body, 0.0)
    other = CookieState(pub).add_macs(body + b"", 0.0)[:-32] + bytes(32)  # different mac1
    reply = chk.make_reply(other, 116, 7, b"src", 0.0)
    assert not st.consume_reply(reply, 0.0, crypto)
