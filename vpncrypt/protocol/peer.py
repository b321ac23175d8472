"""Per-peer state: configuration, sessions, handshake, queue, timers, counters."""
from collections import deque

from vpncrypt.protocol.cookie import CookieState
from vpncrypt.protocol.counters import Counters

_NEG_INF = float("-inf")


class Peer:
    """One configured peer.  Created and changed through Device methods.

    Sessions: ``current`` (used to send), ``previous`` (still received on
    after a rekey) and ``next`` (a responder's keypair waiting for the
    initiator's first data packet, the key confirmation).
    Timer deadlines are absolute monotonic times or None.
    """

    def __init__(self, device, public_key: bytes, preshared_key, endpoint, persistent_keepalive, cookie_valid_for):
        self.device = device
        self.public_key = bytes(public_key)
        self._psk = bytearray(preshared_key) if preshared_key else None
        self.endpoint = endpoint
        self.persistent_keepalive = int(persistent_keepalive or 0)
        self.static_static = None
        self.cookie = CookieState(self.public_key, cookie_valid_for)
        self.pending = None
        self.last_timestamp = b""
        self.last_initiation_consumed = _NEG_INF
        self.current = None
        self.previous = None
        self.next = None
        self.queue = deque()
        self.counters = Counters()
        self.last_sent_handshake = _NEG_INF
        self.handshake_attempts = 0
        self.retransmit_at = None
        self.keepalive_at = None
        self.need_another_keepalive = False
        self.new_handshake_at = None
        self.zero_keys_at = None
        self.persistent_at = None

    @property
    def preshared_key(self):
        return bytes(self._psk) if self._psk is not None else None

    def _set_psk(self, psk):
        if self._psk is not None:
            for i in range(len(self._psk)):
                self._psk[i] = 0
        if psk is not None and len(psk) != 32:
            raise ValueError("a preshared key is 32 bytes")
        self._psk = bytearray(psk) if psk and any(psk) else None

    @property
    def allowed_ips(self) -> list[str]:
        return self.device.routing.entries(self)

    @property
    def last_handshake(self) -> float:
        """Wall-clock time of the last completed handshake (0 if never)."""
        return self.counters.last_handshake

    def keypairs(self):
        return [k for k in (self.current, self.previous, self.next) if k is not None]

    def deadlines(self):
        return [t for t in (self.retransmit_at, self.keepalive_at, self.new_handshake_at,
                            self.zero_keys_at, self.persistent_at) if t is not None]

    def __repr__(self):
        from vpncrypt.protocol.keys import encode
        return f"<Peer {encode(self.public_key)} endpoint={self.endpoint!r}>"
