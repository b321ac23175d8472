"""The native backend: vpncrypt's own C core through cffi."""
import threading
from array import array

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


# One message per call: the hot path of the Python API.  The common case (all
# arguments bytes of the right size) needs no conversion, since cffi passes
# bytes straight to `const uint8_t *`; anything else goes through args.buf
# (clear errors, any bytes-like input).  Output is written to a per-thread
# scratch buffer (cffi releases the GIL during the call) and copied out once
# with ffi.unpack; the C code writes every byte it reports, and zeroes the
# output when authentication fails.
_unpack = ffi.unpack
_alloc = ffi.new_allocator(should_clear_after_alloc=False)
_SMALL = 1 << 16     # messages below this size use the thread's scratch buffer
_local = threading.local()


def _scratch(n: int):
    """An output buffer of at least n bytes: the calling thread's own one
    (allocated once, _SMALL + 16 bytes) or, for a larger message, a new one."""
    if n > _SMALL + 16:
        return _alloc("char[]", n)
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = _alloc("char[]", _SMALL + 16)
    return buf


def _converted(key, nonce, nonce_len, data, data_name, aad):
    key = _from(args.buf("key", key, 32))
    nonce = _from(args.buf("nonce", nonce, nonce_len))
    data = args.sealed(data_name, data) if data_name == "sealed" else args.buf(data_name, data)
    return key, nonce, _from(data), _from(args.buf("aad", aad))


def _make(nonce_len: int, seal_attached, open_attached, seal_noad, open_noad):
    """seal and open for one AEAD, each a single Python frame (the names they
    use are closure cells, which load faster than globals)."""
    local, small, scratch, unpack, converted = _local, _SMALL, _scratch, _unpack, _converted

    def seal(key, nonce, plaintext, aad=_EMPTY, _bytes=bytes) -> bytes:
        if not (type(key) is _bytes and type(nonce) is _bytes and type(plaintext) is _bytes
                and type(aad) is _bytes and len(key) == 32 and len(nonce) == nonce_len):
            key, nonce, plaintext, aad = converted(key, nonce, nonce_len, plaintext, "plaintext", aad)
        n = len(plaintext)
        try:
            out = local.buf if n < small else scratch(n + 16)
        except AttributeError:
            out = scratch(n + 16)
        if (seal_attached(out, plaintext, n, aad, len(aad), key, nonce) if aad
                else seal_noad(out, plaintext, n, key, nonce)):
            raise ValueError(f"plaintext is too long for one message ({n} bytes)")
        return unpack(out, n + 16)

    def open_(key, nonce, sealed, aad=_EMPTY, _bytes=bytes) -> bytes:
        if not (type(key) is _bytes and type(nonce) is _bytes and type(sealed) is _bytes
                and type(aad) is _bytes and len(key) == 32 and len(nonce) == nonce_len
                and len(sealed) >= 16):
            key, nonce, sealed, aad = converted(key, nonce, nonce_len, sealed, "sealed", aad)
        n = len(sealed) - 16
        try:
            out = local.buf if n < small else scratch(n)
        except AttributeError:
            out = scratch(n)
        if (open_attached(out, sealed, n + 16, aad, len(aad), key, nonce) if aad
                else open_noad(out, sealed, n + 16, key, nonce)):
            raise AuthenticationError("message failed to authenticate")
        return unpack(out, n)

    return seal, open_


seal, open = _make(12, lib.vc_aead_seal_attached, lib.vc_aead_open_attached,  # noqa: A001
                   lib.vc_aead_seal_noad, lib.vc_aead_open_noad)
seal.__doc__ = "ChaCha20-Poly1305 (RFC 8439): ciphertext followed by the 16-byte tag."
open.__doc__ = "Open ciphertext||tag; raises AuthenticationError on a bad tag."
xseal, xopen = _make(24, lib.vc_xaead_seal_attached, lib.vc_xaead_open_attached,
                     lib.vc_xaead_seal_noad, lib.vc_xaead_open_noad)
xseal.__doc__ = "XChaCha20-Poly1305 (draft-irtf-cfrg-xchacha): 24-byte nonce."
xopen.__doc__ = "Open an XChaCha20-Poly1305 message; raises AuthenticationError on a bad tag."


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


def chacha20_xor(key, nonce, data, counter=0, rounds=20) -> bytes:
    key = args.buf("key", key, 32)
    nonce = args.buf("nonce", nonce, 12)
    data = args.buf("data", data)
    counter = args.integer("counter", counter, 0, 2**32)
    rounds = args.rounds(rounds)
    n = len(data)
    out = ffi.new("uint8_t[]", n)
    rc = lib.vc_chacha20_xor(out, _from(data), n, _from(key), _from(nonce), counter, rounds)
    if rc == lib.VC_ERR_COUNTER:
        raise CounterOverflowError(
            f"{n} bytes from block counter {counter} would wrap the 32-bit block counter")
    return ffi.buffer(out)[:]


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
