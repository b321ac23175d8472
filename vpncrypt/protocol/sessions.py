"""The Device's side of session lifecycle.  The session table does the
rotation (current / previous / next), the key confirmation and the wiping;
this module gives it what the handshake produced: indices for handshakes,
the pending initiation, installed keypairs, and zeroing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vpncrypt.protocol.events import KeysZeroed, Output
from vpncrypt.transport import Session

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.noise_ik import PendingInitiation
    from vpncrypt.protocol.peer import Peer


class Sessions:
    def __init__(self, device: Device) -> None:
        self.dev = device

    def new_index(self, peer: Peer, first: bytes | None = None) -> int:
        """A random local index, unused in the table, reserved for the peer
        (`first`: 4 random bytes drawn earlier, tried before drawing more)."""
        table, rng = self.dev.table, self.dev.rng
        while True:
            index = int.from_bytes(first if first is not None else rng(4), "little")
            first = None
            if table.reserve_index(index, peer.pid):
                return index

    def set_pending(self, peer: Peer, pending: PendingInitiation) -> None:
        """The initiation just sent replaces any earlier one in flight."""
        self.drop_pending(peer)
        peer.pending = pending

    def drop_pending(self, peer: Peer) -> None:
        pending = peer.pending
        if pending is not None:
            self.dev.table.release_index(pending.local_index)
            pending.wipe()
            peer.pending = None

    def install(self, peer: Peer, session: Session, now: float) -> None:
        """The handshake's keys into the table under its local index (reserved
        for the peer).  For an initiator the pending initiation is done."""
        self.dev.table.install(peer.pid, session, now)
        pending = peer.pending
        if session.initiator and pending is not None and pending.local_index == session.local_index:
            pending.wipe()
            peer.pending = None

    def zero(self, peer: Peer, out: Output) -> None:
        """Every key of the peer and its handshake in flight, gone; what waited
        for a handshake is dropped (WireGuard's ZeroAndFlushAll)."""
        self.drop_pending(peer)
        self.dev.table.zero(peer.pid)
        self.dev.datapath.flush_staged(peer)
        out.events.append(KeysZeroed(peer))
