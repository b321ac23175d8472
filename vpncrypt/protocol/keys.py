"""X25519 keys in WireGuard's base64 form.

genkey()/pubkey(b64)/genpsk() produce the same strings as ``wg genkey``,
``wg pubkey`` and ``wg genpsk``.  dh() rejects an all-zero shared secret.
"""

import base64
import binascii
import hmac
import os
from collections.abc import Callable

from nacl import bindings as _nb

KEY_LEN = 32
_ZERO = bytes(KEY_LEN)

Rng = Callable[[int], bytes]  # n random bytes (os.urandom; a seeded one in tests)


class KeyError_(ValueError):
    """A key is malformed (never carries key material in its message)."""


class DHError(ValueError):
    """X25519 produced the all-zero shared secret (low-order public key)."""


def clamp(private: bytes) -> bytes:
    """Curve25519 private-key clamping, as `wg genkey` applies it."""
    if len(private) != KEY_LEN:
        raise KeyError_("a private key is 32 bytes")
    k = bytearray(private)
    k[0] &= 248
    k[31] = (k[31] & 127) | 64
    return bytes(k)


def generate_private(rng: Rng = os.urandom) -> bytes:
    return clamp(rng(KEY_LEN))


def public_from_private(private: bytes) -> bytes:
    if len(private) != KEY_LEN:
        raise KeyError_("a private key is 32 bytes")
    return _nb.crypto_scalarmult_base(bytes(private))


def dh(private: bytes, public: bytes) -> bytes:
    """X25519(private, public); raises DHError for the all-zero result."""
    if len(private) != KEY_LEN or len(public) != KEY_LEN:
        raise KeyError_("X25519 keys are 32 bytes")
    try:
        out = _nb.crypto_scalarmult(bytes(private), bytes(public))
    except Exception:  # libsodium refuses small-order points (zero result)
        raise DHError("X25519 shared secret is all zero") from None
    if hmac.compare_digest(out, _ZERO):
        raise DHError("X25519 shared secret is all zero")
    return out


def decode(b64: str | bytes) -> bytes:
    """A base64 key (44 characters) to its 32 bytes."""
    if isinstance(b64, bytes):
        b64 = b64.decode("ascii", "replace")
    b64 = b64.strip()
    if len(b64) != 44 or b64[-1] != "=":
        raise KeyError_("a key is 44 base64 characters")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise KeyError_("a key must be valid base64") from None
    if len(raw) != KEY_LEN:
        raise KeyError_("a key is 32 bytes")
    return raw


def encode(raw: bytes) -> str:
    if len(raw) != KEY_LEN:
        raise KeyError_("a key is 32 bytes")
    return base64.b64encode(bytes(raw)).decode("ascii")


def genkey(rng: Rng = os.urandom) -> str:
    """A new clamped private key in base64 (like `wg genkey`)."""
    return encode(generate_private(rng))


def pubkey(private_b64: str | bytes) -> str:
    """The base64 public key of a base64 private key (like `wg pubkey`)."""
    return encode(public_from_private(clamp(decode(private_b64))))


def genpsk(rng: Rng = os.urandom) -> str:
    """A new random preshared key in base64 (like `wg genpsk`)."""
    return encode(rng(KEY_LEN))
