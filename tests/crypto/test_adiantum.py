"""NHPoly1305 and Adiantum: the published vectors (the kernel's testmgr ones
and the Adiantum reference implementation's, tests/vectors/README.md) on every
NH kernel, an independent Python model (tests/crypto/adiantum_model.py), every
kernel against the portable one at every length 16..4200, decrypt(encrypt(x))
== x, and the wide-block property: one changed bit anywhere changes every
16-byte block of the output."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vpncrypt.crypto as vc
from tests.crypto import adiantum_model as model
from tests.crypto.conftest import rbytes

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
KERNEL = json.loads((VECTORS / "adiantum_nhpoly1305_kernel.json").read_text())
REFERENCE = json.loads((VECTORS / "adiantum_nhpoly1305_reference.json").read_text())
ROUNDS = {"adiantum_xchacha12_aes": 12, "adiantum_xchacha20_aes": 20}


def _h(v, *names):
    return [bytes.fromhex(v[n]) for n in names]


def _adiantum_vectors():
    for source, data in (("kernel", KERNEL), ("reference", REFERENCE)):
        for name, rounds in ROUNDS.items():
            for i, v in enumerate(data[name]):
                yield pytest.param(rounds, v, id=f"{source}-{rounds}-{i}-{len(v['plaintext']) // 2}")


def test_vector_files_cover_the_published_sets():
    """The kernel's six nhpoly1305 vectors and six per Adiantum variant; the
    reference implementation's 30 NHPoly1305 ones and tweaks of 0, 17, 32 bytes."""
    assert len(KERNEL["nhpoly1305"]) == 6
    assert [len(v["plaintext"]) // 2 for v in KERNEL["adiantum_xchacha12_aes"]] == [
        16,
        31,
        128,
        512,
        1536,
        4096,
    ]
    assert len(REFERENCE["nhpoly1305"]) == 30
    assert {len(v["tweak"]) // 2 for v in REFERENCE["adiantum_xchacha20_aes"]} == {0, 17, 32}


def test_nhpoly1305_vectors(nh_impl):
    for v in KERNEL["nhpoly1305"] + REFERENCE["nhpoly1305"]:
        key, msg, want = _h(v, "key", "message", "hash")
        assert vc.nhpoly1305(key, msg) == want, f"length {len(msg)}"
        assert vc.last_nh_kernel() == nh_impl


@pytest.mark.parametrize("rounds,v", list(_adiantum_vectors()))
def test_adiantum_vectors(nh_impl, rounds, v):
    key, tweak, pt, ct = _h(v, "key", "tweak", "plaintext", "ciphertext")
    assert vc.adiantum_encrypt(key, tweak, pt, rounds) == ct
    assert vc.adiantum_decrypt(key, tweak, ct, rounds) == pt
    assert vc.last_nh_kernel() == nh_impl


def test_model_passes_the_vectors():
    """The Python model is itself checked on the published vectors (the short
    ones: it is slow), so that agreeing with it means something."""
    for v in KERNEL["nhpoly1305"]:
        key, msg, want = _h(v, "key", "message", "hash")
        assert model.nhpoly1305(key, msg) == want
    for name, rounds in ROUNDS.items():
        for v in KERNEL[name] + REFERENCE[name]:
            key, tweak, pt, ct = _h(v, "key", "tweak", "plaintext", "ciphertext")
            if len(pt) <= 512:
                assert model.encrypt(key, tweak, pt, rounds) == ct
                assert model.decrypt(key, tweak, ct, rounds) == pt


# Lengths around the NH unit (16), the NH message (1024) and the ChaCha block (64).
MODEL_LENGTHS = [16, 17, 31, 32, 33, 47, 63, 64, 79, 80, 81, 1039, 1040, 1041, 1055, 2064, 2077]


@pytest.mark.parametrize("rounds", [12, 20])
def test_native_equals_model(rng, rounds):
    for n in MODEL_LENGTHS:
        key, pt = rbytes(rng, 32), rbytes(rng, n)
        tweak = rbytes(rng, rng.choice([0, 1, 15, 16, 17, 31, 32]))
        ct = vc.adiantum_encrypt(key, tweak, pt, rounds)
        assert ct == model.encrypt(key, tweak, pt, rounds), f"length {n}, tweak {len(tweak)}"
        assert vc.adiantum_decrypt(key, tweak, ct, rounds) == pt
    for n in [0, 1, 15, 16, 17, 1023, 1024, 1025, 2048, 2063]:
        key, msg = rbytes(rng, 1088), rbytes(rng, n)
        assert vc.nhpoly1305(key, msg) == model.nhpoly1305(key, msg), f"length {n}"


def test_nh_kernel_equals_generic_every_length(nh_impl, rng):
    """NHPoly1305 at every length 0..4200, and the all-ones extremes of the
    64-bit sums (every addition and product at its largest)."""
    key, msg = rbytes(rng, 1088), rbytes(rng, 4200)
    ones = b"\xff" * 4200
    for n in range(0, 4201):
        ours = vc.nhpoly1305(key, msg[:n]), vc.nhpoly1305(ones[:1088], ones[:n])
        vc.use_nh_implementation("generic")
        try:
            assert (vc.nhpoly1305(key, msg[:n]), vc.nhpoly1305(ones[:1088], ones[:n])) == ours, f"length {n}"
        finally:
            vc.use_nh_implementation(nh_impl)


def test_adiantum_kernels_equal_portable_every_length(kernels, nh_impl, rng):
    """Adiantum on each NH kernel with each ChaCha / Poly1305 pairing equals the
    all-portable run (generic NH and ChaCha) at every length 16..4200."""
    key, tweak, msg = rbytes(rng, 32), rbytes(rng, 32), rbytes(rng, 4200)
    a = vc.Adiantum(key, 12)
    ours = [a.encrypt(tweak[: n % 33], msg[:n]) for n in range(16, 4201)]
    chacha, nh = vc.active_implementation(), vc.active_nh_implementation()
    vc.use_implementation("generic")
    vc.use_nh_implementation("generic")
    try:
        for n, got in zip(range(16, 4201), ours):
            assert a.encrypt(tweak[: n % 33], msg[:n]) == got, f"length {n}"
    finally:
        vc.use_implementation(chacha)
        vc.use_nh_implementation(nh)


@pytest.mark.parametrize("rounds", [8, 12, 20])
def test_roundtrip(rng, rounds):
    for n in list(range(16, 300)) + [1024, 1040, 4096, 4111, 65536]:
        key, tweak, pt = rbytes(rng, 32), rbytes(rng, rng.randrange(0, 33)), rbytes(rng, n)
        a = vc.Adiantum(key, rounds)
        ct = a.encrypt(tweak, pt)
        assert len(ct) == n and ct != pt
        assert a.decrypt(tweak, ct) == pt, f"length {n}"


def _blocks_all_differ(a: bytes, b: bytes) -> bool:
    """Every 16-byte block (the last one may be shorter) differs."""
    return all(a[i : i + 16] != b[i : i + 16] for i in range(0, len(a), 16))


@pytest.mark.parametrize("n", [16, 17, 100, 1040, 4096])
def test_one_bit_changes_the_whole_output(rng, n):
    """Adiantum is a wide-block permutation (a tweakable SPRP): flipping one bit
    of the input anywhere (first, middle, last byte; left part and the 16-byte
    right part) or of the tweak changes every block of the output, both ways."""
    key, tweak, pt = rbytes(rng, 32), rbytes(rng, 32), rbytes(rng, n)
    a = vc.Adiantum(key)
    ct = a.encrypt(tweak, pt)
    positions = sorted({0, n // 2, n - 17 if n > 16 else 0, n - 16, n - 1})
    for pos in positions:
        for bit in (0, 7):
            flipped = bytearray(pt)
            flipped[pos] ^= 1 << bit
            assert _blocks_all_differ(a.encrypt(tweak, flipped), ct), f"plaintext byte {pos} bit {bit}"
            flipped = bytearray(ct)
            flipped[pos] ^= 1 << bit
            assert _blocks_all_differ(a.decrypt(tweak, flipped), pt), f"ciphertext byte {pos} bit {bit}"
    for pos in (0, 31):
        t2 = bytearray(tweak)
        t2[pos] ^= 1
        assert _blocks_all_differ(a.encrypt(t2, pt), ct), f"tweak byte {pos}"
    assert _blocks_all_differ(a.encrypt(tweak[:31], pt), ct), "a shorter tweak"
    assert _blocks_all_differ(vc.Adiantum(key, 20).encrypt(tweak, pt), ct), "the other rounds"


def test_module_functions_equal_key_object(rng):
    key, tweak, pt = rbytes(rng, 32), rbytes(rng, 5), rbytes(rng, 333)
    for rounds in (12, 20):
        assert vc.adiantum_encrypt(key, tweak, pt, rounds) == vc.Adiantum(key, rounds).encrypt(tweak, pt)
    assert vc.adiantum_encrypt(key, tweak, pt) == vc.adiantum_encrypt(key, tweak, pt, 12)
    assert vc.adiantum_encrypt(bytearray(key), memoryview(tweak), bytearray(pt)) == vc.adiantum_encrypt(
        key, tweak, pt
    )


def test_arguments():
    a = vc.Adiantum(bytes(32))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        a.encrypt(b"", bytes(15))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        a.decrypt(b"", bytes(15))
    assert len(a.encrypt(b"", bytes(16))) == 16
    with pytest.raises(ValueError, match="at most 32 bytes"):
        a.encrypt(bytes(33), bytes(16))
    assert len(a.encrypt(bytes(32), bytes(16))) == 16
    with pytest.raises(ValueError, match="key must be 32 bytes"):
        vc.Adiantum(bytes(31))
    with pytest.raises(ValueError, match="rounds must be 8, 12 or 20"):
        vc.Adiantum(bytes(32), 10)
    with pytest.raises(TypeError):
        a.encrypt("tweak", bytes(16))
    with pytest.raises(ValueError, match="key must be 1088 bytes"):
        vc.nhpoly1305(bytes(1087), b"")
    with pytest.raises(ValueError, match="key must be 1088 bytes"):
        vc.nhpoly1305(bytes(1089), b"")


def test_without_libcrypto_a_clear_error():
    """AES-256 comes from libcrypto, loaded at run time: without it Adiantum
    fails with a message that names it, and NHPoly1305 still works."""
    code = (
        "import vpncrypt.crypto as c\n"
        "print(c.adiantum_aes_available(), c.nhpoly1305(bytes(1088), bytes(16)).hex())\n"
        "try:\n    c.adiantum_encrypt(bytes(32), b'', bytes(16))\n"
        "except RuntimeError as e:\n    print('error:', e)\n"
    )
    env = dict(os.environ, VPNCRYPT_LIBCRYPTO="libvpncrypt-test-no-such-library.so")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "False " + "00" * 16
    assert lines[1].startswith("error: Adiantum needs AES-256 from OpenSSL's libcrypto")


def test_env_forces_the_nh_kernel():
    code = "import vpncrypt.crypto as c; print(c.active_nh_implementation())"
    env = dict(os.environ, VPNCRYPT_NH_IMPL="generic")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "generic"
    with pytest.raises(ValueError, match="unknown NH implementation"):
        vc.use_nh_implementation("sse9")


def test_one_key_from_many_threads(rng):
    """A key object's AES contexts are borrowed under a try-lock; threads that
    find one taken make their own, and every result is still right."""
    import threading

    a = vc.Adiantum(rbytes(rng, 32))
    jobs = [(rbytes(rng, 7), rbytes(rng, 16 + i % 700)) for i in range(200)]
    want = [a.encrypt(t, d) for t, d in jobs]
    errors = []

    def work():
        for _ in range(5):
            for (t, d), w in zip(jobs, want):
                if a.encrypt(t, d) != w or a.decrypt(t, w) != d:
                    errors.append(len(d))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_rekey_and_wipe_in_c():
    """setkey again on a key re-keys it (its old AES contexts freed), and a
    wiped key is zero."""
    from vpncrypt._native import ffi, lib

    k = ffi.new("vc_adiantum_key *")
    data = bytes(range(48))
    out = ffi.new("uint8_t[48]")
    for key, rounds in ((bytes(32), 12), (bytes(range(32)), 20), (bytes(range(32)), 12)):
        assert lib.vc_adiantum_setkey(k, ffi.from_buffer(key), rounds) == 0
        assert lib.vc_adiantum_encrypt(k, out, ffi.from_buffer(data), 48, ffi.NULL, 0) == 0
        assert ffi.buffer(out)[:] == vc.Adiantum(key, rounds).encrypt(b"", data)
    lib.vc_adiantum_wipe(k)
    assert bytes(ffi.buffer(k)) == bytes(ffi.sizeof("vc_adiantum_key"))
