"""An independent pure-Python NH, NHPoly1305 and Adiantum, written from the
Adiantum paper (Crowley and Biggers, 2018, sections 6.3-6.4) for the tests: the
ChaCha and HChaCha of tests/crypto/reference.py (not the native core), and
AES-256 from `cryptography` (the test dependency), not from the libcrypto that
the native core loads."""

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.crypto import reference

P1305 = (1 << 130) - 5
M32, M64, M128 = (1 << 32) - 1, (1 << 64) - 1, (1 << 128) - 1
CLAMP = 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF


def _words(b: bytes) -> list[int]:
    return [int.from_bytes(b[i : i + 4], "little") for i in range(0, len(b), 4)]


def nh(key: bytes, msg: bytes) -> bytes:
    """NH with 4 passes, stride 2, 32-bit words: 16..1024 bytes, a multiple of 16."""
    assert len(key) == 1072 and 16 <= len(msg) <= 1024 and len(msg) % 16 == 0
    k, m = _words(key), _words(msg)
    out = b""
    for p in range(4):
        s = 0
        for i in range(0, len(m), 4):
            kk = k[i + 4 * p : i + 4 * p + 4]
            s += ((m[i] + kk[0]) & M32) * ((m[i + 2] + kk[2]) & M32)
            s += ((m[i + 1] + kk[1]) & M32) * ((m[i + 3] + kk[3]) & M32)
        out += (s & M64).to_bytes(8, "little")
    return out


def poly1305_hash(r16: bytes, msg: bytes) -> int:
    """The Poly1305 polynomial of msg at the clamped r, mod 2^130 - 5 (no s)."""
    r = int.from_bytes(r16, "little") & CLAMP
    h = 0
    for i in range(0, len(msg), 16):
        chunk = msg[i : i + 16]
        h = (h + int.from_bytes(chunk, "little") + (1 << (8 * len(chunk)))) * r % P1305
    return h


def nhpoly1305(key: bytes, msg: bytes) -> bytes:
    assert len(key) == 1088
    msg = msg + bytes(-len(msg) % 16)
    hashes = b"".join(nh(key[16:], msg[i : i + 1024]) for i in range(0, len(msg), 1024))
    return (poly1305_hash(key[:16], hashes) & M128).to_bytes(16, "little")


def xchacha(key: bytes, nonce24: bytes, data: bytes, rounds: int) -> bytes:
    sub = reference.hchacha(key, nonce24[:16], rounds)
    return reference.chacha_xor(sub, bytes(4) + nonce24[16:], data, 0, rounds)


def _subkeys(key: bytes, rounds: int):
    ks = xchacha(key, b"\x01" + bytes(23), bytes(32 + 16 + 1088), rounds)
    return ks[:32], ks[32:48], ks[48:]


def _hash(kt: bytes, km: bytes, tweak: bytes, bulk: bytes) -> int:
    ht = poly1305_hash(kt, (8 * len(bulk)).to_bytes(16, "little") + tweak)
    hm = int.from_bytes(nhpoly1305(km, bulk), "little")
    return (ht + hm) & M128


def _aes(key: bytes, block: bytes, encrypt: bool) -> bytes:
    c = Cipher(algorithms.AES(key), modes.ECB())
    op = c.encryptor() if encrypt else c.decryptor()
    return op.update(block) + op.finalize()


def _le(b: bytes) -> int:
    return int.from_bytes(b, "little")


def _b(v: int) -> bytes:
    return (v & M128).to_bytes(16, "little")


def encrypt(key: bytes, tweak: bytes, data: bytes, rounds: int = 12) -> bytes:
    ke, kt, km = _subkeys(key, rounds)
    pl, pr = data[:-16], data[-16:]
    cm = _aes(ke, _b(_le(pr) + _hash(kt, km, tweak, pl)), True)
    cl = xchacha(key, cm + b"\x01" + bytes(7), pl, rounds)
    return cl + _b(_le(cm) - _hash(kt, km, tweak, cl))


def decrypt(key: bytes, tweak: bytes, data: bytes, rounds: int = 12) -> bytes:
    ke, kt, km = _subkeys(key, rounds)
    cl, cr = data[:-16], data[-16:]
    cm = _b(_le(cr) + _hash(kt, km, tweak, cl))
    pl = xchacha(key, cm + b"\x01" + bytes(7), cl, rounds)
    pm = _aes(ke, cm, False)
    return pl + _b(_le(pm) - _hash(kt, km, tweak, pl))
