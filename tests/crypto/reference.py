"""A small, independent pure-Python ChaCha and Poly1305 (RFC 8439), used only by
the tests as a second reference, mainly for the 8- and 12-round variants that
libsodium and OpenSSL do not offer."""

import struct

MASK = 0xFFFFFFFF


def _rotl(v, n):
    return ((v << n) & MASK) | (v >> (32 - n))


def _qr(x, a, b, c, d):
    x[a] = (x[a] + x[b]) & MASK
    x[d] = _rotl(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & MASK
    x[b] = _rotl(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & MASK
    x[d] = _rotl(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & MASK
    x[b] = _rotl(x[b] ^ x[c], 7)


def _state(key, counter, nonce):
    return [
        0x61707865,
        0x3320646E,
        0x79622D32,
        0x6B206574,
        *struct.unpack("<8I", key),
        counter,
        *struct.unpack("<3I", nonce),
    ]


def _permute(x, rounds):
    for _ in range(rounds // 2):
        _qr(x, 0, 4, 8, 12)
        _qr(x, 1, 5, 9, 13)
        _qr(x, 2, 6, 10, 14)
        _qr(x, 3, 7, 11, 15)
        _qr(x, 0, 5, 10, 15)
        _qr(x, 1, 6, 11, 12)
        _qr(x, 2, 7, 8, 13)
        _qr(x, 3, 4, 9, 14)


def block(key, counter, nonce, rounds=20) -> bytes:
    s = _state(key, counter, nonce)
    x = list(s)
    _permute(x, rounds)
    return struct.pack("<16I", *((a + b) & MASK for a, b in zip(x, s)))


def chacha_xor(key, nonce, data, counter=0, rounds=20) -> bytes:
    out = bytearray(data)
    for i in range(0, len(data), 64):
        ks = block(key, counter + i // 64, nonce, rounds)
        for j in range(min(64, len(data) - i)):
            out[i + j] ^= ks[j]
    return bytes(out)


def hchacha(key, nonce16, rounds=20) -> bytes:
    x = _state(key, struct.unpack("<I", nonce16[:4])[0], nonce16[4:])
    _permute(x, rounds)
    return struct.pack("<8I", *x[0:4], *x[12:16])


def poly1305(key, msg) -> bytes:
    r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
    s = int.from_bytes(key[16:], "little")
    p = (1 << 130) - 5
    acc = 0
    for i in range(0, len(msg), 16):
        n = int.from_bytes(msg[i : i + 16] + b"\x01", "little")
        acc = (acc + n) * r % p
    return ((acc + s) & ((1 << 128) - 1)).to_bytes(16, "little")
