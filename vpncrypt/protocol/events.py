"""What a Device call produced, for the I/O layer to apply.

Every Device call returns an Output: datagrams to send, inner packets for the
TUN, and events: what happened to the protocol state, for logs and status
(the I/O layer needs none of them to move bytes)."""
from dataclasses import dataclass


class Output:
    __slots__ = ("datagrams", "packets", "events")

    def __init__(self):
        self.datagrams = []     # [(udp payload, endpoint)]
        self.packets = []       # [inner IP packet]
        self.events = []        # [Event]

    def extend(self, other: "Output") -> "Output":
        self.datagrams.extend(other.datagrams)
        self.packets.extend(other.packets)
        self.events.extend(other.events)
        return self

    def __bool__(self):
        return bool(self.datagrams or self.packets or self.events)

    def __repr__(self):
        return (f"<Output datagrams={len(self.datagrams)} packets={len(self.packets)} "
                f"events={len(self.events)}>")


class Event:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class HandshakeInitiated(Event):
    peer: object
    attempt: int            # 1 for the first initiation of a handshake, then 2, 3, ...


@dataclass(frozen=True, slots=True)
class HandshakeResponded(Event):
    peer: object            # we answered the peer's initiation


@dataclass(frozen=True, slots=True)
class HandshakeCompleted(Event):
    peer: object
    initiator: bool         # True: their response arrived; False: our response was confirmed


@dataclass(frozen=True, slots=True)
class HandshakeGaveUp(Event):
    peer: object
    initiations: int


@dataclass(frozen=True, slots=True)
class CookieReceived(Event):
    peer: object


@dataclass(frozen=True, slots=True)
class EndpointChanged(Event):
    peer: object
    endpoint: object
    previous: object = None     # known for a handshake's move; a data packet's move is the table's


@dataclass(frozen=True, slots=True)
class KeepaliveSent(Event):
    peer: object
    persistent: bool


@dataclass(frozen=True, slots=True)
class KeysZeroed(Event):
    peer: object


@dataclass(frozen=True, slots=True)
class LoadChanged(Event):
    under_load: bool


def _who(peer) -> str:
    from vpncrypt.protocol.keys import encode
    return "peer " + encode(peer.public_key)[:8] + "…"


def describe(ev: Event) -> str:
    """One log line for an event (public keys shortened; never key material)."""
    if isinstance(ev, HandshakeInitiated):
        what = "sending handshake initiation" if ev.attempt == 1 else f"retrying handshake (try {ev.attempt})"
        return f"{_who(ev.peer)}: {what}"
    if isinstance(ev, HandshakeResponded):
        return f"{_who(ev.peer)}: received handshake initiation, sent response"
    if isinstance(ev, HandshakeCompleted):
        how = "response received" if ev.initiator else "keys confirmed by the initiator"
        return f"{_who(ev.peer)}: handshake complete ({how})"
    if isinstance(ev, HandshakeGaveUp):
        return f"{_who(ev.peer)}: handshake did not complete after {ev.initiations} attempts, giving up"
    if isinstance(ev, CookieReceived):
        return f"{_who(ev.peer)}: cookie reply received (the peer is under load)"
    if isinstance(ev, EndpointChanged):
        return f"{_who(ev.peer)}: endpoint is now {ev.endpoint}"
    if isinstance(ev, KeepaliveSent):
        return f"{_who(ev.peer)}: sent {'persistent ' if ev.persistent else ''}keepalive"
    if isinstance(ev, KeysZeroed):
        return f"{_who(ev.peer)}: all keys zeroed (no new session for 540 s)"
    if isinstance(ev, LoadChanged):
        return "under load: handshakes need cookies" if ev.under_load else "no longer under load"
    return repr(ev)
