"""vpncrypt.crypto: ChaCha20-Poly1305 and XChaCha20-Poly1305 with two backends,
and NHPoly1305 and Adiantum (native only).

The module-level functions use the native core: one message per call through
the C-API module vpncrypt._oneshot, batches through cffi.  ``AEAD(key)`` and
``XAEAD(key)`` hold a key for many calls (like cryptography's
``ChaCha20Poly1305(key)``).  ``get_backend("pynacl")`` returns the libsodium
reference with the same methods and the same errors.

Implementation switches (the same tests run on every one):
    implementations(), active_implementation(), use_implementation(name)
        the ChaCha20 stream kernel; VPNCRYPT_CHACHA_IMPL forces one at import.
    poly1305_implementations(), active_poly1305_implementation(),
    use_poly1305_implementation(name)
        the Poly1305 kernel; VPNCRYPT_POLY1305_IMPL forces one at import.
    last_kernels()
        the (ChaCha, Poly1305) kernels that served this thread's last call.
    nh_implementations(), active_nh_implementation(), use_nh_implementation(name)
        the NH kernel of NHPoly1305 and Adiantum; VPNCRYPT_NH_IMPL forces one at
        import; last_nh_kernel() is the one that served this thread's last call.

NHPoly1305 and Adiantum (the kernel's nhpoly1305, adiantum(xchacha12,aes) and
adiantum(xchacha20,aes)):
    nhpoly1305(key1088, message) -> 16 bytes
    adiantum_encrypt(key, tweak, data, rounds=12), adiantum_decrypt(...)
    Adiantum(key, rounds=12).encrypt(tweak, data) / .decrypt(...)  (subkeys derived once)
AES-256 for Adiantum's one block a message is OpenSSL's libcrypto, loaded at
run time (adiantum_aes_available()).
"""

import os
from typing import TYPE_CHECKING, Union

from vpncrypt.crypto.errors import AuthenticationError, CounterOverflowError
from vpncrypt.crypto.native import (
    AEAD,
    Adiantum,
    active_nh_implementation,
    adiantum_aes_available,
    adiantum_decrypt,
    adiantum_encrypt,
    last_nh_kernel,
    nh_implementations,
    nhpoly1305,
    use_nh_implementation,
    XAEAD,
    NativeBackend,
    active_chacha_implementation as active_implementation,
    active_poly1305_implementation,
    chacha20_xor,
    chacha_implementations as implementations,
    hchacha20,
    last_kernels,
    poly1305,
    poly1305_implementations,
    use_chacha_implementation as use_implementation,
    use_poly1305_implementation,
)

__all__ = [
    "AuthenticationError",
    "CounterOverflowError",
    "get_backend",
    "backends",
    "seal",
    "open",
    "xseal",
    "xopen",
    "seal_batch",
    "open_batch",
    "AEAD",
    "XAEAD",
    "chacha20_xor",
    "hchacha20",
    "poly1305",
    "implementations",
    "active_implementation",
    "use_implementation",
    "poly1305_implementations",
    "active_poly1305_implementation",
    "use_poly1305_implementation",
    "last_kernels",
    "nhpoly1305",
    "Adiantum",
    "adiantum_encrypt",
    "adiantum_decrypt",
    "adiantum_aes_available",
    "nh_implementations",
    "active_nh_implementation",
    "use_nh_implementation",
    "last_nh_kernel",
]

if TYPE_CHECKING:
    from vpncrypt.crypto.pynacl import PynaclBackend

Backend = Union[NativeBackend, "PynaclBackend"]  # the same methods on both

_native = NativeBackend()
_backends: dict[str, Backend] = {"native": _native}


def backends() -> list[str]:
    return ["native", "pynacl"]


def get_backend(name: str = "native") -> Backend:
    """The backend called `name`: "native" (this project's C core) or "pynacl"."""
    if name not in _backends:
        if name == "pynacl":
            from vpncrypt.crypto.pynacl import PynaclBackend

            _backends[name] = PynaclBackend()
        else:
            raise ValueError(f"unknown crypto backend {name!r}; choose from {backends()}")
    return _backends[name]


from vpncrypt.crypto.native import open, seal, xopen, xseal  # noqa: E402,A001 - the API's names

seal_batch = _native.seal_batch
open_batch = _native.open_batch

for _var, _use in (
    ("VPNCRYPT_CHACHA_IMPL", use_implementation),
    ("VPNCRYPT_POLY1305_IMPL", use_poly1305_implementation),
    ("VPNCRYPT_NH_IMPL", use_nh_implementation),
):
    if os.environ.get(_var):
        _use(os.environ[_var])
