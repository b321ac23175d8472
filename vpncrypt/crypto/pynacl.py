"""The reference backend: libsodium through pynacl."""

from typing import Any

from nacl import bindings as nb
from nacl.exceptions import CryptoError

from vpncrypt.crypto import args
from vpncrypt.crypto.errors import AuthenticationError

_EMPTY = b""


def _b(v):
    return v if isinstance(v, bytes) else bytes(v)


def _aead(encrypt, decrypt, nonce_len):
    """seal and open over one libsodium AEAD, with this project's argument
    checks and AuthenticationError."""

    def seal(key: Any, nonce: Any, plaintext: Any, aad: Any = _EMPTY) -> bytes:
        key = args.buf("key", key, 32)
        nonce = args.buf("nonce", nonce, nonce_len)
        plaintext = args.buf("plaintext", plaintext)
        aad = args.buf("aad", aad)
        return encrypt(_b(plaintext), _b(aad) or None, _b(nonce), _b(key))

    def open_(key: Any, nonce: Any, sealed: Any, aad: Any = _EMPTY) -> bytes:
        key = args.buf("key", key, 32)
        nonce = args.buf("nonce", nonce, nonce_len)
        sealed = args.sealed("sealed", sealed)
        aad = args.buf("aad", aad)
        try:
            return decrypt(_b(sealed), _b(aad) or None, _b(nonce), _b(key))
        except CryptoError:
            raise AuthenticationError("message failed to authenticate") from None

    return staticmethod(seal), staticmethod(open_)


class PynaclBackend:
    """seal/open/xseal/xopen and batch forms, one libsodium call per message."""

    name = "pynacl"

    seal, open = _aead(
        nb.crypto_aead_chacha20poly1305_ietf_encrypt, nb.crypto_aead_chacha20poly1305_ietf_decrypt, 12
    )
    xseal, xopen = _aead(
        nb.crypto_aead_xchacha20poly1305_ietf_encrypt, nb.crypto_aead_xchacha20poly1305_ietf_decrypt, 24
    )

    def seal_batch(self, key: Any, nonces: Any, plaintexts: Any, aad: Any = _EMPTY) -> list[bytes]:
        key = args.buf("key", key, 32)
        args.batch(nonces, plaintexts, 12, sealed_in=False)
        return [self.seal(key, n, p, aad) for n, p in zip(nonces, plaintexts)]

    def open_batch(self, key: Any, nonces: Any, sealed: Any, aad: Any = _EMPTY) -> list[bytes | None]:
        key = args.buf("key", key, 32)
        args.batch(nonces, sealed, 12, sealed_in=True)
        out = []
        for n, s in zip(nonces, sealed):
            try:
                out.append(self.open(key, n, s, aad))
            except AuthenticationError:
                out.append(None)
        return out
