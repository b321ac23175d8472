"""Known answers: RFC 8439, draft-irtf-cfrg-xchacha, reduced-round ChaCha, and the
Wycheproof ChaCha20-Poly1305 / XChaCha20-Poly1305 suites, on every kernel."""
import json
import pathlib

import pytest

import vpncrypt.crypto as vc
from tests.crypto import known_answers as ka

VECTORS = pathlib.Path(__file__).resolve().parent.parent / "vectors"


def test_block_2_3_2(impl):
    v = ka.BLOCK_2_3_2
    assert vc.chacha20_xor(v["key"], v["nonce"], bytes(64), v["counter"]) == v["keystream"]


def test_encryption_2_4_2(impl):
    v = ka.ENC_2_4_2
    assert vc.chacha20_xor(v["key"], v["nonce"], v["plaintext"], v["counter"]) == v["ciphertext"]
    assert vc.chacha20_xor(v["key"], v["nonce"], v["ciphertext"], v["counter"]) == v["plaintext"]


@pytest.mark.parametrize("v", ka.BLOCKS_A_1)
def test_blocks_a_1(impl, v):
    assert vc.chacha20_xor(v["key"], v["nonce"], bytes(64), v["counter"]) == v["keystream"]


@pytest.mark.parametrize("rounds", [8, 12, 20])
def test_reduced_rounds(impl, rounds):
    assert vc.chacha20_xor(bytes(32), bytes(12), bytes(64), 0, rounds) == ka.REDUCED_ROUNDS_ZERO[rounds]


@pytest.mark.parametrize("v", [ka.POLY_2_5_2, *ka.POLY_A_3])
def test_poly1305(poly_impl, v):
    assert vc.poly1305(v["key"], v["message"]) == v["tag"]


def test_poly1305_keygen_2_6_2(impl):
    v = ka.KEYGEN_2_6_2
    assert vc.chacha20_xor(v["key"], v["nonce"], bytes(32), 0) == v["otk"]


def test_aead_2_8_2(kernels, backend):
    v = ka.AEAD_2_8_2
    sealed = backend.seal(v["key"], v["nonce"], v["plaintext"], v["aad"])
    assert sealed == v["ciphertext"] + v["tag"]
    assert backend.open(v["key"], v["nonce"], sealed, v["aad"]) == v["plaintext"]


def test_hchacha20_2_2_1(impl):
    v = ka.HCHACHA_2_2_1
    assert vc.hchacha20(v["key"], v["nonce"]) == v["out"]


def _wycheproof(name):
    data = json.loads((VECTORS / name).read_text())
    for group in data["testGroups"]:
        for t in group["tests"]:
            yield group, t


def _cases(name, nonce_bits):
    out = []
    for group, t in _wycheproof(name):
        if group["ivSize"] != nonce_bits or group["keySize"] != 256 or group["tagSize"] != 128:
            continue
        out.append(pytest.param(t, id=f"tc{t['tcId']}"))
    return out


def _check(backend, seal, open_, t):
    key, iv = bytes.fromhex(t["key"]), bytes.fromhex(t["iv"])
    aad, msg = bytes.fromhex(t["aad"]), bytes.fromhex(t["msg"])
    sealed = bytes.fromhex(t["ct"]) + bytes.fromhex(t["tag"])
    if t["result"] == "valid":
        assert seal(key, iv, msg, aad) == sealed
        assert open_(key, iv, sealed, aad) == msg
    else:
        with pytest.raises(vc.AuthenticationError):
            open_(key, iv, sealed, aad)


@pytest.mark.parametrize("t", _cases("chacha20_poly1305_test.json", 96))
def test_wycheproof_chacha20_poly1305(kernels, backend, t):
    _check(backend, backend.seal, backend.open, t)


@pytest.mark.parametrize("t", _cases("xchacha20_poly1305_test.json", 192))
def test_wycheproof_xchacha20_poly1305(kernels, backend, t):
    _check(backend, backend.xseal, backend.xopen, t)


def test_wycheproof_wrong_nonce_sizes_are_refused(backend):
    """Wycheproof's cases with other nonce sizes must be refused as bad arguments."""
    refused = 0
    for group, t in _wycheproof("chacha20_poly1305_test.json"):
        if group["ivSize"] == 96:
            continue
        with pytest.raises(ValueError, match="nonce must be 12 bytes"):
            backend.seal(bytes.fromhex(t["key"]), bytes.fromhex(t["iv"]), b"x")
        refused += 1
    assert refused > 0
