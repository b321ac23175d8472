"""Any change to ciphertext, tag, nonce or AAD makes open fail, and a failed open
leaves no plaintext (and no keystream) in the output buffer."""
import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto.conftest import rbytes


def _flip(b: bytes, bit: int) -> bytes:
    out = bytearray(b)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@pytest.mark.parametrize("aad_len", [0, 13])
@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 200])
def test_every_bit_flip_fails(kernels, backend, rng, length, aad_len):
    key, nonce, aad, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, aad_len), rbytes(rng, length)
    sealed = backend.seal(key, nonce, msg, aad)
    for bit in range(len(sealed) * 8):
        with pytest.raises(vc.AuthenticationError):
            backend.open(key, nonce, _flip(sealed, bit), aad)
    for bit in range(96):
        with pytest.raises(vc.AuthenticationError):
            backend.open(key, _flip(nonce, bit), sealed, aad)
    for bit in range(len(aad) * 8):
        with pytest.raises(vc.AuthenticationError):
            backend.open(key, nonce, sealed, _flip(aad, bit))
    with pytest.raises(vc.AuthenticationError):
        backend.open(key, nonce, sealed, aad + b"\0")
    with pytest.raises(vc.AuthenticationError):
        backend.open(_flip(key, 0), nonce, sealed, aad)


def test_xaead_bit_flips_fail(kernels, backend, rng):
    key, nonce, msg = rbytes(rng, 32), rbytes(rng, 24), rbytes(rng, 100)
    sealed = backend.xseal(key, nonce, msg)
    for bit in range(0, len(sealed) * 8, 5):
        with pytest.raises(vc.AuthenticationError):
            backend.xopen(key, nonce, _flip(sealed, bit))
    for bit in range(192):
        with pytest.raises(vc.AuthenticationError):
            backend.xopen(key, _flip(nonce, bit), sealed)


@pytest.mark.parametrize("length", [1, 16, 64, 100, 320, 1472])
def test_failed_open_writes_no_plaintext(kernels, rng, length):
    key, nonce, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, length)
    sealed = bytearray(vc.seal(key, nonce, msg))
    sealed[-1] ^= 1
    # separate output buffer, pre-filled: it must come back all zero
    out = ffi.new("uint8_t[]", length)
    ffi.memmove(out, b"\xaa" * length, length)
    src = ffi.from_buffer(sealed)
    rc = lib.vc_aead_open(out, src, length, src + length, ffi.NULL, 0,
                          ffi.from_buffer(key), ffi.from_buffer(nonce))
    assert rc == lib.VC_ERR_AUTH
    assert ffi.buffer(out)[:] == bytes(length)
    # in place: the buffer must still hold the ciphertext, untouched by keystream
    before = bytes(sealed)
    rc = lib.vc_aead_open(src, src, length, src + length, ffi.NULL, 0,
                          ffi.from_buffer(key), ffi.from_buffer(nonce))
    assert rc == lib.VC_ERR_AUTH
    assert bytes(sealed) == before


def test_open_in_place_succeeds(kernels, rng):
    key, nonce, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, 777)
    buf = bytearray(vc.seal(key, nonce, msg))
    p = ffi.from_buffer(buf)
    assert lib.vc_aead_open(p, p, 777, p + 777, ffi.NULL, 0, ffi.from_buffer(key), ffi.from_buffer(nonce)) == 0
    assert bytes(buf[:777]) == msg
