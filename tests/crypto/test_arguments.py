"""Bad arguments raise TypeError or ValueError naming the argument."""

import pytest

import vpncrypt.crypto as vc

K, N, XN = bytes(32), bytes(12), bytes(24)


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda b: b.seal(bytes(31), N, b""), ValueError, "key must be 32 bytes long, got 31"),
        (lambda b: b.seal(K, bytes(8), b""), ValueError, "nonce must be 12 bytes long, got 8"),
        (lambda b: b.seal(K, N, "text"), TypeError, "plaintext must be bytes"),
        (lambda b: b.seal(K, N, b"", aad=5), TypeError, "aad must be bytes"),
        (lambda b: b.open(K, N, bytes(15)), ValueError, "sealed must be at least 16 bytes"),
        (lambda b: b.open(None, N, bytes(16)), TypeError, "key must be bytes"),
        (lambda b: b.xseal(K, N, b""), ValueError, "nonce must be 24 bytes long, got 12"),
        (lambda b: b.xopen(K, XN, b"short"), ValueError, "sealed must be at least 16 bytes"),
        (lambda b: b.seal_batch(K, [N], [b"a", b"b"]), ValueError, "same length"),
        (
            lambda b: b.seal_batch(K, [N, bytes(11)], [b"a", b"b"]),
            ValueError,
            r"nonces\[1\] must be 12 bytes",
        ),
        (lambda b: b.seal_batch(K, N, [b"a"]), TypeError, "nonces must be a sequence"),
        (lambda b: b.open_batch(K, [N], [bytes(3)]), ValueError, r"messages\[0\] must be at least 16 bytes"),
        (lambda b: b.seal_batch(K, [N], [123]), TypeError, r"messages\[0\] must be bytes"),
    ],
)
def test_backend_argument_errors(backend, call, exc, text):
    with pytest.raises(exc, match=text):
        call(backend)


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: vc.chacha20_xor(K, N, b"", rounds=10), ValueError, "rounds must be 8, 12 or 20"),
        (lambda: vc.chacha20_xor(K, N, b"", counter=2**32), ValueError, "counter must be in"),
        (lambda: vc.chacha20_xor(K, N, b"", counter=-1), ValueError, "counter must be in"),
        (lambda: vc.chacha20_xor(K, N, b"", counter=1.0), TypeError, "counter must be an int"),
        (lambda: vc.hchacha20(K, N), ValueError, "nonce16 must be 16 bytes"),
        (lambda: vc.poly1305(bytes(16), b""), ValueError, "key must be 32 bytes"),
        (lambda: vc.use_implementation("sse9"), ValueError, "unknown ChaCha implementation 'sse9'"),
        (lambda: vc.use_poly1305_implementation(3), TypeError, "must be a str"),
        (lambda: vc.get_backend("openssl"), ValueError, "unknown crypto backend"),
    ],
)
def test_function_argument_errors(call, exc, text):
    with pytest.raises(exc, match=text):
        call()


