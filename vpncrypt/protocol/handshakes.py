"""The Device's handshake side: sending initiations, and serving the
initiations, responses and cookie replies that passed the session table's
cheap checks (sizes, mac1, the cookie defence under load and the per-source
rate limit: vpncrypt.transport, native/wg_admit.c) from its handshake queue.
Sessions are installed in the session table through
vpncrypt.protocol.sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vpncrypt.crypto import AuthenticationError
from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol import keys
from vpncrypt.protocol.events import (
    CookieReceived,
    EndpointChanged,
    HandshakeInitiated,
    HandshakeResponded,
    LoadChanged,
    Output,
)
from vpncrypt.protocol.noise_ik import wg_consume_response, wg_create_initiation
from vpncrypt.protocol.handshake_work import HandshakeWork
from vpncrypt.transport import Session
from vpncrypt.protocol.messages import (
    HDR_COOKIE_REPLY,
    HDR_INITIATION,
    HDR_RESPONSE,
    pack_response_body,
    parse_response,
)

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.peer import Peer


class Handshakes:
    def __init__(self, device: Device) -> None:
        self.dev = device
        self._under_load = False
        self.waiting = 0  # handshake messages in the table's queue, at the last look

    # ------------------------------------------------------------ sending

    def initiate(self, peer: Peer, now: float, out: Output, retry: bool = False) -> None:
        """Send an initiation, at most one per REKEY_TIMEOUT (a non-retry
        also restarts the retry count), as WireGuard's
        SendHandshakeInitiation."""
        dev = self.dev
        c = dev.config
        if not retry:
            peer.timers.attempts = 0
        if now - peer.last_sent_handshake < c.rekey_timeout:
            return
        if dev.static_private is None or dev.public_key is None or peer.static_static is None:
            return
        endpoint = peer.endpoint
        if endpoint is None:
            dev.drop(DropReason.NO_ENDPOINT, peer)
            return
        peer.last_sent_handshake = now
        index = dev.sessions.new_index(peer)
        e_priv = keys.generate_private(dev.rng)
        body, pending = wg_create_initiation(
            dev.crypto,
            bytes(dev.static_private),
            dev.public_key,
            peer.public_key,
            peer.static_static,
            index,
            e_priv,
            dev.unix_now(),
            now,
        )
        dev.sessions.set_pending(peer, pending)
        dev.emit(peer, peer.cookie.add_macs(body, now), endpoint, out)
        peer.counters.handshakes_sent += 1
        dev.counters.handshakes_sent += 1
        out.events.append(HandshakeInitiated(peer, peer.timers.attempts + 1))
        t = dev.timers
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_sent", now)
        t.event(peer, "handshake_initiated", now)

    # ------------------------------------------------------------ receiving

    def serve(self, now: float, out: Output, limit: int) -> int:
        """Up to `limit` messages from the session table's handshake queue,
        newest first: they passed the cheap checks there (sizes, mac1, and
        under load mac2 and the per-source rate limit).  Newest first, a
        peer's latest initiation is answered and an older one it replaced
        fails the timestamp check before it costs a response.  Returns how
        many were taken (self.waiting: how many still wait)."""
        work = self.take(now, limit)
        for w in work:
            w.compute()
        self.finish(work, now, out)
        return len(work)

    def take(self, now: float, limit: int) -> list[HandshakeWork]:
        """Up to `limit` queued messages as HandshakeWork, newest first.  Each
        one's compute() may run on any thread, in any order; finish() then
        applies them all, on the caller's thread, in this order."""
        dev = self.dev
        key = (
            None
            if dev.static_private is None or dev.public_key is None
            else (bytes(dev.static_private), dev.public_key)
        )
        return [HandshakeWork(data, addr, now, dev, key) for data, addr in dev.table.take_handshakes(limit)]

    def finish(self, work: list[HandshakeWork], now: float, out: Output) -> None:
        """Apply computed HandshakeWork (from take(), in its order): what
        needs the peers' state, the session table and the timers."""
        dev = self.dev
        for w in work:
            try:
                self._apply(w, now, out)
            except Exception:  # a message must never take the device down
                dev.drop(DropReason.INTERNAL_ERROR)
        self.note_load(now, out)

    def note_load(self, now: float, out: Output) -> None:
        """The table's under-load state, as an event when it changes."""
        self.waiting, under_load = self.dev.table.handshakes_waiting(now)
        if under_load != self._under_load:
            self._under_load = under_load
            out.events.append(LoadChanged(under_load))

    def _apply(self, w: HandshakeWork, now: float, out: Output) -> None:
        head = w.data[:4]
        if head == HDR_INITIATION:
            self._initiation(w, now, out)
        elif head == HDR_RESPONSE:
            self._response(w.data, w.addr, now, out)
        elif head == HDR_COOKIE_REPLY:
            self._cookie_reply(w.data, now, out)
        else:  # the table queues nothing else
            self.dev.drop(DropReason.MALFORMED)

    def _initiation(self, w: HandshakeWork, now: float, out: Output) -> None:
        dev = self.dev
        if w.outcome is None:  # never computed, or it failed
            dev.drop(DropReason.INTERNAL_ERROR)
            return
        peer = w.peer
        if peer is None:
            # bad_tag, malformed, unknown_peer ("ok" always has a peer)
            dev.drop(w.outcome if w.outcome != "ok" else DropReason.INTERNAL_ERROR)
            return
        if (
            dev.key_generation != w.key_generation
            or w.static is None
            or dev.peers.get(w.static) is not peer
            or peer.handshake_config is not w.config
        ):
            # our key, the peer or its keys changed since the work began: what
            # it computed is for a configuration that is gone
            dev.drop(DropReason.UNKNOWN_PEER)
            return
        if w.outcome != "ok" and w.outcome not in (DropReason.REPLAY, DropReason.RATE_LIMITED):
            dev.drop(w.outcome, peer)  # bad_tag on the timestamp, or a DH failed
            return
        # replay and rate are checked again on the peer's state now (earlier
        # messages of this slice may have moved it); both only grow, so a
        # message the work already refused stays refused
        if w.timestamp is None:  # replay, rate_limited and ok are decided after it
            dev.drop(DropReason.INTERNAL_ERROR, peer)
            return
        if w.outcome == DropReason.REPLAY or w.timestamp <= peer.last_timestamp:
            dev.drop(DropReason.REPLAY, peer)
            return
        if (
            w.outcome == DropReason.RATE_LIMITED
            or now - peer.last_initiation_consumed < dev.config.min_initiation_interval
        ):
            dev.drop(DropReason.RATE_LIMITED, peer)
            return
        if w.response is None or w.msg is None or w.index_bytes is None:
            dev.drop(DropReason.INTERNAL_ERROR, peer)  # an "ok" work always has them
            return
        peer.last_timestamp = w.timestamp
        peer.last_initiation_consumed = now
        index = dev.sessions.new_index(peer, w.index_bytes)
        e_pub, empty, (send_key, recv_key) = w.response
        msg = w.msg
        body = pack_response_body(index, msg.sender, e_pub, empty)
        dev.count_rx(peer, len(w.data))
        _roam(dev, peer, w.addr, out)
        t = dev.timers
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_received", now)
        # Answering replaces a handshake of our own in flight (WireGuard keeps
        # one handshake per peer); the keypair waits in `next` for the
        # initiator's first message.
        dev.sessions.drop_pending(peer)
        dev.sessions.install(peer, Session(index, msg.sender, send_key, recv_key, False), now)
        peer.last_sent_handshake = now
        dev.emit(peer, peer.cookie.add_macs(body, now), w.addr, out)
        out.events.append(HandshakeResponded(peer))
        t.event(peer, "session_derived", now)
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_sent", now)

    def _response(self, data: bytes, addr: Any, now: float, out: Output) -> None:
        dev = self.dev
        msg = parse_response(data)
        if dev.static_private is None:
            dev.drop(DropReason.UNKNOWN_PEER)
            return
        pid = dev.table.index_peer(msg.receiver)
        peer = dev.by_pid.get(pid) if pid is not None else None
        pending = peer.pending if peer is not None else None
        if peer is None or pending is None or pending.local_index != msg.receiver:
            dev.drop(DropReason.UNKNOWN_INDEX)
            return
        try:
            send_key, recv_key = wg_consume_response(
                pending, bytes(dev.static_private), peer.psk_bytes(), msg
            )
        except AuthenticationError:
            dev.drop(DropReason.BAD_TAG, peer)
            return
        except keys.DHError:
            dev.drop(DropReason.MALFORMED, peer)
            return
        _roam(dev, peer, addr, out)
        dev.count_rx(peer, len(data))
        t = dev.timers
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_received", now)
        dev.sessions.install(peer, Session(pending.local_index, msg.sender, send_key, recv_key, True), now)
        t.event(peer, "session_derived", now)
        dev.handshake_complete(peer, True, now, out)
        # what waited for the handshake goes now; if nothing did, a keepalive
        # confirms the new keys to the responder
        dev.datapath.keepalive(peer, out, persistent=False)

    def _cookie_reply(self, data: bytes, now: float, out: Output) -> None:
        dev = self.dev
        pid = dev.table.index_peer(int.from_bytes(data[4:8], "little"))
        peer = dev.by_pid.get(pid) if pid is not None else None
        if peer is None:
            dev.drop(DropReason.UNKNOWN_INDEX)
            return
        if not peer.cookie.consume_reply(data, now, dev.crypto):
            dev.drop(DropReason.BAD_TAG, peer)
            return
        out.events.append(CookieReceived(peer))


def _roam(dev: Device, peer: Peer, addr: Any, out: Output) -> None:
    """An authenticated handshake message moves the peer's endpoint to where
    it came from (as a transport message does in the table); a move is an
    event, so that roaming through a handshake is traced like any other."""
    old = peer.endpoint
    dev.table.set_endpoint(peer.pid, addr)
    new = peer.endpoint
    if new != old:
        out.events.append(EndpointChanged(peer, new, old))
