"""Noise primitives over BLAKE2s as WireGuard uses them.

HASH, MAC (keyed BLAKE2s-128), HMAC (HMAC-BLAKE2s), KDF1..3, TAI64N, the
protocol constants, and a Noise SymmetricState that both the WireGuard
handshake and the Noise known-answer test run on.
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing_extensions import Buffer

CONSTRUCTION = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s"
IDENTIFIER = b"WireGuard v1 zx2c4 Jason@zx2c4.com"
LABEL_MAC1 = b"mac1----"
LABEL_COOKIE = b"cookie--"

_blake2s = hashlib.blake2s
_hmac_digest = _hmac.digest


class AEADBackend(Protocol):
    """What the handshake uses of a crypto backend (vpncrypt.crypto.get_backend):
    ChaCha20-Poly1305 and, for cookie replies, XChaCha20-Poly1305.  ``open`` and
    ``xopen`` raise vpncrypt.crypto.AuthenticationError on a bad tag."""

    def seal(self, key: bytes, nonce: bytes, plaintext: bytes, aad: bytes, /) -> bytes: ...
    def open(self, key: bytes, nonce: bytes, sealed: bytes, aad: bytes, /) -> bytes: ...
    def xopen(self, key: bytes, nonce: bytes, sealed: bytes, aad: bytes, /) -> bytes: ...


def HASH(*parts: Buffer) -> bytes:
    h = _blake2s()
    for p in parts:
        h.update(p)
    return h.digest()


def MAC(key: Buffer, data: Buffer) -> bytes:
    """Keyed BLAKE2s with a 16-byte output."""
    return _blake2s(data, digest_size=16, key=bytes(key)).digest()


def HMAC(key: Buffer, data: Buffer) -> bytes:
    return _hmac_digest(bytes(key), data, "blake2s")


def KDF(n: int, key: Buffer, data: Buffer) -> tuple[bytes, ...]:
    t0 = HMAC(key, data)
    out: list[bytes] = []
    prev = b""
    for i in range(1, n + 1):
        prev = HMAC(t0, prev + bytes([i]))
        out.append(prev)
    return tuple(out)


def KDF1(key: Buffer, data: Buffer) -> bytes:
    return KDF(1, key, data)[0]


def KDF2(key: Buffer, data: Buffer) -> tuple[bytes, bytes]:
    t1, t2 = KDF(2, key, data)
    return t1, t2


def KDF3(key: Buffer, data: Buffer) -> tuple[bytes, bytes, bytes]:
    t1, t2, t3 = KDF(3, key, data)
    return t1, t2, t3


def aead_nonce(counter: int) -> bytes:
    """32 zero bits then the 64-bit little-endian counter."""
    return b"\x00\x00\x00\x00" + counter.to_bytes(8, "little")


_TAI64_BASE = 0x400000000000000A
# Initiation timestamps are whitened to a multiple of 2^24 ns (about 16.8 ms,
# the power of two below 1 s / INITIATIONS_PER_SECOND), as WireGuard does, so
# they do not give away the sender's clock in full.
_WHITEN = (1 << 24) - 1


def tai64n(unix_seconds: float) -> bytes:
    secs = int(unix_seconds // 1)
    nanos = int((unix_seconds - secs) * 1e9)
    nanos = min(max(nanos, 0), 999_999_999) & ~_WHITEN
    return struct.pack(">QI", _TAI64_BASE + secs, nanos)


def _wipe(buf: bytearray | None) -> None:
    if buf is not None:
        buf[:] = bytes(len(buf))


class SymmetricState:
    """Noise SymmetricState: chaining key, hash, cipher key and nonce.

    ck, h and k are bytearrays updated in place and wiped by ``wipe()``
    (the temporaries hashlib returns are freed at once, but Python cannot
    overwrite them).  ``copy()`` gives an independent state, so a message can
    be processed on a copy and committed only once it authenticated."""

    __slots__ = ("ck", "h", "k", "n", "crypto")
    ck: bytearray
    h: bytearray
    k: bytearray | None
    n: int
    crypto: AEADBackend

    def __init__(self, protocol_name: bytes, crypto: AEADBackend):
        h = protocol_name.ljust(32, b"\x00") if len(protocol_name) <= 32 else HASH(protocol_name)
        self.ck = bytearray(h)
        self.h = bytearray(h)
        self.k = None
        self.n = 0
        self.crypto = crypto

    def __repr__(self) -> str:
        return "<SymmetricState>"

    def copy(self) -> "SymmetricState":
        other = SymmetricState.__new__(SymmetricState)
        other.ck = bytearray(self.ck)
        other.h = bytearray(self.h)
        other.k = None if self.k is None else bytearray(self.k)
        other.n = self.n
        other.crypto = self.crypto
        return other

    def wipe(self) -> None:
        _wipe(self.ck)
        _wipe(self.h)
        _wipe(self.k)
        self.k = None

    def _set_k(self, key: bytes) -> None:
        if self.k is None:
            self.k = bytearray(key)
        else:
            self.k[:] = key
        self.n = 0

    def mix_hash(self, data: Buffer) -> None:
        self.h[:] = HASH(self.h, data)

    def mix_key(self, ikm: Buffer) -> None:
        ck, k = KDF2(self.ck, ikm)
        self.ck[:] = ck
        self._set_k(k)

    def mix_key_and_hash(self, ikm: Buffer) -> None:
        ck, temp_h, k = KDF3(self.ck, ikm)
        self.ck[:] = ck
        self.mix_hash(temp_h)
        self._set_k(k)

    def _with_ad(self, aead: Callable[[bytes, bytes, bytes, bytes], bytes], data: bytes) -> bytes:
        """The cipher state's EncryptWithAd/DecryptWithAd (aead is seal or open),
        the hash as associated data: data as it is while there is no key; the
        nonce counts only what went through (a bad tag raises before it)."""
        if self.k is None:
            return data
        out = aead(bytes(self.k), aead_nonce(self.n), data, bytes(self.h))
        self.n += 1
        return out

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        ct = self._with_ad(self.crypto.seal, plaintext)
        self.mix_hash(ct)
        return ct

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        """Raises vpncrypt.crypto.AuthenticationError on a bad tag."""
        pt = self._with_ad(self.crypto.open, ciphertext)
        self.mix_hash(ciphertext)
        return pt

    def split(self) -> tuple[bytes, bytes]:
        """(initiator->responder key, responder->initiator key)."""
        return KDF2(self.ck, b"")