def _buffer_kinds(data: bytes):
    """The same bytes as every kind of buffer a caller may pass."""
    import array
    import mmap

    m = mmap.mmap(-1, max(len(data), 1))
    m[: len(data)] = data
    kinds = {
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "readonly memoryview of a bytearray": memoryview(bytearray(data)).toreadonly(),
        "mmap": memoryview(m)[: len(data)] if len(data) != len(m) else m,
    }
    if len(data) % 4 == 0:
        # 4-byte items: the length is counted in bytes, not items
        kinds["memoryview of uint32"] = memoryview(array.array("I", data))
        kinds["array of uint32"] = array.array("I", data)
    if len(data) % 4 == 0 and data:
        kinds["2-D memoryview"] = memoryview(data).cast("B", (4, len(data) // 4))
    return kinds, m


def test_inputs_may_be_any_bytes_like(backend):
    msg, ad = b"0123456789abcdef" * 2, b"ad-4"
    want = backend.seal(K, N, msg, ad)
    keys, mk = _buffer_kinds(K)
    nonces, mn = _buffer_kinds(N)
    msgs, mm = _buffer_kinds(msg)
    sealeds, ms = _buffer_kinds(want)
    aads, ma = _buffer_kinds(ad)
    try:
        for kind in keys:
            assert backend.seal(keys[kind], nonces[kind], msgs[kind], aads[kind]) == want, kind
            assert backend.open(keys[kind], nonces[kind], sealeds.get(kind, want), aads[kind]) == msg, kind
    finally:
        del keys, nonces, msgs, sealeds, aads
        for m in (mk, mn, mm, ms, ma):
            m.close()


def test_xchacha_inputs_may_be_any_bytes_like(backend):
    import array

    xn = bytes(range(24))
    want = backend.xseal(K, xn, b"x" * 8)
    assert (
        backend.xseal(memoryview(array.array("Q", K)), memoryview(array.array("I", xn)), bytearray(b"x" * 8))
        == want
    )
    assert backend.xopen(bytearray(K), memoryview(xn), memoryview(array.array("B", want))) == b"x" * 8


@pytest.mark.parametrize("arg", ["key", "nonce", "plaintext", "aad"])
def test_strided_buffers_are_refused(backend, arg):
    """A non-contiguous buffer is a clear BufferError naming the argument (never
    silently copied), on every backend and for open as for seal."""
    good = {"key": K, "nonce": N, "plaintext": b"p" * 16, "aad": b"a" * 4}
    strided = memoryview(good[arg] * 2)[::2]
    call = dict(good, **{arg: strided})
    with pytest.raises(BufferError, match=f"{arg} must be a contiguous buffer"):
        backend.seal(call["key"], call["nonce"], call["plaintext"], call["aad"])
    sealed = backend.seal(K, N, b"p" * 16, b"a" * 4)
    call = dict(good, plaintext=sealed, **{arg: strided} if arg != "plaintext" else {})
    if arg == "plaintext":
        with pytest.raises(BufferError, match="sealed must be a contiguous buffer"):
            backend.open(K, N, memoryview(sealed * 2)[::2], b"a" * 4)
    else:
        with pytest.raises(BufferError, match=f"{arg} must be a contiguous buffer"):
            backend.open(call["key"], call["nonce"], call["plaintext"], call["aad"])


@pytest.mark.parametrize(
    "call, exc, text",
    [
        (lambda: vc.seal(K, N, plaintext=b"p", aad=b"a"), None, None),
        (lambda: vc.seal(key=K, nonce=N, plaintext=b"p"), None, None),
        (lambda: vc.open(K, N, sealed=vc.seal(K, N, b"p")), None, None),
        (lambda: vc.seal(K, N), TypeError, "missing required argument: 'plaintext'"),
        (lambda: vc.seal(K, N, b"p", b"a", b"extra"), TypeError, "takes from 3 to 4 positional arguments"),
        (
            lambda: vc.seal(K, N, b"p", associated_data=b"a"),
            TypeError,
            "unexpected keyword argument 'associated_data'",
        ),
        (lambda: vc.seal(K, N, b"p", key=K), TypeError, "multiple values for argument 'key'"),
        (lambda: vc.xopen(K, bytes(24), plaintext=b""), TypeError, "unexpected keyword argument 'plaintext'"),
        (lambda: vc.chacha20_xor(K, N, data=b"d", counter=3, rounds=8), None, None),
        (lambda: vc.chacha20_xor(K, N, b"d", rounds=True), TypeError, "rounds must be an int, not bool"),
        (lambda: vc.chacha20_xor(K, N, b"d", counter=False), TypeError, "counter must be an int, not bool"),
        (lambda: vc.chacha20_xor(K, N, b"d", counter=2**64), ValueError, "counter must be in"),
        (lambda: vc.chacha20_xor(K, N, "d"), TypeError, "data must be bytes"),
        (lambda: vc.AEAD(bytes(16)), ValueError, "key must be 32 bytes long, got 16"),
        (lambda: vc.XAEAD("k" * 32), TypeError, "key must be bytes"),
        (lambda: vc.AEAD(), TypeError, "exactly one argument"),
        (lambda: vc.AEAD(K).seal(XN, b""), ValueError, "nonce must be 12 bytes long, got 24"),
        (lambda: vc.XAEAD(K).seal(N, b""), ValueError, "nonce must be 24 bytes long, got 12"),
        (lambda: vc.AEAD(K).open(N, bytes(15)), ValueError, "sealed must be at least 16 bytes"),
        (lambda: vc.AEAD(K).open(N, bytes(16)), vc.AuthenticationError, "failed to authenticate"),
        (lambda: vc.AEAD(K).seal(N, plaintext=b"", aad=None), TypeError, "aad must be bytes"),
        (lambda: vc.AEAD(K).seal(nonce=N), TypeError, "missing required argument: 'plaintext'"),
    ],
)
def test_keywords_and_key_objects(call, exc, text):
    """The one-shot calls take their arguments by keyword as the Python API
    always did, and the key objects raise the module functions' errors."""
    if exc is None:
        assert isinstance(call(), bytes)
    else:
        with pytest.raises(exc, match=text):
            call()


def test_key_objects_keep_the_key_private():
    a = vc.AEAD(bytes(range(32)))
    assert "key hidden" in repr(a) and "1f" not in repr(a)
    import copy
    import pickle

    with pytest.raises(TypeError, match="holds a secret key"):
        pickle.dumps(a)
    with pytest.raises(TypeError, match="holds a secret key"):
        copy.copy(a)


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
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert out == name
    bad = subprocess.run(
        [sys.executable, "-c", "import vpncrypt.crypto"],
        env={**__import__("os").environ, "VPNCRYPT_CHACHA_IMPL": "nope"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "unknown ChaCha implementation 'nope'" in bad.stderr
