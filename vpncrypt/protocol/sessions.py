"""The Device's side of session lifecycle.  The session table does the
rotation (current / previous / next), the key confirmation and the wiping;
this module gives it what the handshake produced: indices for handshakes,
the pending initiation, installed keypairs, and zeroing."""
from vpncrypt.protocol.events import KeysZeroed


class Sessions:
    def __init__(self, device):
        self.dev = device

    def new_index(self, peer, first: bytes | None = None) -> int:
        """A random local index, unused in the table, reserved for the peer
        (`first`: 4 random bytes drawn earlier, tried before drawing more)."""
        table, rng = self.dev.table, self.dev.rng
        while True:
            index = int.from_bytes(first if first is not None else rng(4), "little")
            first = None
            if table.reserve_index(index, peer.pid):
                return index

    def set_pending(self, peer, pending) -> None:
        """The initiation just sent replaces any earlier one in flight."""
        self.drop_pending(peer)
        peer.pending = pending

    def drop_pending(self, peer) -> None:
        pending = peer.pending
        if pending is not None:
            self.dev.table.release_index(pending.local_index)
            pending.wipe()
            peer.pending = None

    def install(self, peer, local_index, remote_index, send_key, recv_key, initiator, now) -> None:
        """The handshake's keys into the table under `local_index` (reserved
        for the peer).  For an initiator the pending initiation is done."""
        self.dev.table.install(peer.pid, local_index, remote_index, send_key, recv_key, initiator, now)
        pending = peer.pending
        if initiator and pending is not None and pending.local_index == local_index:
            pending.wipe()
            peer.pending = None

    def zero(self, peer, out) -> None:
        """Every key of the peer and its handshake in flight, gone; what waited
        for a handshake is dropped (WireGuard's ZeroAndFlushAll)."""
        self.drop_pending(peer)
        self.dev.table.zero(peer.pid)
        self.dev.datapath.flush_staged(peer, "expired")
        out.events.append(KeysZeroed(peer))
