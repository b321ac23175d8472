"""The sending side of the cookie defence (CookieState: mac1, mac2, the
cookie a peer sent) against the receiving side, which is the session
table's (tests/transport/test_admission.py tests that one's rules)."""

from vpncrypt.protocol import keys
from vpncrypt.protocol.cookie import CookieState
from vpncrypt.transport import new_table, status as S

from tests.protocol.helpers import make_rng

BODY = b"\x01\x00\x00\x00" + bytes(112)
SRC = ("192.0.2.1", 5)


def _receiver(crypto, depth=1):
    """A table that is under load from `depth` waiting messages."""
    from vpncrypt.transport import TableConfig

    pub = keys.public_from_private(keys.clamp(make_rng(5)(32)))
    t = new_table(crypto.name, TableConfig(under_load_depth=depth))
    t.set_public_key(pub)
    t.seed(make_rng(6)(32))
    return t, pub


def test_mac1_mac2_and_the_senders_cookie_lifetime(crypto):
    t, pub = _receiver(crypto)
    st = CookieState(pub)
    msg = st.add_macs(BODY, 0.0)
    assert msg[132:] == bytes(16)  # no cookie yet: mac2 is zeros
    res = t.open([(msg, SRC)], 0.0)
    assert res.status == [S.COOKIE_SENT]
    reply = res.replies[0][0]
    assert st.consume_reply(reply, 1.0, crypto)
    assert not st.consume_reply(reply, 1.0, crypto)  # one per sent message
    msg2 = st.add_macs(BODY, 2.0)
    assert t.open([(msg2, SRC)], 2.0).status == [S.HANDSHAKE]
    assert t.open([(msg2, ("192.0.2.1", 6))], 2.0).status == [S.COOKIE_SENT]  # another source
    # the sender stops using a cookie older than 120 - 5 s
    assert st.add_macs(BODY, 117.0)[-16:] == bytes(16)


def test_cookie_reply_bound_to_mac1(crypto):
    t, pub = _receiver(crypto)
    st = CookieState(pub)
    st.add_macs(BODY, 0.0)
    other = CookieState(pub).add_macs(BODY + b"", 0.0)[:-32] + bytes(32)  # a different mac1
    res = t.open([(other, SRC)], 0.0)
    assert res.status == [S.BAD_MAC1] and res.replies == []
    other = bytearray(CookieState(pub).add_macs(BODY, 0.0))
    other[10] ^= 1
    other = CookieState(pub).add_macs(bytes(other[:116]), 0.0)
    reply = t.open([(other, SRC)], 0.0).replies[0][0]
    assert not st.consume_reply(reply, 0.0, crypto)
