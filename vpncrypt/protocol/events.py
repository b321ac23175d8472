"""What a Device call produced, for the I/O layer to apply.

Every Device call returns an Output: datagrams to send, inner packets for the
TUN, staged packets for the caller to seal (``sealing``: see
Device.batch_path), how many handshake messages wait in the session table's
queue (``handshakes``: the caller schedules Device.serve_handshakes), and
events: what happened to the protocol state, for logs and status (the I/O
layer needs none of them to move bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vpncrypt.protocol.peer import Peer

Addr = Any  # an endpoint as the session table gives it: (host, port[, flow, scope]) or None


class Sealing:
    """Packets of one peer for the caller to seal through its batch path
    (``peer``: its id in the session table), then hand the round back with
    Device.fold.  ``keepalive`` (None: not one) says the empty packet at the
    end is a keepalive, persistent (True) or not (False)."""

    __slots__ = ("peer", "packets", "keepalive")

    def __init__(self, peer: int, packets: list[bytes], keepalive: bool | None = None) -> None:
        self.peer = peer
        self.packets = packets
        self.keepalive = keepalive

    def __repr__(self) -> str:
        return f"<Sealing peer={self.peer} packets={len(self.packets)} keepalive={self.keepalive}>"


class Output:
    __slots__ = ("datagrams", "packets", "events", "sealing", "handshakes")

    def __init__(self) -> None:
        self.datagrams: list[tuple[bytes, Addr]] = []  # [(udp payload, endpoint)]
        self.packets: list[bytes] = []  # [inner IP packet]
        self.events: list[Event] = []
        self.sealing: list[Sealing] = []
        self.handshakes = 0  # messages waiting in the table's handshake queue

    def extend(self, other: Output) -> Output:
        self.datagrams.extend(other.datagrams)
        self.packets.extend(other.packets)
        self.events.extend(other.events)
        self.sealing.extend(other.sealing)
        self.handshakes = max(self.handshakes, other.handshakes)
        return self

    def __bool__(self) -> bool:
        return bool(self.datagrams or self.packets or self.events or self.sealing or self.handshakes)

    def __repr__(self) -> str:
        return (
            f"<Output datagrams={len(self.datagrams)} packets={len(self.packets)} "
            f"events={len(self.events)} sealing={len(self.sealing)} handshakes={self.handshakes}>"
        )


class _Nothing(Output):
    """The Output of a call that changed nothing the caller must act on, not
    even a deadline (one shared object: the routine batch costs no
    allocation).  Its fields are empty tuples: adding to it fails."""

    __slots__ = ()

    def __init__(self) -> None:
        for name in ("datagrams", "packets", "events", "sealing"):
            object.__setattr__(self, name, ())
        self.handshakes = 0


NOTHING: Output = _Nothing()


class Event:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class PeerEvent(Event):
    """An event about one peer, and nothing more."""

    peer: Peer


class HandshakeResponded(PeerEvent):
    """We answered the peer's initiation."""

    __slots__ = ()


class CookieReceived(PeerEvent):
    __slots__ = ()


class KeysZeroed(PeerEvent):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class HandshakeInitiated(PeerEvent):
    attempt: int  # 1 for the first initiation of a handshake, then 2, 3, ...


@dataclass(frozen=True, slots=True)
class HandshakeCompleted(PeerEvent):
    initiator: bool  # True: their response arrived; False: our response was confirmed


@dataclass(frozen=True, slots=True)
class HandshakeGaveUp(PeerEvent):
    initiations: int


@dataclass(frozen=True, slots=True)
class EndpointChanged(PeerEvent):
    endpoint: Addr
    previous: Addr = None  # known for a handshake's move; a data packet's move is the table's


@dataclass(frozen=True, slots=True)
class KeepaliveSent(PeerEvent):
    persistent: bool


@dataclass(frozen=True, slots=True)
class LoadChanged(Event):
    under_load: bool


# Only while the Device traces (Device.tracing): what crossed the socket, by
# type and size (vpncrypt.protocol.messages.classify); transport data that is
# not a keepalive is never one of them.


@dataclass(frozen=True, slots=True)
class MessageReceived(Event):
    kind: int  # messages.classify(): a MSG_* type, KEEPALIVE or MALFORMED
    size: int
    endpoint: Addr
    peer: Peer | None = None  # a keepalive's peer, by its receiver index


@dataclass(frozen=True, slots=True)
class NotTraced(Event):
    datagrams: int  # received past the trace's budget (datapath.TRACE_BURST, TRACE_RATE)


@dataclass(frozen=True, slots=True)
class MessageSent(Event):
    kind: int  # a MSG_* handshake type (a keepalive sent is KeepaliveSent)
    endpoint: Addr
