"""The Device's handshake side: sending initiations, and serving the
initiations, responses and cookie replies that passed the session table's
cheap checks (sizes, mac1, the cookie defence under load and the per-source
rate limit: vpncrypt.transport, native/wg_admit.c) from its handshake queue.
Sessions are installed in the session table through
vpncrypt.protocol.sessions."""
from vpncrypt.crypto import AuthenticationError
from vpncrypt.protocol import keys
from vpncrypt.protocol.events import (CookieReceived, EndpointChanged, HandshakeInitiated,
                                      HandshakeResponded, LoadChanged)
from vpncrypt.protocol.handshake import (
    wg_begin_consume_initiation, wg_consume_response, wg_create_initiation, wg_create_response,
    wg_finish_consume_initiation,
)
from vpncrypt.protocol.messages import HDR_COOKIE_REPLY, HDR_INITIATION, HDR_RESPONSE, parse_initiation, parse_response


class Handshakes:
    def __init__(self, device):
        self.dev = device
        self._under_load = False
        self.waiting = 0            # handshake messages in the table's queue, at the last look

    # ------------------------------------------------------------ sending

    def initiate(self, peer, now: float, out, retry: bool = False) -> None:
        """Send an initiation, at most one per REKEY_TIMEOUT (a non-retry
        also restarts the retry count), as WireGuard's
        SendHandshakeInitiation."""
        dev = self.dev
        c = dev.config
        if not retry:
            peer.timers.attempts = 0
        if now - peer.last_sent_handshake < c.rekey_timeout:
            return
        if dev.static_private is None or peer.static_static is None:
            return
        endpoint = peer.endpoint
        if endpoint is None:
            dev.drop("no_endpoint", peer)
            return
        peer.last_sent_handshake = now
        index = dev.sessions.new_index(peer)
        e_priv = keys.generate_private(dev.rng)
        body, pending = wg_create_initiation(dev.crypto, bytes(dev.static_private), dev.public_key,
                                             peer.public_key, peer.static_static, index, e_priv,
                                             dev.unix_now(), now)
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

    def serve(self, now: float, out, limit: int) -> int:
        """Up to `limit` messages from the session table's handshake queue,
        newest first: they passed the cheap checks there (sizes, mac1, and
        under load mac2 and the per-source rate limit).  Newest first, a
        peer's latest initiation is answered and an older one it replaced
        fails the timestamp check before it costs a response.  Returns how
        many were taken (self.waiting: how many still wait)."""
        dev = self.dev
        items = dev.table.take_handshakes(limit)
        for data, addr in items:
            try:
                self._one(data, addr, now, out)
            except Exception:       # a message must never take the device down
                dev.drop("internal_error")
        self.note_load(now, out)
        return len(items)

    def note_load(self, now: float, out) -> None:
        """The table's under-load state, as an event when it changes."""
        self.waiting, under_load = self.dev.table.handshakes_waiting(now)
        if under_load != self._under_load:
            self._under_load = under_load
            out.events.append(LoadChanged(under_load))

    def _one(self, data, addr, now, out):
        head = data[:4]
        if head == HDR_INITIATION:
            self._initiation(data, addr, now, out)
        elif head == HDR_RESPONSE:
            self._response(data, addr, now, out)
        elif head == HDR_COOKIE_REPLY:
            self._cookie_reply(data, now, out)
        else:                       # the table queues nothing else
            self.dev.drop("malformed")

    def _initiation(self, data, addr, now, out):
        dev = self.dev
        msg = parse_initiation(data)
        if dev.static_private is None:      # cleared since the message was queued
            dev.drop("unknown_peer")
            return
        try:
            ss, static = wg_begin_consume_initiation(dev.crypto, bytes(dev.static_private),
                                                     dev.public_key, msg)
        except AuthenticationError:
            dev.drop("bad_tag")
            return
        except keys.DHError:
            dev.drop("malformed")
            return
        peer = dev.peers.get(static)
        if peer is None or peer.static_static is None:
            ss.wipe()
            dev.drop("unknown_peer")
            return
        try:
            ts = wg_finish_consume_initiation(ss, peer.static_static, msg)
        except AuthenticationError:
            ss.wipe()
            dev.drop("bad_tag", peer)
            return
        if ts <= peer.last_timestamp:
            ss.wipe()
            dev.drop("replay", peer)
            return
        if now - peer.last_initiation_consumed < dev.config.min_initiation_interval:
            ss.wipe()
            dev.drop("rate_limited", peer)
            return
        peer.last_timestamp = ts
        peer.last_initiation_consumed = now
        index = dev.sessions.new_index(peer)
        try:
            body, (send_key, recv_key) = wg_create_response(
                ss, keys.generate_private(dev.rng), msg, static, peer.psk_bytes(), index)
        except keys.DHError:
            dev.table.release_index(index)
            dev.drop("malformed", peer)
            return
        dev.count_rx(peer, len(data))
        _roam(dev, peer, addr, out)
        t = dev.timers
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_received", now)
        # Answering replaces a handshake of our own in flight (WireGuard keeps
        # one handshake per peer); the keypair waits in `next` for the
        # initiator's first message.
        dev.sessions.drop_pending(peer)
        dev.sessions.install(peer, index, msg.sender, send_key, recv_key, False, now)
        peer.last_sent_handshake = now
        dev.emit(peer, peer.cookie.add_macs(body, now), addr, out)
        out.events.append(HandshakeResponded(peer))
        t.event(peer, "session_derived", now)
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_sent", now)

    def _response(self, data, addr, now, out):
        dev = self.dev
        msg = parse_response(data)
        if dev.static_private is None:
            dev.drop("unknown_peer")
            return
        pid = dev.table.index_peer(msg.receiver)
        peer = dev.by_pid.get(pid) if pid is not None else None
        pending = peer.pending if peer is not None else None
        if pending is None or pending.local_index != msg.receiver:
            dev.drop("unknown_index")
            return
        try:
            send_key, recv_key = wg_consume_response(pending, bytes(dev.static_private),
                                                     peer.psk_bytes(), msg)
        except AuthenticationError:
            dev.drop("bad_tag", peer)
            return
        except keys.DHError:
            dev.drop("malformed", peer)
            return
        _roam(dev, peer, addr, out)
        dev.count_rx(peer, len(data))
        t = dev.timers
        t.event(peer, "traversal", now)
        t.event(peer, "authenticated_received", now)
        dev.sessions.install(peer, pending.local_index, msg.sender, send_key, recv_key, True, now)
        t.event(peer, "session_derived", now)
        dev.handshake_complete(peer, True, now, out)
        # what waited for the handshake goes now; if nothing did, a keepalive
        # confirms the new keys to the responder
        dev.datapath.keepalive(peer, now, out, persistent=False)

    def _cookie_reply(self, data, now, out):
        dev = self.dev
        pid = dev.table.index_peer(int.from_bytes(data[4:8], "little"))
        peer = dev.by_pid.get(pid) if pid is not None else None
        if peer is None:
            dev.drop("unknown_index")
            return
        if not peer.cookie.consume_reply(data, now, dev.crypto):
            dev.drop("bad_tag", peer)
            return
        out.events.append(CookieReceived(peer))



def _roam(dev, peer, addr, out) -> None:
    """An authenticated handshake message moves the peer's endpoint to where
    it came from (as a transport message does in the table); a move is an
    event, so that roaming through a handshake is traced like any other."""
    old = peer.endpoint
    dev.table.set_endpoint(peer.pid, addr)
    new = peer.endpoint
    if new != old:
        out.events.append(EndpointChanged(peer, new, old))
