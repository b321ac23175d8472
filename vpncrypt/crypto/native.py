"""The native backend: vpncrypt's own C core, through cffi (kernel selection,
batches) and through the C-API module vpncrypt._oneshot (one-message calls)."""

from array import array
from typing import Any

import vpncrypt._oneshot as _oneshot
from vpncrypt._native import ffi, lib
from vpncrypt.crypto import args
from vpncrypt.crypto.errors import AuthenticationError, CounterOverflowError

_from = ffi.from_buffer
_EMPTY = b""


class _KernelChoice:
    """The run-time kernel choice of one primitive, through the C core's
    vc_<prefix>_impl_count/_name/_available/_active/_select entry points."""

    def __init__(self, kind: str, prefix: str):
        self.kind = kind
        self._count = getattr(lib, f"vc_{prefix}_impl_count")
        self._name = getattr(lib, f"vc_{prefix}_impl_name")
        self._available = getattr(lib, f"vc_{prefix}_impl_available")
        self._active = getattr(lib, f"vc_{prefix}_impl_active")
        self._select = getattr(lib, f"vc_{prefix}_impl_select")

    def name_of(self, index: int) -> str:
        return ffi.string(self._name(index)).decode()

    def implementations(self) -> list[str]:
        """The kernels this build has that can run on this CPU."""
        return [self.name_of(i) for i in range(self._count()) if self._available(i)]

    def active(self) -> str:
        return self.name_of(self._active())

    def use(self, name: str) -> None:
        """Select kernel `name`; ValueError if the build lacks it or the CPU cannot run it."""
        if not isinstance(name, str):
            raise TypeError(f"implementation name must be a str, not {type(name).__name__}")
        every = [self.name_of(i) for i in range(self._count())]
        if name not in every:
            raise ValueError(f"unknown {self.kind} implementation {name!r}; this build has {every}")
        if self._select(every.index(name)) != lib.VC_OK:
            raise ValueError(
                f"{self.kind} implementation {name!r} cannot run on this CPU; "
                f"available: {self.implementations()}"
            )


_CHACHA = _KernelChoice("ChaCha", "chacha")
_POLY1305 = _KernelChoice("Poly1305", "poly1305")
_NH = _KernelChoice("NH", "nh")

chacha_implementations = _CHACHA.implementations
active_chacha_implementation = _CHACHA.active
use_chacha_implementation = _CHACHA.use
poly1305_implementations = _POLY1305.implementations
active_poly1305_implementation = _POLY1305.active
use_poly1305_implementation = _POLY1305.use


# One message per call: the hot path of the Python API, served by the C-API
# module vpncrypt._oneshot (native/pyext/oneshot.c) instead of cffi.  It links
# no crypto code: it calls this module's C core through the table of entry
# points bound here, so the kernel selection above is the one it uses.
_oneshot._bind(int(ffi.cast("uintptr_t", lib.vc_oneshot_table())), AuthenticationError, CounterOverflowError)

seal = _oneshot.seal
open = _oneshot.open  # noqa: A001 - the API's name
xseal = _oneshot.xseal
xopen = _oneshot.xopen
chacha20_xor = _oneshot.chacha20_xor
AEAD = _oneshot.AEAD
XAEAD = _oneshot.XAEAD


def last_kernels() -> tuple[str | None, str | None]:
    """The (ChaCha, Poly1305) kernels that served this thread's last native
    operation, whichever binding made it; None for a primitive it did not use."""
    c, p = lib.vc_last_chacha_impl(), lib.vc_last_poly1305_impl()
    return (_CHACHA.name_of(c) if c >= 0 else None, _POLY1305.name_of(p) if p >= 0 else None)


class NativeBackend:
    """seal/open/xseal/xopen and their batch forms on the native core."""

    name = "native"

    seal = staticmethod(seal)
    open = staticmethod(open)
    xseal = staticmethod(xseal)
    xopen = staticmethod(xopen)

    def seal_batch(self, key: Any, nonces: Any, plaintexts: Any, aad: Any = _EMPTY) -> list[bytes]:
        """Seal many messages under one key in one native call."""
        key = args.buf("key", key, 32)
        aad = args.buf("aad", aad)
        lens = args.batch(nonces, plaintexts, 12, sealed_in=False)
        out = _packed(lib.vc_aead_seal_packed, key, nonces, plaintexts, lens, aad, 16)
        if out is None:
            return []
        if any(s != lib.VC_OK for s in out[1]):
            raise ValueError("a plaintext in the batch is too long for one message")
        return out[0]

    def open_batch(self, key: Any, nonces: Any, sealed: Any, aad: Any = _EMPTY) -> list[bytes | None]:
        """Open many messages under one key in one native call; a message that
        fails to authenticate gives None in its place."""
        key = args.buf("key", key, 32)
        aad = args.buf("aad", aad)
        lens = args.batch(nonces, sealed, 12, sealed_in=True)
        out = _packed(lib.vc_aead_open_packed, key, nonces, sealed, lens, aad, -16)
        if out is None:
            return []
        return [m if s == lib.VC_OK else None for m, s in zip(*out)]


