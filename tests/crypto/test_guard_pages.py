"""No kernel reads or writes a byte outside its buffers: every length from 0 to
GUARD_MAX, with buffers that end exactly at a PROT_NONE page and buffers that
start right after one, separate and in place."""

import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto import reference
from tests.crypto.conftest import GUARD_MAX, rbytes
from tests.crypto.guarded import Guarded
from tests.crypto.spans import OPEN_SPANS


@pytest.fixture
def pages():
    src, dst = Guarded(), Guarded()
    yield src, dst
    src.close()
    dst.close()


def test_stream_against_guards(impl, pages, rng):
    src, dst = pages
    key, nonce = rbytes(rng, 32), rbytes(rng, 12)
    k, n = ffi.from_buffer(key), ffi.from_buffer(nonce)
    full = reference.chacha_xor(key, nonce, bytes(GUARD_MAX), 7)
    for length in range(GUARD_MAX + 1):
        data = rbytes(rng, length)
        want = bytes(a ^ b for a, b in zip(data, full))
        for place_src, place_dst in (("tail", "tail"), ("head", "head"), ("tail", "head"), ("head", "tail")):
            s = getattr(src, place_src)(length, data)
            d = getattr(dst, place_dst)(length)
            assert lib.vc_chacha20_xor(d, s, length, k, n, 7, 20) == 0
            assert Guarded.read(d, length) == want, (length, place_src, place_dst)
        # in place, against each guard
        for place in ("tail", "head"):
            s = getattr(src, place)(length, data)
            assert lib.vc_chacha20_xor(s, s, length, k, n, 7, 20) == 0
            assert Guarded.read(s, length) == want, (length, place, "in place")


def test_aead_against_guards(kernels, pages, rng):
    src, dst = pages
    key, nonce = rbytes(rng, 32), rbytes(rng, 12)
    k, n = ffi.from_buffer(key), ffi.from_buffer(nonce)
    tagbuf = Guarded()
    try:
        for length in range(GUARD_MAX + 1):
            data, aad = rbytes(rng, length), rbytes(rng, length % 37)
            want = vc.seal(key, nonce, data, aad)
            a = dst.head(len(aad), aad) if aad else ffi.NULL
            s = src.tail(length, data)
            d = dst.tail(length) if not aad else src.head(length)
            tag = tagbuf.tail(16)
            assert lib.vc_aead_seal(d, tag, s, length, a, len(aad), k, n) == 0
            assert Guarded.read(d, length) + Guarded.read(tag, 16) == want, length
            # open from the guarded ciphertext into a guarded plaintext buffer
            out = src.tail(length)
            assert lib.vc_aead_open(out, d, length, tag, a, len(aad), k, n) == 0
            assert Guarded.read(out, length) == data, length
            # poly1305 over a guarded message
            msg = src.tail(length, data)
            t = ffi.new("uint8_t[16]")
            lib.vc_poly1305(t, msg, length, k)
            assert ffi.buffer(t)[:] == vc.poly1305(key, data), length
    finally:
        tagbuf.close()


def test_xaead_against_guards(impl, pages, rng):
    src, dst = pages
    key, nonce = rbytes(rng, 32), rbytes(rng, 24)
    k, n = ffi.from_buffer(key), ffi.from_buffer(nonce)
    for length in range(0, GUARD_MAX + 1, 3):
        data = rbytes(rng, length)
        want = vc.xseal(key, nonce, data)
        s, d = src.tail(length, data), dst.tail(length)
        tag = ffi.new("uint8_t[16]")
        assert lib.vc_xaead_seal(d, tag, s, length, ffi.NULL, 0, k, n) == 0
        assert Guarded.read(d, length) + ffi.buffer(tag)[:] == want


def test_open_spans_against_guards(kernels, rng):
    """Opening reads and writes nothing outside its buffers at the lengths where
    the scratch and the verify-first rest meet: ciphertext,
    tag and plaintext each against a guard page, separate and in place, with
    and without AAD; a forged packet too."""
    src, dst = Guarded(data_pages=2), Guarded(data_pages=2)
    try:
        for length in OPEN_SPANS:
            key, nonce, data = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, length)
            k, n = ffi.from_buffer(key), ffi.from_buffer(nonce)
            for aad in (b"", rbytes(rng, 21)):
                sealed = vc.seal(key, nonce, data, aad)
                a = ffi.from_buffer(aad) if aad else ffi.NULL
                for place_ct, place_pt in (("tail", "head"), ("head", "tail")):
                    c = getattr(src, place_ct)(length + 16, sealed)
                    out = getattr(dst, place_pt)(length)
                    assert lib.vc_aead_open(out, c, length, c + length, a, len(aad), k, n) == 0
                    assert Guarded.read(out, length) == data, (length, place_ct)
                    assert lib.vc_aead_open_attached(out, c, length + 16, a, len(aad), k, n) == 0
                    assert Guarded.read(out, length) == data, (length, place_ct, "attached")
                # in place, the sealed packet ending at the guard
                c = src.tail(length + 16, sealed)
                assert lib.vc_aead_open(c, c, length, c + length, a, len(aad), k, n) == 0
                assert Guarded.read(c, length) == data, (length, "in place")
                # forged: the output against the guard comes back zeroed
                bad = bytearray(sealed)
                bad[-1] ^= 1
                c = src.head(length + 16, bytes(bad))
                out = dst.tail(length, b"\xaa" * length)
                assert lib.vc_aead_open(out, c, length, c + length, a, len(aad), k, n) == lib.VC_ERR_AUTH
                assert Guarded.read(out, length) == bytes(length), (length, "forged")
    finally:
        src.close()
        dst.close()
