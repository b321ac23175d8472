"""Noise_IKpsk2 handshake: the generic Noise pattern and WireGuard's framing.

The ``ik_*`` functions are the bare Noise IKpsk2 message processing on a
SymmetricState; they take the protocol name / prologue from the caller so the
published Noise known-answer vector runs through exactly this code.  The
``wg_*`` functions add WireGuard's framing (indices, TAI64N timestamp, mac1 /
mac2 are added by the caller through cookie.CookieState).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vpncrypt.protocol import keys
from vpncrypt.protocol.noise import CONSTRUCTION, IDENTIFIER, AEADBackend, SymmetricState, tai64n

if TYPE_CHECKING:
    from vpncrypt.protocol.messages import Initiation, Response

SessionKeys = tuple[bytes, bytes]  # (send key, receive key)

ZERO_PSK = bytes(32)


def init_state(
    protocol_name: bytes, prologue: bytes, responder_static_pub: bytes, crypto: AEADBackend
) -> SymmetricState:
    ss = SymmetricState(protocol_name, crypto)
    ss.mix_hash(prologue)
    ss.mix_hash(responder_static_pub)  # IK pre-message: <- s
    return ss


# --- generic Noise IKpsk2 -------------------------------------------------


def ik_initiator_write(
    ss: SymmetricState, s_pub: bytes, rs_pub: bytes, e_priv: bytes, dh_ss: bytes, payload: bytes
) -> tuple[bytes, bytes, bytes]:
    """-> e, es, s, ss ; returns (e_pub, enc_static, enc_payload)."""
    e_pub = keys.public_from_private(e_priv)
    ss.mix_hash(e_pub)
    ss.mix_key(e_pub)  # psk modifier: e also mixes into the chaining key
    ss.mix_key(keys.dh(e_priv, rs_pub))
    enc_s = ss.encrypt_and_hash(s_pub)
    ss.mix_key(dh_ss)
    return e_pub, enc_s, ss.encrypt_and_hash(payload)


def ik_responder_read_static(ss: SymmetricState, s_priv: bytes, e_pub: bytes, enc_s: bytes) -> bytes:
    """First half of reading message 1; returns the initiator's static key."""
    ss.mix_hash(e_pub)
    ss.mix_key(e_pub)
    ss.mix_key(keys.dh(s_priv, e_pub))
    return ss.decrypt_and_hash(enc_s)


def ik_responder_read_payload(ss: SymmetricState, dh_ss: bytes, enc_payload: bytes) -> bytes:
    ss.mix_key(dh_ss)
    return ss.decrypt_and_hash(enc_payload)


def ik_responder_write(
    ss: SymmetricState, e_priv: bytes, re_pub: bytes, rs_pub: bytes, psk: bytes, payload: bytes
) -> tuple[bytes, bytes]:
    """<- e, ee, se, psk ; returns (e_pub, enc_payload)."""
    e_pub = keys.public_from_private(e_priv)
    ss.mix_hash(e_pub)
    ss.mix_key(e_pub)
    ss.mix_key(keys.dh(e_priv, re_pub))
    ss.mix_key(keys.dh(e_priv, rs_pub))
    ss.mix_key_and_hash(psk)
    return e_pub, ss.encrypt_and_hash(payload)


def ik_initiator_read(
    ss: SymmetricState, e_priv: bytes, s_priv: bytes, re_pub: bytes, psk: bytes, enc_payload: bytes
) -> bytes:
    ss.mix_hash(re_pub)
    ss.mix_key(re_pub)
    ss.mix_key(keys.dh(e_priv, re_pub))
    ss.mix_key(keys.dh(s_priv, re_pub))
    ss.mix_key_and_hash(psk)
    return ss.decrypt_and_hash(enc_payload)


# --- WireGuard framing ----------------------------------------------------


class PendingInitiation:
    """Initiator state between sending an initiation and its response."""

    __slots__ = ("ss", "e_priv", "local_index", "sent_at")

    def __init__(self, ss: SymmetricState, e_priv: bytes, local_index: int, sent_at: float):
        self.ss = ss
        self.e_priv = bytearray(e_priv)
        self.local_index = local_index
        self.sent_at = sent_at

    def wipe(self) -> None:
        self.e_priv[:] = bytes(len(self.e_priv))
        self.ss.wipe()

    def __repr__(self) -> str:
        return f"<PendingInitiation index={self.local_index:#010x}>"


