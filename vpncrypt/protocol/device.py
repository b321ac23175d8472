"""The sans-I/O WireGuard device: the object the asyncio daemon drives.

No sockets, no clocks, no threads.  Every call that depends on time takes
``now`` (monotonic seconds); randomness comes from ``rng(n)``; the only wall
clock is ``wallclock()`` (for the TAI64N initiation timestamp and `wg show`'s
last-handshake time).

    dev = Device(private_key, *, listen_port=0, rng=os.urandom,
                 wallclock=time.time, timer_config=None, crypto=None,
                 under_load_threshold=4096, ratelimit_rate=20, ratelimit_burst=5)
    dev.public_key, dev.private_key, dev.peers -> {public_key: Peer}
    dev.set_private_key(private_key)
    dev.add_peer(public_key, *, preshared_key=None, allowed_ips=(), endpoint=None,
                 persistent_keepalive=0) -> Peer
    dev.update_peer(public_key, *, preshared_key=..., endpoint=..., persistent_keepalive=...,
                    allowed_ips=None, replace_allowed_ips=False) -> Peer
    dev.remove_peer(public_key); dev.remove_allowed_ip(public_key, cidr); dev.clear_peers()

    dev.receive_datagrams([(udp_payload, addr), ...], now) -> Output
    dev.receive_datagram(udp_payload, addr, now) -> Output
    dev.send_packets([ip_packet, ...], now) -> Output
    dev.handle_timers(now) -> Output
    dev.next_deadline() -> float | None     # call handle_timers at (or after) it

    Output.datagrams: list[(udp_payload, addr)] to send; Output.packets: list of
    decrypted inner IP packets for the TUN.

``addr`` is any hashable endpoint; it is stored for roaming and handed back.
For the cookie (mac2) it is turned into bytes by cookie.addr_bytes (IP bytes +
port for (host, port) tuples) and the rate limiter keys on its host part.

Transport data is batched: the data messages of one receive call are grouped
by keypair and opened with one ``open_batch`` per group; outgoing packets are
sealed with one ``seal_batch`` per peer.  Handshake and cookie messages in a
receive batch are processed before its data messages.

Under load (cookie.LoadMonitor: more than ``under_load_threshold`` handshake
messages in one second, or ``device.load.force = True``) handshake messages
need a valid mac2, else they are answered with a cookie reply; those with a
valid mac2 then pass the per-source token bucket.

Drops are counted in ``device.counters.drops`` (and the peer's, when known).
"""
import os
import time

from vpncrypt.crypto import AuthenticationError, get_backend
from vpncrypt.protocol import keys
from vpncrypt.protocol.cookie import CookieChecker, LoadMonitor, RateLimiter, addr_bytes, addr_host
from vpncrypt.protocol.counters import Counters
from vpncrypt.protocol.handshake import (
    PendingInitiation, wg_begin_consume_initiation, wg_consume_response, wg_create_initiation,
    wg_create_response, wg_finish_consume_initiation,
)
from vpncrypt.protocol.keypair import Keypair
from vpncrypt.protocol.messages import (
    COOKIE_REPLY_LEN, HDR_COOKIE_REPLY, HDR_INITIATION, HDR_RESPONSE, HDR_TRANSPORT,
    INIT_MAC1, INITIATION_LEN, RESP_MAC1, RESPONSE_LEN, TRANSPORT_MIN_LEN,
    parse_initiation, parse_response,
)
from vpncrypt.protocol.peer import Peer
from vpncrypt.protocol.routing import AllowedIPs
from vpncrypt.protocol.timers import TimerConfig

__all__ = ["Device", "Output"]

_ZERO4 = b"\x00\x00\x00\x00"
_PAD = [bytes(i) for i in range(16)]
_KEEP = object()


