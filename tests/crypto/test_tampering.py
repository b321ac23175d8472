"""Any change to ciphertext, tag, nonce or AAD makes open fail, and a failed open
leaves no plaintext (and no keystream) in the output buffer."""

import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto.conftest import rbytes
from tests.crypto.guarded import Guarded
from tests.crypto.spans import BOUNDARIES


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


def _corruptions(length):
    """Byte positions to corrupt in ciphertext || tag: the first and last bytes of
    the ciphertext, one inside the stretch decrypted after verification, and
    the tag."""
    spots = {length, length + 15}
    if length:
        spots |= {0, length - 1, length // 2}
    return sorted(spots)


@pytest.mark.parametrize("length", BOUNDARIES)
def test_failed_open_writes_no_plaintext(kernels, rng, length):
    key, nonce, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, length)
    good = vc.seal(key, nonce, msg)
    k, n = ffi.from_buffer(key), ffi.from_buffer(nonce)
    for spot in _corruptions(length):
        sealed = bytearray(good)
        sealed[spot] ^= 0x20
        # separate output buffer, pre-filled: it must come back all zero
        out = ffi.new("uint8_t[]", length + 1)
        ffi.memmove(out, b"\xaa" * (length + 1), length + 1)
        src = ffi.from_buffer(sealed)
        rc = lib.vc_aead_open(out, src, length, src + length, ffi.NULL, 0, k, n)
        assert rc == lib.VC_ERR_AUTH
        assert ffi.buffer(out)[:] == bytes(length) + b"\xaa", (length, spot)
        # in place: the buffer must still hold the ciphertext, untouched by keystream
        before = bytes(sealed)
        rc = lib.vc_aead_open(src, src, length, src + length, ffi.NULL, 0, k, n)
        assert rc == lib.VC_ERR_AUTH
        assert bytes(sealed) == before, (length, spot)


@pytest.mark.parametrize("length", BOUNDARIES)
def test_open_in_place_at_boundaries(kernels, rng, length):
    """A good packet opened in place, at every span boundary, with and without AAD."""
    key, nonce, msg, aad = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, length), rbytes(rng, 5)
    for a in (b"", aad):
        buf = bytearray(vc.seal(key, nonce, msg, a)) + b"\x55"
        p = ffi.from_buffer(buf)
        ad = ffi.from_buffer(a) if a else ffi.NULL
        assert (
            lib.vc_aead_open(
                p, p, length, p + length, ad, len(a), ffi.from_buffer(key), ffi.from_buffer(nonce)
            )
            == 0
        )
        assert bytes(buf[:length]) == msg and buf[-1] == 0x55


@pytest.mark.parametrize("length", [1, 64, 193, 449, 961, 1472, 4097])
def test_failed_in_place_open_writes_nothing(kernels, rng, length):
    """In place, a forged packet is not written at all: the packet sits on a
    read-only page, so any store into it (even of the same bytes) would kill
    the process."""
    import mmap

    key, nonce = rbytes(rng, 32), rbytes(rng, 12)
    sealed = bytearray(vc.seal(key, nonce, rbytes(rng, length)))
    sealed[length // 2] ^= 1
    g = Guarded(data_pages=(len(sealed) + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
    try:
        p = g.tail(len(sealed), bytes(sealed))
        g.protect_data_read_only()
        rc = lib.vc_aead_open(
            p, p, length, p + length, ffi.NULL, 0, ffi.from_buffer(key), ffi.from_buffer(nonce)
        )
        assert rc == lib.VC_ERR_AUTH
        assert Guarded.read(p, len(sealed)) == bytes(sealed)
    finally:
        g.close()


@pytest.mark.parametrize("length", [0, 63, 449, 961, 1472])
def test_failed_open_every_form(kernels, rng, length):
    """XChaCha, the attached, item-batch and packed forms, and the Python calls
    give no plaintext for a forged packet either."""
    key, nonce, xnonce = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, 24)
    msg = rbytes(rng, length)
    k = ffi.from_buffer(key)
    for form in ("xaead", "attached", "batch", "packed"):
        sealed = bytearray(vc.xseal(key, xnonce, msg) if form == "xaead" else vc.seal(key, nonce, msg))
        sealed[-1] ^= 1
        out = ffi.new("uint8_t[]", length + 1)
        ffi.memmove(out, b"\xaa" * (length + 1), length + 1)
        src = ffi.from_buffer(sealed)
        if form == "xaead":
            rc = lib.vc_xaead_open(out, src, length, src + length, ffi.NULL, 0, k, ffi.from_buffer(xnonce))
        elif form == "attached":
            rc = lib.vc_aead_open_attached(out, src, length + 16, ffi.NULL, 0, k, ffi.from_buffer(nonce))
        elif form == "batch":
            item = ffi.new("vc_aead_item[]", 1)
            item[0].key, item[0].nonce = k, ffi.from_buffer(nonce)
            item[0].input, item[0].in_len, item[0].out = src, length + 16, out
            assert lib.vc_aead_open_batch(item, 1) == 0
            rc = item[0].status
        else:
            status = ffi.new("int32_t[]", 1)
            lens = ffi.new("uint32_t[]", [length + 16])
            assert (
                lib.vc_aead_open_packed(out, src, lens, 1, ffi.from_buffer(nonce), ffi.NULL, 0, k, status)
                == 0
            )
            rc = status[0]
        assert rc == lib.VC_ERR_AUTH, form
        assert ffi.buffer(out)[:] == bytes(length) + b"\xaa", form
    with pytest.raises(vc.AuthenticationError):
        vc.open(key, nonce, bytes(sealed))
    with pytest.raises(vc.AuthenticationError):
        vc.AEAD(key).open(nonce, bytes(sealed))


def test_open_in_place_succeeds(kernels, rng):
    key, nonce, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, 777)
    buf = bytearray(vc.seal(key, nonce, msg))
    p = ffi.from_buffer(buf)
    assert (
        lib.vc_aead_open(p, p, 777, p + 777, ffi.NULL, 0, ffi.from_buffer(key), ffi.from_buffer(nonce)) == 0
    )
    assert bytes(buf[:777]) == msg
