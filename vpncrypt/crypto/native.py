"""The native backend: vpncrypt's own C core, through cffi (kernel selection,
batches) and through the C-API module vpncrypt._oneshot (one-message calls)."""
from array import array

from vpncrypt import _oneshot
from vpncrypt._native import ffi, lib
from vpncrypt.crypto import args
from vpncrypt.crypto.errors import AuthenticationError, CounterOverflowError

_from = ffi.from_buffer
_EMPTY = b""


def _impls(count, name, available):
    return [ffi.string(name(i)).decode() for i in range(count()) if available(i)]


def _select(kind: str, name: str, count, namefn, available, select) -> None:
    if not isinstance(name, str):
        raise TypeError(f"implementation name must be a str, not {type(name).__name__}")
    every = [ffi.string(namefn(i)).decode() for i in range(count())]
    if name not in every:
        raise ValueError(f"unknown {kind} implementation {name!r}; this build has {every}")
    if select(every.index(name)) != lib.VC_OK:
        raise ValueError(f"{kind} implementation {name!r} cannot run on this CPU; "
                         f"available: {_impls(count, namefn, available)}")


def chacha_implementations() -> list[str]:
    return _impls(lib.vc_chacha_impl_count, lib.vc_chacha_impl_name, lib.vc_chacha_impl_available)


def active_chacha_implementation() -> str:
    return ffi.string(lib.vc_chacha_impl_name(lib.vc_chacha_impl_active())).decode()


def use_chacha_implementation(name: str) -> None:
    _select("ChaCha", name, lib.vc_chacha_impl_count, lib.vc_chacha_impl_name,
            lib.vc_chacha_impl_available, lib.vc_chacha_impl_select)


def poly1305_implementations() -> list[str]:
    return _impls(lib.vc_poly1305_impl_count, lib.vc_poly1305_impl_name, lib.vc_poly1305_impl_available)


def active_poly1305_implementation() -> str:
    return ffi.string(lib.vc_poly1305_impl_name(lib.vc_poly1305_impl_active())).decode()


def use_poly1305_implementation(name: str) -> None:
    _select("Poly1305", name, lib.vc_poly1305_impl_count, lib.vc_poly1305_impl_name,
            lib.vc_poly1305_impl_available, lib.vc_poly1305_impl_select)


# One message per call: the hot path of the Python API, served by the C-API
# module vpncrypt._oneshot (native/pyext/oneshot.c) instead of cffi.  It links
# no crypto code: it calls this module's C core through the table of entry
# points bound here, so the kernel selection above is the one it uses.
_oneshot._bind(int(ffi.cast("uintptr_t", lib.vc_oneshot_table())),
               AuthenticationError, CounterOverflowError)

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
    return (ffi.string(lib.vc_chacha_impl_name(c)).decode() if c >= 0 else None,
            ffi.string(lib.vc_poly1305_impl_name(p)).decode() if p >= 0 else None)


class NativeBackend:
    """seal/open/xseal/xopen and their batch forms on the native core."""

    name = "native"

    seal = staticmethod(seal)
    open = staticmethod(open)
    xseal = staticmethod(xseal)
    xopen = staticmethod(xopen)

    def seal_batch(self, key, nonces, plaintexts, aad=_EMPTY) -> list[bytes]:
        """Seal many messages under one key in one native call."""
        key = args.buf("key", key, 32)
        aad = args.buf("aad", aad)
        lens = args.batch(nonces, plaintexts, 12, sealed_in=False)
        n = len(lens)
        if n == 0:
            return []
        total = sum(lens) + 16 * n
        out = bytearray(total)
        status = ffi.new("int32_t[]", n)
        ok = lib.vc_aead_seal_packed(_from(out), _from(b"".join(plaintexts)),
                                     _from("uint32_t[]", array("I", lens)), n, _from(b"".join(nonces)),
                                     _from(aad), len(aad), _from(key), status)
        if ok != n:
            raise ValueError("a plaintext in the batch is too long for one message")
        view = memoryview(out)
        res, pos = [], 0
        for ln in lens:
            end = pos + ln + 16
            res.append(view[pos:end].tobytes())
            pos = end
        return res

    def open_batch(self, key, nonces, sealed, aad=_EMPTY) -> list:
        """Open many messages under one key in one native call; a message that
        fails to authenticate gives None in its place."""
        key = args.buf("key", key, 32)
        aad = args.buf("aad", aad)
        lens = args.batch(nonces, sealed, 12, sealed_in=True)
        n = len(lens)
        if n == 0:
            return []
        out = bytearray(sum(lens) - 16 * n)
        status = ffi.new("int32_t[]", n)
        lib.vc_aead_open_packed(_from(out), _from(b"".join(sealed)), _from("uint32_t[]", array("I", lens)), n,
                                _from(b"".join(nonces)), _from(aad), len(aad), _from(key), status)
        view = memoryview(out)
        res, pos = [], 0
        for i, ln in enumerate(lens):
            end = pos + ln - 16
            res.append(view[pos:end].tobytes() if status[i] == lib.VC_OK else None)
            pos = end
        return res


