"""NHPoly1305 and Adiantum never touch a byte outside their buffers: the NH
kernels read 16-byte units and 32-byte key windows, so the key (1088 bytes)
and the message are put right against PROT_NONE pages, at every length up to
2 NH messages and a piece (NHPoly1305) and up to GUARD_MAX + 16 (Adiantum),
separate and in place.  A stray read or write kills the test process."""

import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto.conftest import GUARD_MAX, rbytes
from tests.crypto.guarded import Guarded


@pytest.fixture
def pages():
    g = [Guarded(), Guarded(), Guarded()]
    yield g
    for p in g:
        p.close()


def test_nhpoly1305_against_guards(nh_impl, pages, rng):
    kpage, mpage, _ = pages
    key = rbytes(rng, 1088)
    k = kpage.tail(1088, key)
    out = ffi.new("uint8_t[16]")
    data = rbytes(rng, 2100)
    for length in list(range(0, 1100)) + list(range(2030, 2100)):
        want = vc.nhpoly1305(key, data[:length])
        for place in ("tail", "head"):
            m = getattr(mpage, place)(length, data[:length])
            lib.vc_nhpoly1305(out, m, length, k)
            assert ffi.buffer(out)[:] == want, (length, place)


def test_adiantum_against_guards(nh_impl, pages, rng):
    src, dst, tpage = pages
    key = rbytes(rng, 32)
    a = vc.Adiantum(key)
    kobj = ffi.new("vc_adiantum_key *")
    assert lib.vc_adiantum_setkey(kobj, ffi.from_buffer(key), 12) == 0
    tweak_full = rbytes(rng, 32)
    for length in range(16, GUARD_MAX + 17):
        data = rbytes(rng, length)
        tl = length % 33
        tweak = tweak_full[:tl]
        t = tpage.tail(tl, tweak)
        want = a.encrypt(tweak, data)
        for place_src, place_dst in (("tail", "tail"), ("head", "head"), ("tail", "head")):
            s = getattr(src, place_src)(length, data)
            d = getattr(dst, place_dst)(length)
            assert lib.vc_adiantum_encrypt(kobj, d, s, length, t, tl) == 0
            assert Guarded.read(d, length) == want, (length, place_src, place_dst)
            assert lib.vc_adiantum_decrypt(kobj, s, d, length, t, tl) == 0
            assert Guarded.read(s, length) == data, (length, place_src, place_dst, "decrypt")
        for place in ("tail", "head"):  # in place
            s = getattr(src, place)(length, data)
            assert lib.vc_adiantum_encrypt(kobj, s, s, length, t, tl) == 0
            assert Guarded.read(s, length) == want, (length, place, "in place")
            assert lib.vc_adiantum_decrypt(kobj, s, s, length, t, tl) == 0
            assert Guarded.read(s, length) == data, (length, place, "in place decrypt")
    lib.vc_adiantum_wipe(kobj)


def test_adiantum_c_lengths_refused_before_writing(pages):
    """Below 16 bytes or a tweak over 32: VC_ERR_LENGTH and the output untouched."""
    kobj = ffi.new("vc_adiantum_key *")
    assert lib.vc_adiantum_setkey(kobj, ffi.from_buffer(bytes(32)), 12) == 0
    assert lib.vc_adiantum_setkey(kobj, ffi.from_buffer(bytes(32)), 10) == lib.VC_ERR_ROUNDS
    assert lib.vc_adiantum_setkey(kobj, ffi.from_buffer(bytes(32)), 20) == 0
    out = bytearray(b"\xaa" * 64)
    o = ffi.from_buffer(out)
    for fn in (lib.vc_adiantum_encrypt, lib.vc_adiantum_decrypt):
        assert fn(kobj, o, ffi.from_buffer(bytes(15)), 15, ffi.NULL, 0) == lib.VC_ERR_LENGTH
        assert (
            fn(kobj, o, ffi.from_buffer(bytes(16)), 16, ffi.from_buffer(bytes(33)), 33) == lib.VC_ERR_LENGTH
        )
        assert out == b"\xaa" * 64
        assert fn(kobj, o, ffi.from_buffer(bytes(16)), 16, ffi.from_buffer(bytes(32)), 32) == 0
        out[:] = b"\xaa" * 64
