"""A transport-data session keypair.

Fields a native fast path can take over: send_key, recv_key (bytearrays),
local_index, remote_index, send_counter (next counter to use), replay.
"""
from vpncrypt.protocol.replay import ReplayWindow


class Keypair:
    __slots__ = ("send_key", "recv_key", "local_index", "remote_index", "send_counter",
                 "replay", "created", "is_initiator", "peer", "alive", "__weakref__")

    def __init__(self, send_key, recv_key, local_index, remote_index, created, is_initiator, peer):
        self.send_key = bytearray(send_key)
        self.recv_key = bytearray(recv_key)
        self.local_index = local_index
        self.remote_index = remote_index
        self.send_counter = 0
        self.replay = ReplayWindow()
        self.created = created
        self.is_initiator = is_initiator
        self.peer = peer
        self.alive = True

    def wipe(self) -> None:
        """Overwrite the keys; the keypair can no longer be used."""
        for k in (self.send_key, self.recv_key):
            for i in range(len(k)):
                k[i] = 0
        self.alive = False

    def __repr__(self):
        return (f"<Keypair local={self.local_index:#010x} remote={self.remote_index:#010x} "
                f"initiator={self.is_initiator} sent={self.send_counter} alive={self.alive}>")
