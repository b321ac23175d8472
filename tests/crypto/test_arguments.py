"""Bad arguments raise TypeError or ValueError naming the argument."""
import pytest

import vpncrypt.crypto as vc

K, N, XN = bytes(32), bytes(12), bytes(24)


@pytest.mark.parametrize("call, exc, text", [
    (lambda b: b.seal(bytes(31), N, b""), ValueError, "key must be 32 bytes long, got 31"),
    (lambda b: b.seal(K, bytes(8), b""), ValueError, "nonce must be 12 bytes long, got 8"),
    (lambda b: b.seal(K, N, "text"), TypeError, "plaintext must be bytes"),
    (lambda b: b.seal(K, N, b"", aad=5), TypeError, "aad must be bytes"),
    (lambda b: b.open(K, N, bytes(15)), ValueError, "sealed must be at least 16 bytes"),
    (lambda b: b.open(None, N, bytes(16)), TypeError, "key must be bytes"),
    (lambda b: b.xseal(K, N, b""), ValueError, "nonce must be 24 bytes long, got 12"),
    (lambda b: b.xopen(K, XN, b"short"), ValueError, "sealed must be at least 16 bytes"),
    (lambda b: b.seal_batch(K, [N], [b"a", b"b"]), ValueError, "same length"),
    (lambda b: b.seal_batch(K, [N, bytes(11)], [b"a", b"b"]), ValueError, r"nonces\[1\] must be 12 bytes"),
    (lambda b: b.seal_batch(K, N, [b"a"]), TypeError, "nonces must be a sequence"),
    (lambda b: b.open_batch(K, [N], [bytes(3)]), ValueError, r"messages\[0\] must be at least 16 bytes"),
    (lambda b: b.seal_batch(K, [N], [123]), TypeError, r"messages\[0\] must be bytes"),
])
def test_backend_argument_errors(backend, call, exc, text):
    with pytest.raises(exc, match=text):
        call(backend)


@pytest.mark.parametrize("call, exc, text", [
    (lambda: vc.chacha20_xor(K, N, b"", rounds=10), ValueError, "rounds must be 8, 12 or 20"),
    (lambda: vc.chacha20_xor(K, N, b"", counter=2**32), ValueError, "counter must be in"),
    (lambda: vc.chacha20_xor(K, N, b"", counter=-1), ValueError, "counter must be in"),
    (lambda: vc.chacha20_xor(K, N, b"", counter=1.0), TypeError, "counter must be an int"),
    (lambda: vc.hchacha20(K, N), ValueError, "nonce16 must be 16 bytes"),
    (lambda: vc.poly1305(bytes(16), b""), ValueError, "key must be 32 bytes"),
    (lambda: vc.use_implementation("sse9"), ValueError, "unknown ChaCha implementation 'sse9'"),
    (lambda: vc.use_poly1305_implementation(3), TypeError, "must be a str"),
    (lambda: vc.get_backend("openssl"), ValueError, "unknown crypto backend"),
])
def test_function_argument_errors(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


def test_inputs_may_be_any_bytes_like(backend):
    msg = b"some plaintext"
    want = backend.seal(K, N, msg, b"ad")
    assert backend.seal(bytearray(K), memoryview(N), bytearray(msg), memoryview(b"ad")) == want
    assert backend.open(memoryview(K), bytearray(N), memoryview(want), bytearray(b"ad")) == msg
    # a memoryview of another item size is taken as its bytes
    import array
    words = array.array("I", [1, 2, 3, 4, 5, 6, 7, 8])
    assert backend.seal(memoryview(words), N, b"x") == backend.seal(words.tobytes(), N, b"x")


def test_implementation_listing_and_env(tmp_path):
    """implementations() starts with generic, the active one is listed, and
    VPNCRYPT_CHACHA_IMPL forces a kernel at import."""
    import subprocess
    import sys
    impls = vc.implementations()
    assert impls[0] == "generic" and vc.active_implementation() in impls
    assert vc.poly1305_implementations()[0] == "generic"
    for name in impls:
        out = subprocess.run(
            [sys.executable, "-c", "import vpncrypt.crypto as c; print(c.active_implementation())"],
            env={**__import__("os").environ, "VPNCRYPT_CHACHA_IMPL": name},
            capture_output=True, text=True, check=True).stdout.strip()
        assert out == name
    bad = subprocess.run([sys.executable, "-c", "import vpncrypt.crypto"],
                         env={**__import__("os").environ, "VPNCRYPT_CHACHA_IMPL": "nope"},
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown ChaCha implementation 'nope'" in bad.stderr
