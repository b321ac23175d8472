"""The debug trace (`--log-level debug`): the Device's events as lines on
the ``vpncrypt.trace`` logger.

While it is on (tracing() when the Device is built, or its socket opened),
the Device adds events for what crosses the socket, classified by type and
size (vpncrypt.protocol.messages.classify: handshake messages,
keepalive-sized transport messages, malformed datagrams; nothing is
decrypted for it, so none of them is called authentic), within a budget
(protocol.datapath.TRACE_BURST, TRACE_RATE) past which they are only
counted, so a flood costs a traced daemon what it costs an untraced one;
with it off, nothing is made per packet.  The rest are the Device's own events:
handshakes started, answered, completed and given up, keys zeroed, roaming,
cookies, load.  No key material is ever logged: peers are named by a
public-key fingerprint."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from ..config.keytypes import fingerprint
from ..endpoints import format_endpoint
from ..protocol import events as E
from ..protocol import messages as M
from ..protocol.datapath import TRACE_BURST, TRACE_RATE

trace = logging.getLogger("vpncrypt.trace")

_NAMES = {
    M.MSG_INITIATION: "handshake initiation",
    M.MSG_RESPONSE: "handshake response",
    M.MSG_COOKIE_REPLY: "cookie reply",
}


def tracing() -> bool:
    """The debug trace is on."""
    return trace.isEnabledFor(logging.DEBUG)


class EventTrace:
    """The Device's events as debug lines.

    It remembers where each peer was last seen (for "endpoint changed from
    ..."), only while the debug trace is on, and only for the device's
    peers: a removed peer is forgotten (forget(), and any entry left of a
    peer the device no longer has is dropped once they add up)."""

    def __init__(self, device: Any = None) -> None:
        self.device = device
        self._endpoints: dict[bytes, Any] = {}  # public key -> the last endpoint traced

    def endpoint_set(self, public_key: bytes, endpoint: Any) -> None:
        """An endpoint set by configuration (file or UAPI): where a later
        move is traced from."""
        if tracing():
            self._endpoints[bytes(public_key)] = endpoint
            self._prune()

    def forget(self, public_key: bytes) -> None:
        self._endpoints.pop(bytes(public_key), None)

    def _prune(self) -> None:
        dev = self.device
        if dev is not None and len(self._endpoints) > 2 * len(dev.peers) + 64:
            peers = dev.peers
            self._endpoints = {k: v for k, v in self._endpoints.items() if k in peers}

    def events(self, events: Iterable[E.Event]) -> None:
        if not tracing():
            return
        for ev in events:
            line = self.line(ev)
            if line:
                trace.debug("%s", line)
        self._prune()

    def line(self, ev: E.Event) -> str | None:
        """One event's line (None: not traced)."""
        if isinstance(ev, E.MessageReceived):
            where = format_endpoint(ev.endpoint)
            if ev.kind == M.MALFORMED:
                return f"received a malformed datagram ({ev.size} bytes) from {where}"
            fp = fingerprint(ev.peer.public_key) if ev.peer is not None else None
            if ev.kind == M.KEEPALIVE:  # by its size, before its tag is checked: no claim it is one
                index = f" to the index of peer {fp}" if fp else ""
                unchecked = "(not yet authenticated)"
                return f"received a keepalive-sized transport message{index} from {where} {unchecked}"
            return f"received {_NAMES[ev.kind]} from {where}{f' (peer {fp})' if fp else ''}"
        if isinstance(ev, E.NotTraced):
            return (
                f"{ev.datagrams} datagram{'' if ev.datagrams == 1 else 's'} received past the trace's "
                f"budget ({TRACE_BURST} at once, then {TRACE_RATE:g} a second) were not traced"
            )
        if isinstance(ev, E.MessageSent):
            extra = " (under load)" if ev.kind == M.MSG_COOKIE_REPLY else ""
            return f"sent {_NAMES[ev.kind]} to {format_endpoint(ev.endpoint)}{extra}"
        peer: Any = getattr(ev, "peer", None)
        if peer is None:
            if isinstance(ev, E.LoadChanged):
                return (
                    "under load: handshake messages need a cookie"
                    if ev.under_load
                    else "no longer under load"
                )
            return None
        name = fingerprint(peer.public_key)
        if not isinstance(ev, E.EndpointChanged):
            self._endpoints[peer.public_key] = peer.endpoint  # where the peer is, for "from"
        if isinstance(ev, E.KeepaliveSent):
            return (
                f"sent {'persistent ' if ev.persistent else ''}keepalive to {format_endpoint(peer.endpoint)}"
            )
        if isinstance(ev, E.HandshakeInitiated):
            return None if ev.attempt == 1 else f"peer {name}: handshake retry (try {ev.attempt})"
        if isinstance(ev, E.HandshakeResponded):
            return f"peer {name}: handshake initiation accepted; responder keypair waits for confirmation"
        if isinstance(ev, E.HandshakeCompleted):
            if ev.initiator:
                return (
                    f"peer {name}: handshake completed as initiator "
                    f"({peer.counters.handshakes_completed} so far); new keypair in use"
                )
            return (
                f"peer {name}: handshake completed: keypair confirmed by the initiator's "
                "first message; it is now current"
            )
        if isinstance(ev, E.EndpointChanged):
            old = ev.previous if ev.previous is not None else self._endpoints.get(peer.public_key)
            self._endpoints[peer.public_key] = ev.endpoint
            return (
                f"peer {name}: endpoint changed from {format_endpoint(old) or '(none)'} "
                f"to {format_endpoint(ev.endpoint)}"
            )
        if isinstance(ev, E.HandshakeGaveUp):
            return f"peer {name}: handshake did not complete after {ev.initiations} attempts, giving up"
        if isinstance(ev, E.KeysZeroed):
            return f"peer {name}: all keys zeroed (no new session for 3 x REJECT_AFTER_TIME)"
        if isinstance(ev, E.CookieReceived):
            return f"peer {name}: cookie reply accepted (the peer is under load)"
        return None
