"""Fixtures for the crypto suite: every test that takes `impl` runs once per ChaCha
kernel this machine can run, `poly_impl` once per Poly1305 kernel, and `backend`
once per backend (native, pynacl) and once more for the native key objects
(AEAD(key) / XAEAD(key)) behind the same interface."""

import os

import pytest

import vpncrypt.crypto as vc

# Lengths for the guard-page tests (the arm64 run under qemu uses 700).
GUARD_MAX = int(os.environ.get("VPNCRYPT_GUARD_MAX", "600"))


def _pinned(request, active, use):
    """Run the test on kernel request.param, then put the one before back."""
    before = active()
    use(request.param)
    yield request.param
    use(before)


@pytest.fixture(params=vc.implementations())
def impl(request):
    yield from _pinned(request, vc.active_implementation, vc.use_implementation)


@pytest.fixture(params=vc.poly1305_implementations())
def poly_impl(request):
    yield from _pinned(request, vc.active_poly1305_implementation, vc.use_poly1305_implementation)


def _kernel_pairs():
    """Each ChaCha kernel with the default Poly1305, and each other Poly1305 kernel
    with the default ChaCha: every kernel runs through the AEAD at least once."""
    chacha, poly = vc.implementations(), vc.poly1305_implementations()
    dc, dp = vc.active_implementation(), vc.active_poly1305_implementation()
    pairs = [(c, dp) for c in chacha] + [(dc, p) for p in poly if p != dp]
    return pairs


@pytest.fixture(params=_kernel_pairs(), ids=lambda p: f"{p[0]}+{p[1]}")
def kernels(request):
    before = vc.active_implementation(), vc.active_poly1305_implementation()
    vc.use_implementation(request.param[0])
    vc.use_poly1305_implementation(request.param[1])
    yield request.param
    vc.use_implementation(before[0])
    vc.use_poly1305_implementation(before[1])


class KeyObjects:
    """vpncrypt.crypto.AEAD / XAEAD behind the backend interface: each call makes
    the key object, so a bad key fails the same way (and first) as with the
    module functions; the batch forms are the native backend's."""

    name = "key-objects"
    _EMPTY = b""

    def seal(self, key, nonce, plaintext, aad=_EMPTY):
        return vc.AEAD(key).seal(nonce, plaintext, aad)

    def open(self, key, nonce, sealed, aad=_EMPTY):
        return vc.AEAD(key).open(nonce, sealed, aad)

    def xseal(self, key, nonce, plaintext, aad=_EMPTY):
        return vc.XAEAD(key).seal(nonce, plaintext, aad)

    def xopen(self, key, nonce, sealed, aad=_EMPTY):
        return vc.XAEAD(key).open(nonce, sealed, aad)

    def seal_batch(self, *args):
        return vc.get_backend("native").seal_batch(*args)

    def open_batch(self, *args):
        return vc.get_backend("native").open_batch(*args)


@pytest.fixture(params=vc.backends() + ["key-objects"])
def backend(request):
    return KeyObjects() if request.param == "key-objects" else vc.get_backend(request.param)


@pytest.fixture
def rng():
    import random

    return random.Random(0x5EED)


def rbytes(rng, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


@pytest.fixture(params=vc.nh_implementations())
def nh_impl(request):
    yield from _pinned(request, vc.active_nh_implementation, vc.use_nh_implementation)
