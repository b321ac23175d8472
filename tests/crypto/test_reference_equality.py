"""Byte-for-byte equality with the outside references (libsodium through pynacl,
OpenSSL through cryptography) at every length, in both directions."""

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from nacl import bindings as nb

import vpncrypt.crypto as vc
from tests.crypto import reference
from tests.crypto.conftest import rbytes

LENGTHS = list(range(0, 2049)) + [4095, 4096, 4097, 8191, 65536]


def test_aead_equals_pynacl_every_length(kernels, rng):
    """Ours opens libsodium's output, libsodium opens ours, and both are equal."""
    for n in LENGTHS:
        key, nonce = rbytes(rng, 32), rbytes(rng, 12)
        aad, msg = rbytes(rng, rng.randrange(0, 40)), rbytes(rng, n)
        theirs = nb.crypto_aead_chacha20poly1305_ietf_encrypt(msg, aad, nonce, key)
        ours = vc.seal(key, nonce, msg, aad)
        assert ours == theirs, f"length {n}"
        assert vc.open(key, nonce, theirs, aad) == msg, f"length {n}"
        assert nb.crypto_aead_chacha20poly1305_ietf_decrypt(ours, aad, nonce, key) == msg


def test_xaead_equals_pynacl(kernels, rng):
    for n in list(range(0, 700)) + [1472, 4096, 65536]:
        key, nonce = rbytes(rng, 32), rbytes(rng, 24)
        aad, msg = rbytes(rng, rng.randrange(0, 40)), rbytes(rng, n)
        theirs = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(msg, aad, nonce, key)
        assert vc.xseal(key, nonce, msg, aad) == theirs, f"length {n}"
        assert vc.xopen(key, nonce, theirs, aad) == msg


def _openssl_stream(key, nonce, data, counter):
    c = Cipher(algorithms.ChaCha20(key, counter.to_bytes(4, "little") + nonce), None).encryptor()
    return c.update(data)


@pytest.mark.parametrize("counter", [0, 1])
def test_stream_equals_openssl_and_generic(impl, rng, counter):
    for n in range(0, 2049):
        key, nonce, data = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, n)
        ours = vc.chacha20_xor(key, nonce, data, counter)
        assert ours == _openssl_stream(key, nonce, data, counter), f"length {n}"
        vc.use_implementation("generic")
        try:
            assert vc.chacha20_xor(key, nonce, data, counter) == ours, f"length {n}"
        finally:
            vc.use_implementation(impl)


def test_stream_at_counter_wrap(impl, rng):
    """From 2^32 - 5 exactly five blocks fit; one byte more is refused, never wrapped."""
    start = 2**32 - 5
    key, nonce = rbytes(rng, 32), rbytes(rng, 12)
    for n in range(0, 5 * 64 + 1):
        data = rbytes(rng, n)
        assert vc.chacha20_xor(key, nonce, data, start) == _openssl_stream(key, nonce, data, start)[:n]
    for n in (5 * 64 + 1, 6 * 64, 2048):
        with pytest.raises(vc.CounterOverflowError):
            vc.chacha20_xor(key, nonce, bytes(n), start)
    # The very last block of the counter space works on its own.
    last = vc.chacha20_xor(key, nonce, bytes(64), 2**32 - 1)
    assert last == reference.block(key, 2**32 - 1, nonce)
    with pytest.raises(vc.CounterOverflowError):
        vc.chacha20_xor(key, nonce, bytes(65), 2**32 - 1)


@pytest.mark.parametrize("rounds", [8, 12])
def test_reduced_rounds_equal_reference(impl, rng, rounds):
    for n in list(range(0, 700, 7)) + [1472, 2048]:
        key, nonce, data = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, n)
        counter = rng.randrange(0, 1000)
        assert vc.chacha20_xor(key, nonce, data, counter, rounds) == reference.chacha_xor(
            key, nonce, data, counter, rounds
        ), f"length {n}"


@pytest.mark.parametrize("rounds", [8, 12, 20])
def test_hchacha_equals_reference(impl, rng, rounds):
    for _ in range(50):
        key, nonce = rbytes(rng, 32), rbytes(rng, 16)
        assert vc.hchacha20(key, nonce, rounds) == reference.hchacha(key, nonce, rounds)


def test_poly1305_equals_reference_every_length(poly_impl, rng):
    """pynacl has no bare Poly1305, so the pure-Python reference stands in (the
    AEAD tests above check the MAC against libsodium as part of every tag)."""
    for n in list(range(0, 1200)) + [2048, 4095, 4096, 4097, 8191, 65536]:
        key, msg = rbytes(rng, 32), rbytes(rng, n)
        assert vc.poly1305(key, msg) == reference.poly1305(key, msg), f"length {n}"


def test_poly1305_extreme_values(poly_impl):
    """All-ones messages and the largest clamped r stress every carry."""
    key = bytes.fromhex("ffffff0ffcffff0ffcffff0ffcffff0f") + b"\xff" * 16
    for n in list(range(0, 300)) + [1488, 4096]:
        msg = b"\xff" * n
        assert vc.poly1305(key, msg) == reference.poly1305(key, msg), f"length {n}"
