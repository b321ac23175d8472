"""The responder's Noise work in C (native/wg_handshake.c through
vpncrypt.protocol.responder_native) against the Python reference
(vpncrypt.protocol.noise_ik) on the same inputs: the same static key,
timestamp, response and session keys, and the same failures."""

import random

import pytest

from vpncrypt.crypto import AuthenticationError, get_backend
from vpncrypt.protocol import keys
from vpncrypt.protocol.noise_ik import (
    wg_begin_consume_initiation,
    wg_create_initiation,
    wg_consume_response,
    wg_finish_consume_initiation,
    wg_respond,
)
from vpncrypt.protocol.messages import pack_response_body, parse_initiation, parse_response
from vpncrypt.protocol.responder_native import ResponderState

PY = get_backend("pynacl")


def setup(seed, psk):
    rng = random.Random(seed)
    r_priv, i_priv = keys.clamp(rng.randbytes(32)), keys.clamp(rng.randbytes(32))
    r_pub, i_pub = keys.public_from_private(r_priv), keys.public_from_private(i_priv)
    ss = keys.dh(i_priv, r_pub)
    body, pending = wg_create_initiation(
        PY,
        i_priv,
        i_pub,
        r_pub,
        ss,
        rng.getrandbits(32),
        keys.clamp(rng.randbytes(32)),
        1_700_000_000.0 + seed,
        0.0,
    )
    data = body + bytes(32)  # mac1 and mac2 are not part of the Noise work
    return rng, r_priv, r_pub, i_priv, i_pub, ss, data, pending


def python_responder(r_priv, r_pub, ss, data, e_priv, psk):
    msg = parse_initiation(data)
    state, static = wg_begin_consume_initiation(PY, r_priv, r_pub, msg)
    ts = wg_finish_consume_initiation(state, ss, msg)
    return static, ts, wg_respond(state, e_priv, msg, static, psk)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("with_psk", [False, True])
def test_c_responder_matches_the_reference(seed, with_psk):
    rng, r_priv, r_pub, i_priv, i_pub, ss, data, pending = setup(seed, with_psk)
    psk = rng.randbytes(32) if with_psk else None
    e_priv = keys.clamp(rng.randbytes(32))
    want = python_responder(r_priv, r_pub, ss, data, e_priv, psk)
    st = ResponderState()
    static = st.begin(r_priv, r_pub, data)
    ts = st.finish(ss, data)
    got = (static, ts, st.respond(e_priv, data, static, psk))
    assert got == want
    assert static == i_pub and len(ts) == 12
    assert bytes(st._st) == bytes(96)  # the state is wiped once the response is made
    # and the initiator accepts the response the C side made
    e_pub, empty, (send, recv) = got[2]
    resp = pack_response_body(7, parse_initiation(data).sender, e_pub, empty) + bytes(32)
    i_send, i_recv = wg_consume_response(pending, i_priv, psk, parse_response(resp))
    assert (i_send, i_recv) == (recv, send)


def test_a_flipped_static_ciphertext_fails_like_the_reference():
    rng, r_priv, r_pub, i_priv, i_pub, ss, data, _ = setup(20, False)
    bad = bytearray(data)
    bad[60] ^= 1  # inside the sealed static key
    bad = bytes(bad)
    with pytest.raises(AuthenticationError):
        wg_begin_consume_initiation(PY, r_priv, r_pub, parse_initiation(bad))
    st = ResponderState()
    with pytest.raises(AuthenticationError):
        st.begin(r_priv, r_pub, bad)
    assert bytes(st._st) == bytes(96)


def test_a_flipped_timestamp_or_a_wrong_static_static_fails():
    rng, r_priv, r_pub, i_priv, i_pub, ss, data, _ = setup(21, False)
    bad = bytearray(data)
    bad[100] ^= 1  # inside the sealed timestamp
    for message, dh_ss in ((bytes(bad), ss), (data, bytes(31) + b"\x01")):
        st = ResponderState()
        st.begin(r_priv, r_pub, message)
        with pytest.raises(AuthenticationError):
            st.finish(dh_ss, message)
        assert bytes(st._st) == bytes(96)


def test_a_low_order_ephemeral_is_a_dh_error_like_the_reference():
    rng, r_priv, r_pub, i_priv, i_pub, ss, data, _ = setup(22, False)
    bad = data[:8] + bytes(32) + data[40:]  # the identity point: X25519 gives all zeros
    with pytest.raises(keys.DHError):
        wg_begin_consume_initiation(PY, r_priv, r_pub, parse_initiation(bad))
    st = ResponderState()
    with pytest.raises(keys.DHError):
        st.begin(r_priv, r_pub, bad)
    assert bytes(st._st) == bytes(96)


def test_a_low_order_initiator_static_is_a_dh_error():
    """respond refuses an all-zero DH with the initiator's static key (a
    peer configured with a low-order public key cannot complete)."""
    rng, r_priv, r_pub, i_priv, i_pub, ss, data, _ = setup(23, False)
    st = ResponderState()
    st.begin(r_priv, r_pub, data)
    st.finish(ss, data)
    with pytest.raises(keys.DHError):
        st.respond(keys.clamp(rng.randbytes(32)), data, bytes(32), None)
    assert bytes(st._st) == bytes(96)
