"""X25519 Wycheproof vectors and wg-compatible key generation."""

import base64
import json
import pathlib
import shutil
import subprocess

import pytest

from vpncrypt.protocol import genkey, genpsk, keys, pubkey

VECTORS = pathlib.Path(__file__).parents[1] / "vectors" / "x25519_test.json"


def _cases():
    data = json.loads(VECTORS.read_text())
    return [t for g in data["testGroups"] for t in g["tests"]]


def test_wycheproof_x25519():
    cases = _cases()
    zero = 0
    for t in cases:
        priv, pub, shared = (bytes.fromhex(t[k]) for k in ("private", "public", "shared"))
        if shared == bytes(32):
            zero += 1
            with pytest.raises(keys.DHError):
                keys.dh(priv, pub)
        else:
            assert keys.dh(priv, pub) == shared, t["tcId"]
    assert zero >= 1 and len(cases) > 500


def test_dh_rejects_bad_lengths():
    with pytest.raises(ValueError):
        keys.dh(bytes(31), bytes(32))


def test_genkey_is_clamped_and_pubkey_matches():
    for i in range(20):
        k = base64.b64decode(genkey())
        assert len(k) == 32 and k[0] & 7 == 0 and k[31] & 0x80 == 0 and k[31] & 0x40
    assert len(base64.b64decode(genpsk())) == 32
    fixed = genkey(rng=lambda n: bytes(range(n)))
    raw = bytearray(range(32))
    raw[0] &= 248
    raw[31] = (raw[31] & 127) | 64
    assert base64.b64decode(fixed) == bytes(raw)


def test_compatible_with_wg():
    assert shutil.which("wg"), "wg (wireguard-tools) is not installed (tests/run.sh installs it)"

    def wg(*args, inp=None):
        return subprocess.run(
            ["wg", *args], input=inp, capture_output=True, text=True, check=True
        ).stdout.strip()

    for _ in range(3):
        ours = genkey()
        assert wg("pubkey", inp=ours + "\n") == pubkey(ours)
        theirs = wg("genkey")
        assert pubkey(theirs) == wg("pubkey", inp=theirs + "\n")
        assert genkey_roundtrip(theirs)
    # wg clamps an unclamped private key before deriving the public key
    unclamped = base64.b64encode(b"\xff" * 32).decode()
    assert pubkey(unclamped) == wg("pubkey", inp=unclamped + "\n")
    assert len(base64.b64decode(wg("genpsk"))) == 32


def genkey_roundtrip(b64):
    return keys.encode(keys.decode(b64)) == b64


@pytest.mark.parametrize("bad", ["", "abc", "A" * 44, "!" * 43 + "=", base64.b64encode(bytes(31)).decode()])
def test_decode_rejects_malformed(bad):
    with pytest.raises(ValueError) as e:
        keys.decode(bad)
    assert bad not in str(e.value) or not bad
