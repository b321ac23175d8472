"""The one-message entry point (vpncrypt._oneshot, a C-API module): it runs on
the kernels that vpncrypt.crypto selects (one dispatch state, shared with the
cffi module), leaks neither memory nor references nor buffer exports, and is
safe with threads."""

import gc
import os
import resource
import subprocess
import sys
import threading
import tracemalloc
from array import array

import pytest
from nacl import bindings as nb

import vpncrypt.crypto as vc
from vpncrypt import _oneshot
from vpncrypt._native import ffi, lib
from tests.crypto.conftest import rbytes

K, N, XN = bytes(range(32)), bytes(range(12)), bytes(range(24))


def test_module_functions_are_the_c_entry_points():
    for name in ("seal", "open", "xseal", "xopen", "chacha20_xor"):
        assert getattr(vc, name) is getattr(_oneshot, name)
        assert getattr(vc.get_backend("native"), name, getattr(vc, name)) is getattr(_oneshot, name)
    assert vc.AEAD is _oneshot.AEAD and vc.XAEAD is _oneshot.XAEAD


def _calls(key, nonce, xnonce, msg):
    """Every one-message entry point once, named."""
    sealed = vc.seal(key, nonce, msg)
    xsealed = vc.xseal(key, xnonce, msg)
    return [
        ("seal", lambda: vc.seal(key, nonce, msg, b"ad"), True),
        ("open", lambda: vc.open(key, nonce, sealed), True),
        ("xseal", lambda: vc.xseal(key, xnonce, msg), True),
        ("xopen", lambda: vc.xopen(key, xnonce, xsealed), True),
        ("AEAD.seal", lambda: vc.AEAD(key).seal(nonce, msg), True),
        ("AEAD.open", lambda: vc.AEAD(key).open(nonce, sealed), True),
        ("XAEAD.open", lambda: vc.XAEAD(key).open(xnonce, xsealed), True),
        ("chacha20_xor", lambda: vc.chacha20_xor(key, nonce, msg, 1), False),
    ]


@pytest.mark.parametrize("length", [0, 100, 1472, 9000])
def test_selected_kernels_serve_the_one_shot_calls(kernels, length):
    """Proof that the C-API module runs on the kernels selected through cffi:
    the native core records, per thread, which kernels served the last
    operation, and that record (read back through cffi) names the selected
    ones after each one-shot call.  A module with its own copy of the kernels
    or of the selection would leave the record as the cffi call below set it."""
    chacha, poly = kernels
    for name, call, uses_poly in _calls(K, N, XN, bytes(length)):
        vc.poly1305(K, b"reset")  # a cffi call: (None, poly)
        assert vc.last_kernels() == (None, poly)
        vc.use_poly1305_implementation("generic")
        vc.poly1305(K, b"reset")
        vc.use_poly1305_implementation(poly)
        assert vc.last_kernels() == (None, "generic")
        call()
        assert vc.last_kernels() == (chacha, poly if uses_poly else None), name


def test_every_kernel_pair_equal_to_libsodium_through_each_entry_point(kernels, rng):
    for n in (0, 1, 63, 64, 65, 191, 193, 447, 449, 959, 961, 1472, 4096, 4097):
        key, nonce, xnonce, msg, aad = (
            rbytes(rng, 32),
            rbytes(rng, 12),
            rbytes(rng, 24),
            rbytes(rng, n),
            rbytes(rng, n % 19),
        )
        want = nb.crypto_aead_chacha20poly1305_ietf_encrypt(msg, aad, nonce, key)
        xwant = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(msg, aad, xnonce, key)
        assert vc.seal(key, nonce, msg, aad) == want == vc.AEAD(key).seal(nonce, msg, aad)
        assert vc.xseal(key, xnonce, msg, aad) == xwant == vc.XAEAD(key).seal(xnonce, msg, aad)
        assert vc.open(key, nonce, want, aad) == msg == vc.AEAD(key).open(nonce, want, aad)
        assert vc.xopen(key, xnonce, xwant, aad) == msg == vc.XAEAD(key).open(xnonce, xwant, aad)
        ours = vc.AEAD(key).seal(nonce, msg, aad)
        assert nb.crypto_aead_chacha20poly1305_ietf_decrypt(ours, aad, nonce, key) == msg


