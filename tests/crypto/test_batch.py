"""The batch forms equal the single forms packet for packet."""

import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib
from tests.crypto.conftest import rbytes

MIXED = [0, 1, 15, 16, 17, 64, 65, 255, 320, 321, 1000, 1420, 1472, 1500, 3, 8192]


def test_batch_equals_single(kernels, backend, rng):
    key = rbytes(rng, 32)
    nonces = [rbytes(rng, 12) for _ in MIXED]
    msgs = [rbytes(rng, n) for n in MIXED]
    aad = rbytes(rng, 9)
    sealed = backend.seal_batch(key, nonces, msgs, aad)
    assert sealed == [vc.get_backend("pynacl").seal(key, n, m, aad) for n, m in zip(nonces, msgs)]
    assert backend.open_batch(key, nonces, sealed, aad) == msgs


def test_batch_open_marks_failures(kernels, backend, rng):
    key = rbytes(rng, 32)
    nonces = [rbytes(rng, 12) for _ in MIXED]
    msgs = [rbytes(rng, n) for n in MIXED]
    sealed = [bytearray(s) for s in backend.seal_batch(key, nonces, msgs)]
    bad = {2, 5, 11}
    for i in bad:
        sealed[i][0] ^= 0x80
    got = backend.open_batch(key, nonces, sealed)
    for i, (g, m) in enumerate(zip(got, msgs)):
        assert g is None if i in bad else g == m


def test_empty_batch(backend):
    assert backend.seal_batch(bytes(32), [], []) == []
    assert backend.open_batch(bytes(32), [], []) == []


def test_item_batch_many_keys(kernels, rng):
    """The C item form: each packet has its own key, nonce and AAD, mixed lengths,
    in place and out of place, and failures are reported per item."""
    n = len(MIXED)
    keys = [rbytes(rng, 32) for _ in range(n)]
    nonces = [rbytes(rng, 12) for _ in range(n)]
    aads = [rbytes(rng, i % 5) for i in range(n)]
    msgs = [rbytes(rng, m) for m in MIXED]
    keep = []
    items = ffi.new("vc_aead_item[]", n)
    outs = []
    for i in range(n):
        buf = bytearray(msgs[i]) + bytearray(16)  # in place for even i
        out = buf if i % 2 == 0 else bytearray(len(msgs[i]) + 16)
        keep += [keys[i], nonces[i], aads[i], buf, out]
        items[i].key = ffi.from_buffer(keys[i])
        items[i].nonce = ffi.from_buffer(nonces[i])
        items[i].aad = ffi.from_buffer(aads[i])
        items[i].aad_len = len(aads[i])
        items[i].input = ffi.from_buffer(buf)
        items[i].in_len = len(msgs[i])
        items[i].out = ffi.from_buffer(out)
        outs.append(out)
    assert lib.vc_aead_seal_batch(items, n) == n
    for i in range(n):
        assert bytes(outs[i]) == vc.seal(keys[i], nonces[i], msgs[i], aads[i])
    # open them back, one corrupted
    outs[3][-1] ^= 1
    plains = [bytearray(len(m)) for m in msgs]
    for i in range(n):
        items[i].input = ffi.from_buffer(outs[i])
        items[i].in_len = len(outs[i])
        items[i].out = ffi.from_buffer(plains[i])
    assert lib.vc_aead_open_batch(items, n) == n - 1
    for i in range(n):
        if i == 3:
            assert items[i].status == lib.VC_ERR_AUTH and bytes(plains[i]) == bytes(len(msgs[i]))
        else:
            assert items[i].status == 0 and bytes(plains[i]) == msgs[i]


def test_item_batch_rejects_short_input():
    items = ffi.new("vc_aead_item[]", 1)
    k = ffi.new("uint8_t[32]")
    items[0].key = k
    items[0].nonce = k
    items[0].input = k
    items[0].in_len = 15
    items[0].out = k
    assert lib.vc_aead_open_batch(items, 1) == 0
    assert items[0].status == lib.VC_ERR_LENGTH


def test_batch_counts_bytes_not_items(backend):
    """Batch items are measured in bytes, as the batch is joined byte-wise: a
    memoryview of twelve 4-byte words is 48 bytes, not a 12-byte nonce (it used
    to pass the length check and seal under the wrong nonce), and three words
    are a nonce used byte for byte."""
    from array import array

    ref = vc.get_backend("pynacl")
    key = bytes(range(32))
    with pytest.raises(ValueError, match=r"nonces\[0\] must be 12 bytes long, got 48"):
        backend.seal_batch(key, [memoryview(array("I", range(12)))], [b"x"])
    with pytest.raises(ValueError, match=r"nonces\[1\] must be 12 bytes long, got 48"):
        backend.open_batch(key, [bytes(12), array("I", range(12))], [bytes(16), bytes(16)])
    nonce_words, msg_words = array("I", [1, 2, 3]), array("I", range(100))
    other = bytes(range(12, 24))
    want = [ref.seal(key, nonce_words.tobytes(), msg_words.tobytes()), ref.seal(key, other, b"tail")]
    assert backend.seal_batch(key, [memoryview(nonce_words), other], [memoryview(msg_words), b"tail"]) == want
    sealed_words = [memoryview(array("I", want[0])), bytearray(want[1])]
    assert backend.open_batch(key, [nonce_words, other], sealed_words) == [msg_words.tobytes(), b"tail"]
    # a sealed message of four 4-byte words is 16 bytes: long enough for the tag
    short = array("I", [0, 0, 0])
    with pytest.raises(ValueError, match=r"messages\[0\] must be at least 16 bytes \(the tag\), got 12"):
        backend.open_batch(key, [other], [short])
