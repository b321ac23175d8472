"""The Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s known-answer vector through our
Noise code, and the Noise/BLAKE2s building blocks."""

import hashlib
import hmac
import json
import pathlib

import pytest

from vpncrypt.protocol import noise_ik as hs
from vpncrypt.protocol import keys, noise

VECTORS = pathlib.Path(__file__).parents[1] / "vectors" / "noise_25519_chachapoly_blake2s_vectors.json"


def _vector(name):
    data = json.loads(VECTORS.read_text())
    return next(v for v in data["vectors"] if v["protocol_name"] == name and "handshake_hash" in v)


def test_ikpsk2_known_answer(crypto):
    v = _vector("Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s")
    h = bytes.fromhex
    name = v["protocol_name"].encode()
    i_s, i_e = h(v["init_static"]), h(v["init_ephemeral"])
    r_s, r_e = h(v["resp_static"]), h(v["resp_ephemeral"])
    psk = h(v["init_psks"][0])
    assert h(v["init_remote_static"]) == keys.public_from_private(r_s)
    i_pub, r_pub = keys.public_from_private(i_s), keys.public_from_private(r_s)
    msgs = v["messages"]

    # message 1: initiator -> responder (e, es, s, ss)
    ini = hs.init_state(name, h(v["init_prologue"]), r_pub, crypto)
    e_pub, enc_s, enc_p = hs.ik_initiator_write(
        ini, i_pub, r_pub, i_e, keys.dh(i_s, r_pub), h(msgs[0]["payload"])
    )
    assert e_pub + enc_s + enc_p == h(msgs[0]["ciphertext"])
    res = hs.init_state(name, h(v["resp_prologue"]), r_pub, crypto)
    static = hs.ik_responder_read_static(res, r_s, e_pub, enc_s)
    assert static == i_pub
    assert hs.ik_responder_read_payload(res, keys.dh(r_s, static), enc_p) == h(msgs[0]["payload"])

    # message 2: responder -> initiator (e, ee, se, psk)
    re_pub, enc2 = hs.ik_responder_write(res, r_e, e_pub, static, psk, h(msgs[1]["payload"]))
    assert re_pub + enc2 == h(msgs[1]["ciphertext"])
    assert hs.ik_initiator_read(ini, i_e, i_s, re_pub, psk, enc2) == h(msgs[1]["payload"])
    assert ini.h == res.h == h(v["handshake_hash"])

    # transport messages with the split keys: nonce = 32 zero bits || LE64 counter
    i2r, r2i = ini.split()
    assert (i2r, r2i) == res.split()
    counters = {0: 0, 1: 0}
    for n, m in enumerate(msgs[2:]):
        who = n % 2
        key = i2r if who == 0 else r2i
        ct = crypto.seal(key, noise.aead_nonce(counters[who]), h(m["payload"]))
        assert ct == h(m["ciphertext"])
        counters[who] += 1


def test_ikpsk2_bad_tag_detected(crypto):
    from vpncrypt.crypto import AuthenticationError

    v = _vector("Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s")
    h = bytes.fromhex
    r_s = h(v["resp_static"])
    r_pub = keys.public_from_private(r_s)
    ct = bytearray(h(v["messages"][0]["ciphertext"]))
    ct[40] ^= 1
    st = hs.init_state(v["protocol_name"].encode(), h(v["resp_prologue"]), r_pub, crypto)
    with pytest.raises(AuthenticationError):
        hs.ik_responder_read_static(st, r_s, bytes(ct[:32]), bytes(ct[32:80]))


def test_hmac_and_kdf_definitions():
    key, data = b"k" * 32, b"some input"
    assert noise.HMAC(key, data) == hmac.new(key, data, hashlib.blake2s).digest()
    t0 = noise.HMAC(key, data)
    t1 = noise.HMAC(t0, b"\x01")
    t2 = noise.HMAC(t0, t1 + b"\x02")
    t3 = noise.HMAC(t0, t2 + b"\x03")
    assert noise.KDF1(key, data) == t1
    assert noise.KDF2(key, data) == (t1, t2)
    assert noise.KDF3(key, data) == (t1, t2, t3)
    assert noise.MAC(key, data) == hashlib.blake2s(data, key=key, digest_size=16).digest()
    assert noise.HASH(b"a", b"b") == hashlib.blake2s(b"ab").digest()


def test_wireguard_initial_chaining_key_and_hash():
    # Ci = HASH(CONSTRUCTION); Hi = HASH(Ci || IDENTIFIER)
    ck = hashlib.blake2s(b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s").digest()
    st = noise.SymmetricState(noise.CONSTRUCTION, None)
    assert st.ck == ck
    st.mix_hash(noise.IDENTIFIER)
    assert st.h == hashlib.blake2s(ck + b"WireGuard v1 zx2c4 Jason@zx2c4.com").digest()
    assert noise.LABEL_MAC1 == b"mac1----" and noise.LABEL_COOKIE == b"cookie--"


def test_tai64n():
    ts = noise.tai64n(1_700_000_000.25)
    assert len(ts) == 12
    assert int.from_bytes(ts[:8], "big") == 0x400000000000000A + 1_700_000_000
    assert int.from_bytes(ts[8:], "big") == 234_881_024  # 0.25 s whitened: 14 x 2^24 ns
    assert noise.tai64n(1.0) < noise.tai64n(1.5) < noise.tai64n(2.0)