def test_unbound_module_refuses_clearly():
    """Imported on its own (before vpncrypt.crypto binds it), the module raises a
    clear error instead of calling through a NULL table."""
    code = (
        "import vpncrypt._oneshot as o\n"
        "try:\n    o.seal(bytes(32), bytes(12), b'x')\n"
        "except RuntimeError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "refused: vpncrypt._oneshot is not bound" in out.stdout


def test_bind_refuses_a_table_of_another_abi():
    fake = ffi.new("uint32_t[32]", [999, 8])
    with pytest.raises(ImportError, match="does not match"):
        _oneshot._bind(int(ffi.cast("uintptr_t", fake)), vc.AuthenticationError, vc.CounterOverflowError)
    assert vc.open(K, N, vc.seal(K, N, b"still bound")) == b"still bound"


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _workload(rounds: int):
    """Every entry point with every buffer kind, the error paths included."""
    key, nonce, xnonce = bytearray(K), memoryview(N), array("B", XN)
    msg = memoryview(array("I", range(300)))  # 1200 bytes
    big = bytes(5000)  # above the GIL threshold
    sealed = vc.seal(K, N, msg)
    bad = bytearray(sealed)
    bad[0] ^= 1
    a, x = vc.AEAD(K), vc.XAEAD(K)
    for _ in range(rounds):
        vc.open(key, nonce, vc.seal(key, nonce, msg, b"ad"), b"ad")
        vc.xopen(key, xnonce, vc.xseal(key, xnonce, big))
        a.open(nonce, a.seal(nonce, big))
        x.open(XN, x.seal(XN, msg))
        vc.chacha20_xor(key, nonce, big, 7, 12)
        for call in (
            lambda: vc.open(key, nonce, bad),
            lambda: a.open(N, bad),
            lambda: vc.seal(K, N, "str"),
            lambda: vc.seal(K, memoryview(bytes(24))[::2], b""),
            lambda: vc.open(K, N, bytes(15)),
            lambda: vc.chacha20_xor(K, N, b"x" * 65, 2**32 - 1),
            lambda: vc.seal(K, N, b"", unknown=1),
            lambda: vc.AEAD(bytes(31)),
        ):
            try:
                call()
            except (ValueError, TypeError, BufferError, OverflowError):
                pass
    return key, msg, sealed


def test_no_leaks_of_memory_references_or_buffer_exports():
    """Many calls of every kind: traced memory and RSS stay flat, the inputs'
    reference counts come back, and no buffer stays exported (a bytearray that
    was passed in can still be resized)."""
    key, msg, sealed = _workload(200)  # warm up: caches, interned strings
    refs = (sys.getrefcount(key), sys.getrefcount(sealed), sys.getrefcount(msg))
    gc.collect()
    tracemalloc.start()
    before_traced = tracemalloc.get_traced_memory()[0]
    before_rss = _rss_kib()
    _workload(20000)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before_traced
    tracemalloc.stop()
    rss_grown = _rss_kib() - before_rss
    # 20000 rounds of 13 calls: a leak of even one object per call would be > 10 MB
    assert grown < 64 * 1024, f"traced memory grew by {grown} bytes"
    assert rss_grown < 4 * 1024, f"RSS grew by {rss_grown} KiB"
    assert (sys.getrefcount(key), sys.getrefcount(sealed), sys.getrefcount(msg)) == refs
    ba = bytearray(b"k" * 32)
    for _ in range(100):
        vc.seal(ba, N, ba)
        vc.AEAD(ba)
        with pytest.raises(ValueError):
            vc.seal(ba, bytes(5), ba)
    ba.extend(b"resizable: no export was left behind")


def test_threads_while_kernels_switch(rng):
    """Threads sealing and opening (messages above and below the GIL threshold)
    while another thread switches kernels: every result is right, none mixes
    kernels mid-call, nothing crashes."""
    impls, polys = vc.implementations(), vc.poly1305_implementations()
    before = vc.active_implementation(), vc.active_poly1305_implementation()
    cases = []
    for n in (0, 200, 1472, 3 * _oneshot.gil_release_bytes() + 5):
        key, nonce, msg = rbytes(rng, 32), rbytes(rng, 12), rbytes(rng, n)
        cases.append((key, nonce, msg, nb.crypto_aead_chacha20poly1305_ietf_encrypt(msg, None, nonce, key)))
    stop = threading.Event()
    errors = []

    def worker():
        try:
            while not stop.is_set():
                for key, nonce, msg, want in cases:
                    assert vc.seal(key, nonce, msg) == want
                    assert vc.AEAD(key).open(nonce, want) == msg
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(400):
            vc.use_implementation(impls[i % len(impls)])
            vc.use_poly1305_implementation(polys[(i // len(impls)) % len(polys)])
            lib.vc_chacha20_xor(
                ffi.new("uint8_t[64]"),
                ffi.new("uint8_t[64]"),
                64,
                ffi.new("uint8_t[32]"),
                ffi.new("uint8_t[12]"),
                0,
                20,
            )
    finally:
        stop.set()
        for t in threads:
            t.join()
        vc.use_implementation(before[0])
        vc.use_poly1305_implementation(before[1])
    assert not errors, errors[0]


def test_first_use_from_many_threads_at_once():
    """The kernel registry is set up once even when many threads make their
    first call at the same moment (a fresh interpreter per run)."""
    code = (
        "import threading\n"
        "from vpncrypt._native import ffi, lib\n"
        "out = []\n"
        "go = threading.Barrier(8)\n"
        "def first():\n"
        "    go.wait()\n"
        "    out.append((lib.vc_chacha_impl_active(), lib.vc_poly1305_impl_active(),\n"
        "                lib.vc_chacha_impl_count()))\n"
        "ts = [threading.Thread(target=first) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(len(set(out)), out[0][0] >= 0, out[0][1] >= 0)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VPNCRYPT_")}
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["1", "True", "True"]
