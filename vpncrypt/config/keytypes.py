"""Key types that never show their material in repr()/str().

PublicKey, PrivateKey and PresharedKey are ``bytes`` subclasses (32 bytes), so
they pass anywhere raw key bytes are expected, but printing one in a log line
or an exception gives at most a short fingerprint (public keys) or
``<redacted>`` (secrets), never the full base64 or hex form.
"""

from __future__ import annotations

import hmac

from vpncrypt.protocol import keys as wgkeys

KEY_LEN = 32
ZERO_KEY = bytes(KEY_LEN)


# `wg`'s words for any key it cannot take; the message never contains the key text
KEY_FORMAT_MESSAGE = "Key is not the correct length or format"


class KeyFormatError(ValueError):
    """A key string is malformed. The message never contains the key text."""

    def __init__(self, message: str = KEY_FORMAT_MESSAGE):
        super().__init__(message)


def decode_base64_key(text: str) -> bytes:
    """The 32 bytes of a base64 key in its one canonical form (44 characters,
    '=' padding, the two unused low bits of the last character zero), as `wg`
    accepts it.  A key whose padding bits are set decodes to the same bytes as
    the canonical one, so two different strings would name one key: refused.
    Surrounding whitespace is ignored."""
    text = text.strip()
    try:
        raw = wgkeys.decode(text)
    except wgkeys.KeyError_:
        raise KeyFormatError() from None
    if wgkeys.encode(raw) != text:
        raise KeyFormatError()
    return raw


class _Key(bytes):
    __slots__ = ()

    def __new__(cls, raw: bytes | bytearray | memoryview):
        raw = bytes(raw)
        if len(raw) != KEY_LEN:
            raise KeyFormatError()
        return super().__new__(cls, raw)

    @classmethod
    def from_base64(cls, text: str) -> "_Key":
        return cls(decode_base64_key(text))

    @classmethod
    def from_hex(cls, text: str) -> "_Key":
        if len(text) != 2 * KEY_LEN:
            raise KeyFormatError()
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise KeyFormatError() from None
        return cls(raw)

    def to_base64(self) -> str:
        return wgkeys.encode(self)

    def to_hex(self) -> str:
        return bytes(self).hex()

    def is_zero(self) -> bool:
        return hmac.compare_digest(bytes(self), ZERO_KEY)

    def __eq__(self, other):  # constant-time for secrets; fine for public keys
        if isinstance(other, (bytes, bytearray)):
            return hmac.compare_digest(bytes(self), bytes(other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = bytes.__hash__


class PublicKey(_Key):
    __slots__ = ()

    def fingerprint(self) -> str:
        """fingerprint(self): the module function, the one home of the format."""
        return fingerprint(self)

    def __repr__(self) -> str:
        return f"PublicKey({fingerprint(self)})"

    __str__ = __repr__


class _SecretKey(_Key):
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(<redacted>)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


class PrivateKey(_SecretKey):
    __slots__ = ()


class PresharedKey(_SecretKey):
    __slots__ = ()


def fingerprint(public_key: bytes | bytearray | memoryview) -> str:
    """A public key as logs name a peer: its first 8 base64 characters and an
    ellipsis, enough to tell peers apart and nothing of any secret."""
    return wgkeys.encode(bytes(public_key))[:8] + "…"


# The keys the example configs (config/*.example) carried up to 0.1.0, each
# pair's private half in the same files: known to anyone, so a config that
# still holds one (copied before the examples got placeholders) is refused.
# A public key is among them because its private key is: anyone can pose
# as that peer.
_PUBLISHED = frozenset(
    wgkeys.decode(k)
    for k in (
        "8GIQxST+0XtOtOJknYACVFNJonZVkRsic1xgmkVP4Xg=",  # wg0.conf.example: the server's private key
        "fIWpvvDgo45FoXWAt9mgnt97fbsp8jNd9fgSMzxMhyk=",  # ... its public key
        "aIkfaj9R5mxQ1XR/7Xh17bHAyEOcKQOwSj9Vp6sIYVQ=",  # client.conf.example: the laptop's private key
        "5VDuuHCuZRhe7sIkW8v/UpB9tPViN7sy2Aee0j7rVQo=",  # ... its public key
        "8mvMtmCyt5y220CzggmJXK2LFNQpbQWYbr6aPGsOrM0=",  # both: the laptop's preshared key
        "0hDEEPENVQCtVcGqND0HGhEGOcsLPkrHkyHLedUhT2Q=",  # wg0.conf.example: the phone's public key
    )
)


def is_published(key: bytes) -> bool:
    """Whether `key` is one the example configs once shipped (_PUBLISHED)."""
    return bytes(key) in _PUBLISHED


def is_published_private(key: bytes) -> bool:
    """Whether the private key `key` is one of the published ones, or any
    other that X25519 takes for one (clamping ignores 5 of its 256 bits, so
    32 spellings give each public key): its public key is compared."""
    raw = bytes(key)
    if raw in _PUBLISHED:
        return True
    if len(raw) != KEY_LEN or raw == ZERO_KEY:
        return False
    return wgkeys.public_from_private(raw) in _PUBLISHED
