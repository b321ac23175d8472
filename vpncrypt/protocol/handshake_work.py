"""One queued handshake message as two phases: compute, then apply.

``compute()`` is the expensive part of answering an initiation (four X25519
operations and the BLAKE2s/ChaCha20-Poly1305 of Noise): it depends only on
the message, our static key (copied when the work was taken), and the
initiator's ``Peer.handshake_config`` (its static-static DH and PSK, one
immutable tuple).  It changes no state, so it may run on a worker thread
while the event loop goes on (X25519 is one libsodium call that releases the
GIL).  It reads the peers' mapping and a peer's last timestamp and last
initiation time, which only grow, to refuse early a message that the apply
phase would refuse anyway.

The apply phase (Handshakes.finish, on the Device's thread) checks that the
configuration the work used still holds (same static key generation, the
same Peer object, the same handshake_config), checks the timestamp and rate
again on the peer's current state, and only then reserves an index, installs
the session and answers.  Work that used a configuration since changed is
dropped and counted as ``unknown_peer``.

Responses and cookie replies are computed in the apply phase (an initiator
has at most one handshake in flight per peer, so a storm is initiations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from vpncrypt.crypto import AuthenticationError
from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol import keys
from vpncrypt.protocol.messages import HDR_INITIATION, Initiation, parse_initiation
from vpncrypt.protocol.noise_ik import (
    SessionKeys,
    wg_begin_consume_initiation,
    wg_finish_consume_initiation,
    wg_respond,
)
from vpncrypt.protocol.responder_native import ResponderState

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.peer import Peer

# A UDP source address as the session table gives it: (host, port), or
# (host, port, flowinfo, scope_id) for IPv6.
Address = tuple[Any, ...]


class HandshakeWork:
    __slots__ = (
        "data",
        "addr",
        "now",
        "key_generation",
        "_dev",
        "_key",
        "msg",
        "outcome",
        "peer",
        "static",
        "config",
        "timestamp",
        "response",
        "index_bytes",
    )

    def __init__(self, data: bytes, addr: Address, now: float, dev: Device, key: tuple[bytes, bytes] | None):
        self.data = data
        self.addr = addr
        self.now = now
        self.key_generation: int = dev.key_generation
        self._dev = dev
        self._key = key  # (our static private, public) as they were, or None
        self.msg: Initiation | None = None
        self.outcome: Literal["ok"] | DropReason | None = None  # once computed
        self.peer: Peer | None = None  # the Peer the initiation authenticated as
        self.static: bytes | None = None
        self.config: tuple[bytes, bytes | None] | None = None  # the peer's handshake_config the work used
        self.timestamp: bytes | None = None
        self.response: tuple[bytes, bytes, SessionKeys] | None = None  # (e_pub, encrypted empty, keys)
        self.index_bytes: bytes | None = None  # the first candidate for the response's local index

    def __repr__(self) -> str:
        return f"<HandshakeWork {self.outcome}>"

    def compute(self) -> None:
        """The pure part of the work; safe on any thread.  Never raises: an
        unexpected error leaves outcome None (counted as internal_error)."""
        if self.data[:4] != HDR_INITIATION:
            self.outcome = "ok"  # responses and cookie replies: all in the apply phase
            self._key = None
            return
        try:
            self.outcome = self._initiation()
        except Exception:
            self.outcome = None
        finally:
            self._key = None

    def _initiation(self) -> Literal["ok"] | DropReason:
        dev = self._dev
        if self._key is None:  # no static key when the work was taken
            return DropReason.UNKNOWN_PEER
        msg = self.msg = parse_initiation(self.data)
        # the native backend's Noise steps are C calls without the GIL; the
        # pynacl backend's, noise_ik.py's (the reference)
        st = ResponderState() if dev.backend == "native" else None
        try:
            if st is not None:
                static = st.begin(self._key[0], self._key[1], self.data)
            else:
                ss, static = wg_begin_consume_initiation(dev.crypto, self._key[0], self._key[1], msg)
        except AuthenticationError:
            return DropReason.BAD_TAG
        except keys.DHError:
            return DropReason.MALFORMED
        try:
            peer = dev.peers.get(static)
            if peer is None or peer.handshake_config is None:
                return DropReason.UNKNOWN_PEER
            config = peer.handshake_config
            self.peer, self.static, self.config = peer, static, config
            try:
                if st is not None:
                    self.timestamp = st.finish(config[0], self.data)
                else:
                    self.timestamp = wg_finish_consume_initiation(ss, config[0], msg)
            except AuthenticationError:
                return DropReason.BAD_TAG
            if self.timestamp <= peer.last_timestamp:
                return DropReason.REPLAY
            if self.now - peer.last_initiation_consumed < dev.config.min_initiation_interval:
                return DropReason.RATE_LIMITED
            # the random index is drawn before the ephemeral key, as
            # WireGuard's order is (its reservation is the apply phase's)
            self.index_bytes = dev.rng(4)
            e_priv = keys.generate_private(dev.rng)
            try:
                if st is not None:
                    self.response = st.respond(e_priv, self.data, static, config[1])
                else:
                    self.response = wg_respond(ss, e_priv, msg, static, config[1])
            except keys.DHError:
                return DropReason.MALFORMED
            return "ok"
        finally:
            if st is not None:
                st.wipe()
            else:
                ss.wipe()
