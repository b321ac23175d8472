"""A configured peer, as the protocol core sees it: its keys and settings,
its handshake state, its timers and the packets waiting for a handshake.

Its sessions, endpoint, AllowedIPs and transport counters live in the
session table under ``pid``; the properties below read them from there."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from vpncrypt.protocol.cookie import CookieState
from vpncrypt.protocol.counters import Counters
from vpncrypt.protocol.timers import PeerTimers

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.noise_ik import PendingInitiation
    from vpncrypt.transport.model import PeerStats

_NEG_INF = float("-inf")


class Peer:
    def __init__(
        self, device: Device, public_key: bytes, pid: int, persistent_keepalive: int, cookie_valid_for: float
    ) -> None:
        self.device = device
        self.public_key = bytes(public_key)
        self.pid = pid
        self._psk: bytearray | None = None
        self.persistent_keepalive = int(persistent_keepalive or 0)
        self.static_static: bytes | None = None  # DH(our static, their static), or None
        # (static_static, psk) as one immutable snapshot for handshake work
        # running off the event loop; replaced (never changed) when either
        # changes, so such work can tell that it used an old one
        self.handshake_config: tuple[bytes, bytes | None] | None = None
        self.cookie = CookieState(self.public_key, cookie_valid_for)
        self.pending: PendingInitiation | None = None
        self.last_timestamp = b""  # greatest TAI64N accepted from this peer
        self.last_initiation_consumed = _NEG_INF
        self.last_sent_handshake = _NEG_INF
        self.staged: deque[bytes] = deque()  # packets waiting for a handshake
        self.timers = PeerTimers()
        self.counters = Counters()  # handshake messages; transport counters are the table's

    # ------------------------------------------------------------ keys

    @property
    def preshared_key(self) -> bytes | None:
        return bytes(self._psk) if self._psk is not None else None

    def set_psk(self, psk: bytes | None) -> None:
        if psk is not None and len(psk) != 32:
            raise ValueError("a preshared key is 32 bytes")
        if self._psk is not None:
            self._psk[:] = bytes(32)
        self._psk = bytearray(psk) if psk and any(psk) else None
        self.refresh_handshake_config()

    def refresh_handshake_config(self) -> None:
        """A new handshake_config after static_static or the PSK changed."""
        ss = self.static_static
        self.handshake_config = None if ss is None else (ss, self.psk_bytes())

    def psk_bytes(self) -> bytes | None:
        return bytes(self._psk) if self._psk is not None else None

    # ------------------------------------------------------------ what the table holds

    @property
    def endpoint(self) -> Any:
        return self.device.table.endpoint(self.pid)

    @property
    def allowed_ips(self) -> list[str]:
        return self.device.table.routes(self.pid, text=True)

    def stats(self, now: float) -> PeerStats:
        """The table's transport counters and sessions for this peer."""
        return self.device.table.stats(self.pid, now)

    @property
    def last_handshake(self) -> float:
        """Wall-clock time of the last completed handshake (0 if never)."""
        return self.counters.last_handshake

    def __repr__(self) -> str:
        from vpncrypt.protocol.keys import encode

        return f"<Peer {encode(self.public_key)}>"