class Output:
    """What a Device call produced: datagrams to send, packets for the TUN."""

    __slots__ = ("datagrams", "packets")

    def __init__(self):
        self.datagrams = []
        self.packets = []

    def extend(self, other: "Output") -> "Output":
        self.datagrams.extend(other.datagrams)
        self.packets.extend(other.packets)
        return self

    def __repr__(self):
        return f"<Output datagrams={len(self.datagrams)} packets={len(self.packets)}>"


class Device:
    def __init__(self, private_key: bytes | None, *, listen_port: int = 0, rng=os.urandom,
                 wallclock=time.time, timer_config: TimerConfig | None = None, crypto=None,
                 under_load_threshold: int = 4096, ratelimit_rate: float = 20.0,
                 ratelimit_burst: int = 5):
        self.listen_port = listen_port
        self.rng = rng
        self.wallclock = wallclock
        self.config = timer_config or TimerConfig()
        self.crypto = crypto if crypto is not None else get_backend("native")
        self.peers: dict[bytes, Peer] = {}
        self.index: dict[int, object] = {}  # local index -> Keypair | PendingInitiation
        self.routing = AllowedIPs()
        self.counters = Counters()
        self.load = LoadMonitor(under_load_threshold)
        self.ratelimiter = RateLimiter(ratelimit_rate, ratelimit_burst)
        self._last_wall = float("-inf")
        # The caller's clock may jump back; inside, time never does (see _clock).
        self._clock_offset = 0.0
        self._last_now = float("-inf")
        self.strict = False  # tests: re-raise instead of counting "internal_error"
        self._private = None
        self.public_key = None
        self.checker = CookieChecker(bytes(32), self.crypto, rng, self.config.cookie_secret_max_age)
        if private_key is not None:
            self.set_private_key(private_key)

    def __repr__(self):
        pub = keys.encode(self.public_key) if self.public_key else None
        return f"<Device public_key={pub} peers={len(self.peers)}>"

    # ------------------------------------------------------------ configuration

    @property
    def private_key(self) -> bytes | None:
        return bytes(self._private) if self._private is not None else None

    def set_private_key(self, private_key: bytes | None) -> None:
        """Set (or clear) the static key; re-derives each peer's static-static
        DH and retires every session and pending handshake."""
        if self._private is not None:
            for i in range(32):
                self._private[i] = 0
        if private_key is None or not any(private_key):
            self._private = None
            self.public_key = None
        else:
            self._private = bytearray(keys.clamp(bytes(private_key)))
            self.public_key = keys.public_from_private(bytes(self._private))
            self.checker.set_public_key(self.public_key)
            same = self.peers.get(self.public_key)
            if same is not None:  # a peer cannot be ourselves
                self.remove_peer(self.public_key)
        for peer in self.peers.values():
            self._precompute(peer)
            self._reset_sessions(peer)

    def _precompute(self, peer: Peer) -> None:
        peer.static_static = None
        if self._private is not None:
            try:
                peer.static_static = keys.dh(bytes(self._private), peer.public_key)
            except keys.DHError:
                peer.static_static = None

    def add_peer(self, public_key: bytes, *, preshared_key=None, allowed_ips=(), endpoint=None,
                 persistent_keepalive: int = 0) -> Peer:
        public_key = bytes(public_key)
        if len(public_key) != 32:
            raise ValueError("a public key is 32 bytes")
        if public_key in self.peers:
            return self.update_peer(public_key, preshared_key=preshared_key, endpoint=endpoint,
                                    persistent_keepalive=persistent_keepalive, allowed_ips=allowed_ips)
        if public_key == self.public_key:
            raise ValueError("a peer cannot have the interface's own public key")
        c = self.config
        peer = Peer(self, public_key, None, endpoint, persistent_keepalive,
                    c.cookie_secret_max_age - c.cookie_secret_latency)
        peer._set_psk(preshared_key)
        self._precompute(peer)
        self.peers[public_key] = peer
        for cidr in allowed_ips:
            self.routing.insert(cidr, peer)
        if peer.persistent_keepalive:
            peer.persistent_at = float("-inf")  # send one at the next handle_timers
        return peer

    def update_peer(self, public_key: bytes, *, preshared_key=_KEEP, endpoint=_KEEP,
                    persistent_keepalive=_KEEP, allowed_ips=None, replace_allowed_ips=False) -> Peer:
        peer = self.peers[bytes(public_key)]
        if preshared_key is not _KEEP:
            peer._set_psk(preshared_key)
        if endpoint is not _KEEP and endpoint is not None:
            peer.endpoint = endpoint
        if persistent_keepalive is not _KEEP and persistent_keepalive is not None:
            old = peer.persistent_keepalive
            peer.persistent_keepalive = int(persistent_keepalive)
            if peer.persistent_keepalive and not old:
                peer.persistent_at = float("-inf")
            elif not peer.persistent_keepalive:
                peer.persistent_at = None
        if replace_allowed_ips:
            self.routing.remove_peer(peer)
        for cidr in allowed_ips or ():
            self.routing.insert(cidr, peer)
        return peer

    def remove_allowed_ip(self, public_key: bytes, cidr) -> None:
        peer = self.peers[bytes(public_key)]
        self.routing.remove(cidr, peer)

    def remove_peer(self, public_key: bytes) -> None:
        peer = self.peers.pop(bytes(public_key), None)
        if peer is None:
            return
        self._reset_sessions(peer)
        peer._set_psk(None)
        peer.queue.clear()
        self.routing.remove_peer(peer)

    def clear_peers(self) -> None:
        for pub in list(self.peers):
            self.remove_peer(pub)

    # ------------------------------------------------------------ helpers

    def _new_index(self) -> int:
        while True:
            i = int.from_bytes(self.rng(4), "little")
            if i not in self.index:
                return i

    def _jitter(self) -> float:
        return int.from_bytes(self.rng(2), "little") / 65535.0 * self.config.rekey_timeout_jitter

    def _unix_now(self) -> float:
        t = self.wallclock()
        if t <= self._last_wall:  # keep initiation timestamps strictly increasing
            t = self._last_wall + 1e-6
        self._last_wall = t
        return t

    def _retire(self, kp) -> None:
        if kp is None:
            return
        if self.index.get(kp.local_index) is kp:
            del self.index[kp.local_index]
        kp.wipe()

    def _drop_pending(self, peer: Peer) -> None:
        p = peer.pending
        if p is not None:
            if self.index.get(p.local_index) is p:
                del self.index[p.local_index]
            p.wipe()
            peer.pending = None

    def _reset_sessions(self, peer: Peer) -> None:
        for kp in peer.keypairs():
            self._retire(kp)
        peer.current = peer.previous = peer.next = None
        self._drop_pending(peer)
        peer.retransmit_at = peer.keepalive_at = peer.new_handshake_at = peer.zero_keys_at = None

    def _drop(self, reason: str, peer=None, n: int = 1) -> None:
        self.counters.drop(reason, n)
        if peer is not None:
            peer.counters.drop(reason, n)

    def _emit(self, peer: Peer, datagram: bytes, out: Output) -> None:
        out.datagrams.append((datagram, peer.endpoint))
        n = len(datagram)
        peer.counters.tx_packets += 1
        peer.counters.tx_bytes += n
        self.counters.tx_packets += 1
        self.counters.tx_bytes += n

    def _rx(self, peer: Peer, n_bytes: int, n_packets: int = 1) -> None:
        peer.counters.rx_packets += n_packets
        peer.counters.rx_bytes += n_bytes
        self.counters.rx_packets += n_packets
        self.counters.rx_bytes += n_bytes

    # timer events (the WireGuard timer state machine)

    def _t_authenticated_received(self, peer):
        peer.new_handshake_at = None

    def _t_authenticated_sent(self, peer):
        peer.keepalive_at = None

    def _t_traversal(self, peer, now):
        if peer.persistent_keepalive:
            peer.persistent_at = now + peer.persistent_keepalive

    def _t_data_sent(self, peer, now):
        if peer.new_handshake_at is None:
            c = self.config
            peer.new_handshake_at = now + c.keepalive_timeout + c.rekey_timeout + self._jitter()

    def _t_data_received(self, peer, now):
        if peer.keepalive_at is None:
            peer.keepalive_at = now + self.config.keepalive_timeout
        else:
            peer.need_another_keepalive = True

    def _t_handshake_complete(self, peer):
        peer.retransmit_at = None
        peer.handshake_attempts = 0
        peer.counters.handshakes_completed += 1
        self.counters.handshakes_completed += 1
        w = self.wallclock()
        peer.counters.last_handshake = w
        self.counters.last_handshake = w

    def _t_session_derived(self, peer, now):
        peer.zero_keys_at = now + 3 * self.config.reject_after_time

    # ------------------------------------------------------------ handshake out

    def _initiate(self, peer: Peer, now: float, out: Output, is_retry: bool = False) -> None:
        c = self.config
        if not is_retry:
            peer.handshake_attempts = 0
        if now - peer.last_sent_handshake < c.rekey_timeout:
            return
        if self._private is None or peer.static_static is None:
            return
        if peer.endpoint is None:
            self._drop("no_endpoint", peer)
            return
        peer.last_sent_handshake = now
        self._drop_pending(peer)
        local_index = self._new_index()
        e_priv = keys.generate_private(self.rng)
        body, pending = wg_create_initiation(self.crypto, bytes(self._private), self.public_key,
                                             peer.public_key, peer.static_static, local_index,
                                             e_priv, self._unix_now(), now)
        pending.peer = peer
        self.index[local_index] = pending
        peer.pending = pending
        self._emit(peer, peer.cookie.add_macs(body, now), out)
        peer.counters.handshakes_sent += 1
        self.counters.handshakes_sent += 1
        self._t_traversal(peer, now)
        self._t_authenticated_sent(peer)
        peer.retransmit_at = now + c.rekey_timeout + self._jitter()

    # ------------------------------------------------------------ receive

    def receive_datagram(self, data: bytes, addr, now: float) -> Output:
        return self.receive_datagrams([(data, addr)], now)

    def _clock(self, now: float) -> float:
        """The caller's `now` on the Device's own clock, which never runs
        backwards: after a backward jump it carries on from where it was (as
        if time had stood still), so no deadline is pushed into the far future
        and no session gets stuck.  Forward jumps pass through: keys expire and
        handshakes start again, as they would after a suspend."""
        t = now + self._clock_offset
        if t < self._last_now:
            self._clock_offset += self._last_now - t
            t = self._last_now
        self._last_now = t
        return t

    def external_time(self, t: float) -> float:
        """A time on the Device's clock (a deadline, a key's expiry) on the caller's."""
        return t - self._clock_offset

    def receive_datagrams(self, datagrams, now: float) -> Output:
        now = self._clock(now)
        out = Output()
        index_get = self.index.get
        groups = {}
        handshakes = []
        reject_after = self.config.reject_after_messages
        for data, addr in datagrams:
            if len(data) >= TRANSPORT_MIN_LEN and data[:4] == HDR_TRANSPORT:
                kp = index_get(int.from_bytes(data[4:8], "little"))
                if kp is None or kp.__class__ is not Keypair:
                    self._drop("unknown_index")
                    continue
                cb = data[8:16]
                ctr = int.from_bytes(cb, "little")
                if ctr >= reject_after or not kp.replay.check(ctr):
                    self._drop("replay", kp.peer)
                    continue
                g = groups.get(kp)
                if g is None:
                    g = groups[kp] = ([], [], [])
                g[0].append(_ZERO4 + cb)
                g[1].append(data[16:])
                g[2].append((ctr, len(data), addr))
            else:
                handshakes.append((data, addr))
        if handshakes:
            self.load.record(sum(1 for d, _ in handshakes if d[:1] in (b"\x01", b"\x02")), now)
            for data, addr in handshakes:
                try:
                    self._handle_control(data, addr, now, out)
                except Exception:  # defensive: a bad message must never escape
                    if self.strict:
                        raise
                    self._drop("internal_error")
        for kp, group in groups.items():
            self._receive_data(kp, group, now, out)
        return out

    def _handle_control(self, data, addr, now, out):
        n = len(data)
        head = bytes(data[:4])
        if head == HDR_INITIATION and n == INITIATION_LEN:
            self._receive_initiation(bytes(data), addr, now, out)
        elif head == HDR_RESPONSE and n == RESPONSE_LEN:
            self._receive_response(bytes(data), addr, now, out)
        elif head == HDR_COOKIE_REPLY and n == COOKIE_REPLY_LEN:
            self._receive_cookie_reply(bytes(data), now)
        else:
            self._drop("malformed")

    def _dos_check(self, data, mac1_off, sender_index, addr, now, out) -> bool:
        """mac1, and under load mac2 + rate limit; False if the message is dropped."""
        if self._private is None:
            self._drop("unknown_peer")
            return False
        if not self.checker.check_mac1(data, mac1_off):
            self._drop("bad_mac1")
            return False
        if self.load.under_load(now):
            src = addr_bytes(addr)
            if not self.checker.check_mac2(data, mac1_off, src, now):
                out.datagrams.append((self.checker.make_reply(data, mac1_off, sender_index, src, now), addr))
                self._drop("cookie_sent")
                return False
            if not self.ratelimiter.allow(addr_host(addr), now):
                self._drop("rate_limited")
                return False
        return True

    def _receive_initiation(self, data, addr, now, out):
        msg = parse_initiation(data)
        if not self._dos_check(data, INIT_MAC1[0], msg.sender, addr, now, out):
            return
        try:
            ss, static = wg_begin_consume_initiation(self.crypto, bytes(self._private), self.public_key, msg)
        except AuthenticationError:
            self._drop("bad_tag")
            return
        except keys.DHError:
            self._drop("malformed")
            return
        peer = self.peers.get(static)
        if peer is None or peer.static_static is None:
            self._drop("unknown_peer")
            return
        try:
            ts = wg_finish_consume_initiation(ss, peer.static_static, msg)
        except AuthenticationError:
            self._drop("bad_tag", peer)
            return
        if ts <= peer.last_timestamp:
            self._drop("replay", peer)
            return
        if now - peer.last_initiation_consumed < self.config.min_initiation_interval:
            self._drop("rate_limited", peer)
            return
        peer.last_timestamp = ts
        peer.last_initiation_consumed = now
        local_index = self._new_index()
        try:
            body, (send_key, recv_key) = wg_create_response(
                ss, keys.generate_private(self.rng), msg, static, peer._psk and bytes(peer._psk), local_index)
        except keys.DHError:
            self._drop("malformed", peer)
            return
        self._rx(peer, len(data))
        peer.endpoint = addr
        # A responder's keypair waits in `next` for key confirmation.
        self._drop_pending(peer)
        self._retire(peer.next)
        self._retire(peer.previous)
        peer.previous = None
        kp = Keypair(send_key, recv_key, local_index, msg.sender, now, False, peer)
        self.index[local_index] = kp
        peer.next = kp
        self._emit(peer, peer.cookie.add_macs(body, now), out)
        self._t_authenticated_received(peer)
        self._t_traversal(peer, now)
        self._t_authenticated_sent(peer)
        self._t_session_derived(peer, now)

    def _receive_response(self, data, addr, now, out):
        msg = parse_response(data)
        if not self._dos_check(data, RESP_MAC1[0], msg.sender, addr, now, out):
            return
        pending = self.index.get(msg.receiver)
        if pending is None or pending.__class__ is not PendingInitiation or pending.peer.pending is not pending:
            self._drop("unknown_index")
            return
        peer = pending.peer
        try:
            send_key, recv_key = wg_consume_response(pending, bytes(self._private),
                                                     peer._psk and bytes(peer._psk), msg)
        except AuthenticationError:
            self._drop("bad_tag", peer)
            return
        except keys.DHError:
            self._drop("malformed", peer)
            return
        self._drop_pending(peer)
        kp = Keypair(send_key, recv_key, pending.local_index, msg.sender, now, True, peer)
        self.index[kp.local_index] = kp
        if peer.next is not None:
            new_previous = peer.next
            peer.next = None
            self._retire(peer.current)
        else:
            new_previous = peer.current
        self._retire(peer.previous)
        peer.previous = new_previous
        peer.current = kp
        self._rx(peer, len(data))
        peer.endpoint = addr
        self._t_handshake_complete(peer)
        self._t_session_derived(peer, now)
        self._t_authenticated_received(peer)
        self._t_traversal(peer, now)
        # Send what waited for the handshake; otherwise a keepalive confirms the keys.
        self._send_to_peer(peer, [] if peer.queue else [b""], now, out)

    def _receive_cookie_reply(self, data, now):
        entry = self.index.get(int.from_bytes(data[4:8], "little"))
        if entry is None:
            self._drop("unknown_index")
            return
        peer = entry.peer
        if not peer.cookie.consume_reply(data, now, self.crypto):
            self._drop("bad_tag", peer)

    def _receive_data(self, kp: Keypair, group, now, out):
        nonces, sealed, meta = group
        peer = kp.peer
        if not kp.alive:
            self._drop("unknown_index", peer, len(nonces))
            return
        c = self.config
        if now - kp.created >= c.reject_after_time:
            self._drop("expired", peer, len(nonces))
            return
        plains = self.crypto.open_batch(kp.recv_key, nonces, sealed)
        update = kp.replay.update
        lookup_v4 = self.routing.lookup_v4
        lookup_v6 = self.routing.lookup_v6
        packets = out.packets
        n_auth = n_bytes = 0
        got_data = False
        last_addr = None
        for pt, (ctr, size, addr) in zip(plains, meta):
            if pt is None:
                self._drop("bad_tag", peer)
                continue
            if not update(ctr):
                self._drop("replay", peer)
                continue
            n_auth += 1
            n_bytes += size
            last_addr = addr
            if not pt:
                continue  # keepalive
            got_data = True
            v = pt[0] >> 4
            if v == 4 and len(pt) >= 20:
                total = (pt[2] << 8) | pt[3]
                owner = lookup_v4(int.from_bytes(pt[12:16], "big"))
            elif v == 6 and len(pt) >= 40:
                total = 40 + ((pt[4] << 8) | pt[5])
                owner = lookup_v6(int.from_bytes(pt[8:24], "big"))
            else:
                self._drop("malformed", peer)
                continue
            if total > len(pt) or total < 20:
                self._drop("malformed", peer)
                continue
            if owner is not peer:
                self._drop("source_not_allowed", peer)
                continue
            packets.append(pt if total == len(pt) else pt[:total])
        if n_auth:
            self._after_data_received(kp, n_auth, n_bytes, got_data, last_addr, now, out)

    def _after_data_received(self, kp, n_auth, n_bytes, got_data, addr, now, out):
        """Everything that follows authenticated transport data on `kp`:
        counters, roaming, key confirmation and the timers."""
        peer = kp.peer
        self._rx(peer, n_bytes, n_auth)
        peer.endpoint = addr
        if kp is peer.next:  # key confirmation: the initiator used the new keypair
            self._retire(peer.previous)
            peer.previous = peer.current
            peer.current = kp
            peer.next = None
            self._t_handshake_complete(peer)
            if peer.queue:
                self._send_to_peer(peer, [], now, out)
        self._t_authenticated_received(peer)
        self._t_traversal(peer, now)
        if got_data:
            self._t_data_received(peer, now)
        if (kp is peer.current and kp.is_initiator
                and now - kp.created >= self.config.rekey_on_receive_age):
            self._initiate(peer, now, out)

    # ------------------------------------------------------------ native fast path

    def note_data_received(self, local_index: int, n_packets: int, n_bytes: int, got_data: bool,
                           addr, now: float) -> Output:
        """Transport data on the keypair `local_index` was opened outside this
        object (the native fast path): apply what follows it, as if it had
        come through receive_datagrams."""
        out = Output()
        now = self._clock(now)
        kp = self.index.get(local_index)
        if kp is not None and kp.__class__ is Keypair and kp.alive:
            self._after_data_received(kp, n_packets, n_bytes, got_data, addr, now, out)
        return out

    def note_data_sent(self, peer: Peer, n_packets: int, n_bytes: int, sent_data: bool,
                       now: float) -> Output:
        """Transport data for `peer` was sealed outside this object on its
        current keypair (whose send_counter the caller has brought up to
        date): counters, timers and the rekey checks."""
        out = Output()
        now = self._clock(now)
        peer.counters.tx_packets += n_packets
        peer.counters.tx_bytes += n_bytes
        self.counters.tx_packets += n_packets
        self.counters.tx_bytes += n_bytes
        self._after_data_sent(peer, sent_data, now)
        kp = peer.current
        if kp is not None:
            self._rekey_check(peer, kp, now, out)
        return out

    # ------------------------------------------------------------ send

    def send_packets(self, ip_packets, now: float) -> Output:
        now = self._clock(now)
        out = Output()
        by_peer = {}
        lookup_v4 = self.routing.lookup_v4
        lookup_v6 = self.routing.lookup_v6
        for pkt in ip_packets:
            v = pkt[0] >> 4 if pkt else 0
            if v == 4 and len(pkt) >= 20:
                peer = lookup_v4(int.from_bytes(pkt[16:20], "big"))
            elif v == 6 and len(pkt) >= 40:
                peer = lookup_v6(int.from_bytes(pkt[24:40], "big"))
            else:
                self._drop("malformed")
                continue
            if peer is None:
                self._drop("no_route")
                continue
            lst = by_peer.get(peer)
            if lst is None:
                by_peer[peer] = [pkt]
            else:
                lst.append(pkt)
        for peer, pkts in by_peer.items():
            self._send_to_peer(peer, pkts, now, out)
        return out

    def _usable(self, kp, now) -> bool:
        return (kp is not None and now - kp.created < self.config.reject_after_time
                and kp.send_counter < self.config.reject_after_messages)

    def _enqueue(self, peer, pkts):
        q = peer.queue
        q.extend(pkts)
        excess = len(q) - self.config.max_queued_packets
        if excess > 0:
            for _ in range(excess):
                q.popleft()
            self._drop("queue_full", peer, excess)

    def _send_to_peer(self, peer: Peer, pkts, now: float, out: Output) -> None:
        """Send (or queue) packets for one peer, starting with its queue."""
        if peer.queue:
            pkts = list(peer.queue) + list(pkts)
            peer.queue.clear()
        if not pkts:
            return
        c = self.config
        kp = peer.current
        if not self._usable(kp, now) or peer.endpoint is None:
            if peer.endpoint is None:
                self._drop("no_endpoint", peer, len(pkts))
                return
            self._enqueue(peer, pkts)
            nxt = peer.next
            if not (nxt is not None and now - nxt.created < c.rekey_timeout):
                self._initiate(peer, now, out)
            return
        room = c.reject_after_messages - kp.send_counter
        if room < len(pkts):
            self._enqueue(peer, pkts[room:])
            pkts = pkts[:room]
        self._seal(peer, kp, pkts, now, out)
        self._rekey_check(peer, kp, now, out)

    def _rekey_check(self, peer, kp, now, out):
        c = self.config
        if kp.send_counter > c.rekey_after_messages or (
                kp.is_initiator and now - kp.created >= c.rekey_after_time):
            self._initiate(peer, now, out)

    def _seal(self, peer: Peer, kp: Keypair, pkts, now: float, out: Output) -> None:
        n = len(pkts)
        c0 = kp.send_counter
        kp.send_counter = c0 + n
        ctrs = [(c0 + i).to_bytes(8, "little") for i in range(n)]
        nonces = [_ZERO4 + cb for cb in ctrs]
        pad = _PAD
        padded = [p + pad[-len(p) & 15] for p in pkts]
        sealed = self.crypto.seal_batch(kp.send_key, nonces, padded)
        prefix = HDR_TRANSPORT + kp.remote_index.to_bytes(4, "little")
        ep = peer.endpoint
        dgs = [(prefix + cb + s, ep) for cb, s in zip(ctrs, sealed)]
        out.datagrams.extend(dgs)
        nbytes = sum(len(d) for d, _ in dgs)
        peer.counters.tx_packets += n
        peer.counters.tx_bytes += nbytes
        self.counters.tx_packets += n
        self.counters.tx_bytes += nbytes
        self._after_data_sent(peer, any(pkts), now)

    def _after_data_sent(self, peer, sent_data: bool, now):
        self._t_authenticated_sent(peer)
        self._t_traversal(peer, now)
        if sent_data:
            self._t_data_sent(peer, now)

    def _send_keepalive(self, peer: Peer, now: float, out: Output) -> None:
        if peer.queue:
            self._send_to_peer(peer, [], now, out)
        else:
            self._send_to_peer(peer, [b""], now, out)

    # ------------------------------------------------------------ timers

    def handle_timers(self, now: float) -> Output:
        now = self._clock(now)
        out = Output()
        c = self.config
        for peer in list(self.peers.values()):
            t = peer.retransmit_at
            if t is not None and now >= t:
                peer.retransmit_at = None
                if peer.handshake_attempts >= c.max_handshake_attempts:
                    # Give up: drop what waited and schedule zeroing the keys.
                    if peer.queue:
                        self._drop("expired", peer, len(peer.queue))
                        peer.queue.clear()
                    self._drop_pending(peer)
                    peer.new_handshake_at = None
                    if peer.zero_keys_at is None:
                        peer.zero_keys_at = now + 3 * c.reject_after_time
                else:
                    peer.handshake_attempts += 1
                    self._initiate(peer, now, out, is_retry=True)
            t = peer.keepalive_at
            if t is not None and now >= t:
                peer.keepalive_at = None
                self._send_keepalive(peer, now, out)
                if peer.need_another_keepalive:
                    peer.need_another_keepalive = False
                    peer.keepalive_at = now + c.keepalive_timeout
            t = peer.new_handshake_at
            if t is not None and now >= t:
                peer.new_handshake_at = None
                self._initiate(peer, now, out)
            t = peer.zero_keys_at
            if t is not None and now >= t:
                peer.zero_keys_at = None
                for kp in peer.keypairs():
                    self._retire(kp)
                peer.current = peer.previous = peer.next = None
                self._drop_pending(peer)
            t = peer.persistent_at
            if t is not None and now >= t:
                peer.persistent_at = now + peer.persistent_keepalive if peer.persistent_keepalive else None
                self._send_keepalive(peer, now, out)
        self.ratelimiter.maybe_prune(now)
        return out

    def next_deadline(self) -> float | None:
        best = None
        for peer in self.peers.values():
            for t in (peer.retransmit_at, peer.keepalive_at, peer.new_handshake_at,
                      peer.zero_keys_at, peer.persistent_at):
                if t is not None and (best is None or t < best):
                    best = t
        return None if best is None else self.external_time(best)