def _packed(fn: Any, key: Any, nonces: Any, messages: Any, lens: list[int], aad: Any, grow: int) -> Any:
    """One vc_aead_seal_packed / vc_aead_open_packed call (`grow`: +16 or -16 bytes a
    message; the arguments checked): (the output messages, their statuses), or None
    for an empty batch."""
    n = len(lens)
    if n == 0:
        return None
    out = bytearray(sum(lens) + grow * n)
    status = ffi.new("int32_t[]", n)
    fn(
        _from(out),
        _from(b"".join(messages)),
        _from("uint32_t[]", array("I", lens)),
        n,
        _from(b"".join(nonces)),
        _from(aad),
        len(aad),
        _from(key),
        status,
    )
    view = memoryview(out)
    res, pos = [], 0
    for ln in lens:
        res.append(view[pos : pos + ln + grow].tobytes())
        pos += ln + grow
    return res, list(status)


def hchacha20(key: Any, nonce16: Any, rounds: int = 20) -> bytes:
    key = args.buf("key", key, 32)
    nonce16 = args.buf("nonce16", nonce16, 16)
    rounds = args.rounds(rounds)
    out = ffi.new("uint8_t[32]")
    lib.vc_hchacha20(out, _from(key), _from(nonce16), rounds)
    return ffi.buffer(out)[:]


def poly1305(key: Any, message: Any) -> bytes:
    key = args.buf("key", key, 32)
    message = args.buf("message", message)
    out = ffi.new("uint8_t[16]")
    lib.vc_poly1305(out, _from(message), len(message), _from(key))
    return ffi.buffer(out)[:]


# ---- NHPoly1305 and Adiantum ----


nh_implementations = _NH.implementations
active_nh_implementation = _NH.active
use_nh_implementation = _NH.use


def last_nh_kernel() -> str | None:
    """The NH kernel that served this thread's last NHPoly1305 or Adiantum call."""
    n = lib.vc_last_nh_impl()
    return _NH.name_of(n) if n >= 0 else None


def nhpoly1305(key: Any, message: Any) -> bytes:
    """NHPoly1305 (the kernel's "nhpoly1305"): a 1088-byte key (16 bytes of
    Poly1305 r, then the 1072-byte NH key), any message, a 16-byte hash."""
    key = args.buf("key", key, 1088)
    message = args.buf("message", message)
    out = ffi.new("uint8_t[16]")
    lib.vc_nhpoly1305(out, _from(message), len(message), _from(key))
    return ffi.buffer(out)[:]


class Adiantum:
    """Adiantum (XChaCha12 or XChaCha20, AES-256, NHPoly1305) under one
    32-byte key: the subkeys are derived once, here.  encrypt and decrypt take a
    tweak of 0..32 bytes and data of 16 bytes or more, and return as many bytes
    (a wide-block permutation: no tag, no expansion)."""

    __slots__ = ("_key", "rounds")

    def __init__(self, key: Any, rounds: int = 12) -> None:
        key = args.buf("key", key, 32)
        rounds = args.rounds(rounds)
        self._key = ffi.new("vc_adiantum_key *")
        lib.vc_adiantum_setkey(self._key, _from(key), rounds)
        self.rounds = rounds

    def __del__(self):
        k = getattr(self, "_key", None)
        if k is not None:
            lib.vc_adiantum_wipe(k)

    def _run(self, fn, tweak, data) -> bytes:
        tweak = args.buf("tweak", tweak)
        data = args.buf("data", data)
        if len(tweak) > 32:
            raise ValueError(f"tweak must be at most 32 bytes, got {len(tweak)}")
        if len(data) < 16:
            raise ValueError(f"data must be at least 16 bytes (one AES block), got {len(data)}")
        out = bytearray(len(data))
        rc = fn(self._key, _from(out), _from(data), len(data), _from(tweak), len(tweak))
        if rc == lib.VC_ERR_AES:
            raise RuntimeError(
                "Adiantum needs AES-256 from OpenSSL's libcrypto (libcrypto.so.3 "
                "or libcrypto.so.1.1), which could not be loaded"
            )
        if rc == lib.VC_ERR_COUNTER:
            raise CounterOverflowError("data too long for the 32-bit ChaCha block counter")
        if rc != lib.VC_OK:
            raise ValueError(f"Adiantum failed with status {rc}")
        return bytes(out)

    def encrypt(self, tweak: Any, data: Any) -> bytes:
        return self._run(lib.vc_adiantum_encrypt, tweak, data)

    def decrypt(self, tweak: Any, data: Any) -> bytes:
        return self._run(lib.vc_adiantum_decrypt, tweak, data)


def adiantum_encrypt(key: Any, tweak: Any, data: Any, rounds: int = 12) -> bytes:
    """Adiantum encryption (rounds 12: adiantum(xchacha12,aes); 20:
    adiantum(xchacha20,aes)); for many messages under one key, Adiantum(key)
    derives the subkeys once."""
    return Adiantum(key, rounds).encrypt(tweak, data)


def adiantum_decrypt(key: Any, tweak: Any, data: Any, rounds: int = 12) -> bytes:
    return Adiantum(key, rounds).decrypt(tweak, data)


def adiantum_aes_available() -> bool:
    """Whether libcrypto's AES-256 could be loaded for Adiantum."""
    return bool(lib.vc_adiantum_aes_available())
