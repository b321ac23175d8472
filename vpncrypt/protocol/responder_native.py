"""The responder's Noise work for one initiation in the native core
(native/wg_handshake.c), which runs without the GIL: the same three steps as
noise_ik.py's wg_begin_consume_initiation, wg_finish_consume_initiation and
wg_respond, on a 96-byte state the caller keeps between them.  X25519 is
libsodium's (through PyNaCl, as keys.dh): the C code is given the addresses
of its functions.

    st = ResponderState()
    static = st.begin(s_priv, s_pub, message)     # AuthenticationError, keys.DHError
    timestamp = st.finish(static_static, message)
    e_pub, empty, (send_key, recv_key) = st.respond(e_priv, message, static, psk)
    st.wipe()                                      # also done by respond and on failure
"""

from nacl._sodium import ffi as _sodium_ffi, lib as _sodium_lib

from vpncrypt._native import ffi, lib
from vpncrypt.crypto import AuthenticationError
from vpncrypt.protocol import keys
from vpncrypt.wire import INITIATION_LEN

_X25519 = int(_sodium_ffi.cast("uintptr_t", _sodium_ffi.addressof(_sodium_lib, "crypto_scalarmult")))
_X25519_BASE = int(
    _sodium_ffi.cast("uintptr_t", _sodium_ffi.addressof(_sodium_lib, "crypto_scalarmult_base"))
)
_ZERO_PSK = bytes(32)
_INITIATION_BODY = INITIATION_LEN - 32  # everything before mac1 and mac2


def _check(rc: int) -> None:
    if rc == lib.VC_WG_HS_AUTH:
        raise AuthenticationError("handshake message failed authentication")
    if rc == lib.VC_WG_HS_DH:
        raise keys.DHError("X25519 shared secret is all zero")
    if rc != 0:
        raise RuntimeError("vc_wg_hs: unexpected status")


class ResponderState:
    __slots__ = ("_st",)

    def __init__(self) -> None:
        self._st = ffi.new("uint8_t[96]")

    def begin(self, s_priv: bytes, s_pub: bytes, message: bytes) -> bytes:
        """The initiator's static public key, decrypted."""
        if len(message) < _INITIATION_BODY:
            raise ValueError(f"an initiation is {INITIATION_LEN} bytes")
        static = ffi.new("uint8_t[32]")
        _check(lib.vc_wg_hs_begin(_X25519, self._st, s_priv, s_pub, message, static))
        return bytes(ffi.buffer(static))

    def finish(self, static_static: bytes, message: bytes) -> bytes:
        """The 12-byte TAI64N timestamp, decrypted."""
        ts = ffi.new("uint8_t[12]")
        _check(lib.vc_wg_hs_finish(self._st, static_static, message, ts))
        return bytes(ffi.buffer(ts))

    def respond(
        self, e_priv: bytes, message: bytes, initiator_static: bytes, psk: bytes | None
    ) -> tuple[bytes, bytes, tuple[bytes, bytes]]:
        """(e_pub, encrypted empty payload, (send_key, recv_key)); the state is wiped."""
        e_pub, empty = ffi.new("uint8_t[32]"), ffi.new("uint8_t[16]")
        send, recv = ffi.new("uint8_t[32]"), ffi.new("uint8_t[32]")
        _check(
            lib.vc_wg_hs_respond(
                _X25519,
                _X25519_BASE,
                self._st,
                e_priv,
                message[8:40],
                initiator_static,
                psk or _ZERO_PSK,
                e_pub,
                empty,
                send,
                recv,
            )
        )
        out = (
            bytes(ffi.buffer(e_pub)),
            bytes(ffi.buffer(empty)),
            (bytes(ffi.buffer(send)), bytes(ffi.buffer(recv))),
        )
        ffi.memmove(send, bytes(32), 32)
        ffi.memmove(recv, bytes(32), 32)
        return out

    def wipe(self) -> None:
        ffi.memmove(self._st, bytes(96), 96)