def hchacha20(key, nonce16, rounds=20) -> bytes:
    key = args.buf("key", key, 32)
    nonce16 = args.buf("nonce16", nonce16, 16)
    rounds = args.rounds(rounds)
    out = ffi.new("uint8_t[32]")
    lib.vc_hchacha20(out, _from(key), _from(nonce16), rounds)
    return ffi.buffer(out)[:]


def poly1305(key, message) -> bytes:
    key = args.buf("key", key, 32)
    message = args.buf("message", message)
    out = ffi.new("uint8_t[16]")
    lib.vc_poly1305(out, _from(message), len(message), _from(key))
    return ffi.buffer(out)[:]


# ---- NHPoly1305 and Adiantum ----

def nh_implementations() -> list[str]:
    return _impls(lib.vc_nh_impl_count, lib.vc_nh_impl_name, lib.vc_nh_impl_available)


def active_nh_implementation() -> str:
    return ffi.string(lib.vc_nh_impl_name(lib.vc_nh_impl_active())).decode()


def use_nh_implementation(name: str) -> None:
    _select("NH", name, lib.vc_nh_impl_count, lib.vc_nh_impl_name,
            lib.vc_nh_impl_available, lib.vc_nh_impl_select)


def last_nh_kernel() -> str | None:
    """The NH kernel that served this thread's last NHPoly1305 or Adiantum call."""
    n = lib.vc_last_nh_impl()
    return ffi.string(lib.vc_nh_impl_name(n)).decode() if n >= 0 else None


def nhpoly1305(key, message) -> bytes:
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

    def __init__(self, key, rounds: int = 12):
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
            raise RuntimeError("Adiantum needs AES-256 from OpenSSL's libcrypto (libcrypto.so.3 "
                               "or libcrypto.so.1.1), which could not be loaded")
        if rc == lib.VC_ERR_COUNTER:
            raise CounterOverflowError("data too long for the 32-bit ChaCha block counter")
        if rc != lib.VC_OK:
            raise ValueError(f"Adiantum failed with status {rc}")
        return bytes(out)

    def encrypt(self, tweak, data) -> bytes:
        return self._run(lib.vc_adiantum_encrypt, tweak, data)

    def decrypt(self, tweak, data) -> bytes:
        return self._run(lib.vc_adiantum_decrypt, tweak, data)


def adiantum_encrypt(key, tweak, data, rounds: int = 12) -> bytes:
    """Adiantum encryption (rounds 12: adiantum(xchacha12,aes); 20:
    adiantum(xchacha20,aes)); for many messages under one key, Adiantum(key)
    derives the subkeys once."""
    return Adiantum(key, rounds).encrypt(tweak, data)


def adiantum_decrypt(key, tweak, data, rounds: int = 12) -> bytes:
    return Adiantum(key, rounds).decrypt(tweak, data)


def adiantum_aes_available() -> bool:
    """Whether libcrypto's AES-256 could be loaded for Adiantum."""
    return bool(lib.vc_adiantum_aes_available())
