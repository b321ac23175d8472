"""Known answers: RFC 8439, draft-irtf-cfrg-xchacha, reduced-round ChaCha, and the
Wycheproof ChaCha20-Poly1305 / XChaCha20-Poly1305 suites, on every kernel."""

import json
import pathlib

import pytest

import vpncrypt.crypto as vc
from tests.crypto import known_answers as ka

VECTORS = pathlib.Path(__file__).resolve().parent.parent / "vectors"
KNOWN = ka.load()


def _known(group):
    return [pytest.param(v, id=v["source"]) for v in KNOWN[group]]


@pytest.mark.parametrize("v", _known("chacha20_block") + _known("chacha_reduced_rounds"))
def test_chacha_block(impl, v):
    rounds = v.get("rounds", 20)
    assert vc.chacha20_xor(v["key"], v["nonce"], bytes(64), v["counter"], rounds) == v["keystream"]


@pytest.mark.parametrize("v", _known("chacha20_encrypt"))
def test_chacha20_encryption(impl, v):
    assert vc.chacha20_xor(v["key"], v["nonce"], v["plaintext"], v["counter"]) == v["ciphertext"]
    assert vc.chacha20_xor(v["key"], v["nonce"], v["ciphertext"], v["counter"]) == v["plaintext"]


@pytest.mark.parametrize("v", _known("poly1305"))
def test_poly1305(poly_impl, v):
    assert vc.poly1305(v["key"], v["message"]) == v["tag"]


@pytest.mark.parametrize("v", _known("poly1305_key_generation"))
def test_poly1305_key_generation(impl, v):
    assert vc.chacha20_xor(v["key"], v["nonce"], bytes(32), 0) == v["otk"]


@pytest.mark.parametrize("v", _known("aead"))
def test_aead(kernels, backend, v):
    sealed = backend.seal(v["key"], v["nonce"], v["plaintext"], v["aad"])
    assert sealed == v["ciphertext"] + v["tag"]
    assert backend.open(v["key"], v["nonce"], sealed, v["aad"]) == v["plaintext"]


@pytest.mark.parametrize("v", _known("hchacha20"))
def test_hchacha20(impl, v):
    assert vc.hchacha20(v["key"], v["nonce"]) == v["out"]


def test_every_known_answer_group_is_run():
    """A group added to the file without a test here would pass unseen."""
    run = {"chacha20_block", "chacha_reduced_rounds", "chacha20_encrypt", "poly1305"}
    run |= {"poly1305_key_generation", "aead", "hchacha20"}
    assert set(KNOWN) == run
    assert all(KNOWN[g] for g in run)


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