def wg_create_initiation(
    crypto: AEADBackend,
    s_priv: bytes,
    s_pub: bytes,
    peer_pub: bytes,
    dh_ss: bytes,
    local_index: int,
    e_priv: bytes,
    unix_now: float,
    now: float,
) -> tuple[bytes, PendingInitiation]:
    """Returns (the 116 bytes before mac1, PendingInitiation)."""
    from vpncrypt.protocol.messages import pack_initiation_body

    ss = init_state(CONSTRUCTION, IDENTIFIER, peer_pub, crypto)
    e_pub, enc_s, enc_ts = ik_initiator_write(ss, s_pub, peer_pub, e_priv, dh_ss, tai64n(unix_now))
    return pack_initiation_body(local_index, e_pub, enc_s, enc_ts), PendingInitiation(
        ss, e_priv, local_index, now
    )


def wg_initiation_from(
    crypto: AEADBackend, s_priv: bytes, peer_pub: bytes, local_index: int, e_priv: bytes, unix_now: float
) -> tuple[bytes, PendingInitiation]:
    """wg_create_initiation from a static private key alone: its public key
    and the static-static DH derived here (the Device keeps both
    precomputed; the benches and tests make initiations from fresh keys)."""
    s_pub = keys.public_from_private(s_priv)
    dh_ss = keys.dh(s_priv, peer_pub)
    return wg_create_initiation(crypto, s_priv, s_pub, peer_pub, dh_ss, local_index, e_priv, unix_now, 0.0)


def wg_begin_consume_initiation(
    crypto: AEADBackend, s_priv: bytes, s_pub: bytes, msg: Initiation
) -> tuple[SymmetricState, bytes]:
    """Decrypts the initiator's static key; returns (ss, initiator static pub)."""
    ss = init_state(CONSTRUCTION, IDENTIFIER, s_pub, crypto)
    static = ik_responder_read_static(ss, s_priv, msg.ephemeral, msg.static)
    return ss, static


def wg_finish_consume_initiation(ss: SymmetricState, dh_ss: bytes, msg: Initiation) -> bytes:
    """Returns the 12-byte TAI64N timestamp."""
    return ik_responder_read_payload(ss, dh_ss, msg.timestamp)


def wg_respond(
    ss: SymmetricState, e_priv: bytes, initiation: Initiation, initiator_static: bytes, psk: bytes | None
) -> tuple[bytes, bytes, SessionKeys]:
    """The Noise part of a response: (e_pub, encrypted empty payload,
    (send_key, recv_key)); wipes ss.  The local index is not part of it (it
    is framing), so this can run before an index is reserved."""
    try:
        e_pub, empty = ik_responder_write(
            ss, e_priv, initiation.ephemeral, initiator_static, psk or ZERO_PSK, b""
        )
        t_i2r, t_r2i = ss.split()
    finally:
        ss.wipe()
    return e_pub, empty, (t_r2i, t_i2r)


def wg_create_response(
    ss: SymmetricState,
    e_priv: bytes,
    initiation: Initiation,
    initiator_static: bytes,
    psk: bytes | None,
    local_index: int,
) -> tuple[bytes, SessionKeys]:
    """Returns (the 60 bytes before mac1, (send_key, recv_key)); wipes ss."""
    from vpncrypt.protocol.messages import pack_response_body

    e_pub, empty, session_keys = wg_respond(ss, e_priv, initiation, initiator_static, psk)
    return pack_response_body(local_index, initiation.sender, e_pub, empty), session_keys


def wg_consume_response(
    pending: PendingInitiation, s_priv: bytes, psk: bytes | None, msg: Response
) -> SessionKeys:
    """Returns (send_key, recv_key) for the initiator.

    The message is processed on a copy of the pending state: a response that
    fails (a forged one with the right index and a valid mac1, say) leaves
    the pending handshake as it was, so the real response still completes
    it.  Raises AuthenticationError or keys.DHError."""
    ss = pending.ss.copy()
    try:
        ik_initiator_read(ss, bytes(pending.e_priv), s_priv, msg.ephemeral, psk or ZERO_PSK, msg.empty)
        t_i2r, t_r2i = ss.split()
    finally:
        ss.wipe()
    return t_i2r, t_r2i
