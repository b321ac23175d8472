"""Property tests: random lengths, offsets into larger buffers, and in-place use."""

from hypothesis import given, settings, strategies as st

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto import reference

KEYS = st.binary(min_size=32, max_size=32)
NONCES = st.binary(min_size=12, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    key=KEYS,
    nonce=NONCES,
    data=st.binary(max_size=1500),
    pre=st.integers(0, 63),
    counter=st.integers(0, 2**20),
    in_place=st.booleans(),
    rounds=st.sampled_from([8, 12, 20]),
)
def test_stream_at_any_offset(key, nonce, data, pre, counter, in_place, rounds):
    want = reference.chacha_xor(key, nonce, data, counter, rounds) if len(data) < 400 else None
    results = set()
    for impl in vc.implementations():
        vc.use_implementation(impl)
        buf = bytearray(pre) + bytearray(data) + bytearray(b"\xee" * 5)
        p = ffi.from_buffer(buf)
        if in_place:
            src = dst = p + pre
        else:
            out = bytearray(b"\xdd" * (len(data) + pre + 5))
            dst = ffi.from_buffer(out) + pre
            src = p + pre
        assert (
            lib.vc_chacha20_xor(
                dst, src, len(data), ffi.from_buffer(key), ffi.from_buffer(nonce), counter, rounds
            )
            == 0
        )
        res_buf = buf if in_place else out
        assert res_buf[:pre] == (bytes(pre) if in_place else b"\xdd" * pre)
        assert res_buf[pre + len(data) :] == (b"\xee" * 5 if in_place else b"\xdd" * 5)
        results.add(bytes(res_buf[pre : pre + len(data)]))
    vc.use_implementation(vc.implementations()[-1])
    assert len(results) == 1
    if want is not None:
        assert results.pop() == want


@settings(max_examples=150, deadline=None)
@given(key=KEYS, nonce=NONCES, data=st.binary(max_size=3000), aad=st.binary(max_size=64))
def test_seal_open_roundtrip_both_backends(key, nonce, data, aad):
    native, sodium = vc.get_backend("native"), vc.get_backend("pynacl")
    sealed = native.seal(key, nonce, data, aad)
    assert sealed == sodium.seal(key, nonce, data, aad)
    assert sodium.open(key, nonce, sealed, aad) == data
    assert native.open(key, nonce, sealed, aad) == data


@settings(max_examples=100, deadline=None)
@given(key=KEYS, data=st.binary(max_size=2000))
def test_poly1305_any_kernel_same_tag(key, data):
    tags = set()
    for impl in vc.poly1305_implementations():
        vc.use_poly1305_implementation(impl)
        tags.add(vc.poly1305(key, data))
    vc.use_poly1305_implementation(vc.poly1305_implementations()[-1])
    assert len(tags) == 1
    if len(data) < 600:
        assert tags == {reference.poly1305(key, data)}
