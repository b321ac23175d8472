"""The sans-I/O WireGuard device: the object the asyncio data plane drives.

No sockets, no clock, no threads.  Every call that depends on time takes
``now`` (monotonic seconds); randomness comes from ``rng(n)``, except the
cookie secret and the cookie replies' nonces, which the session table draws
from a generator of its own, seeded from the system (``table.seed`` makes
it deterministic for tests); the wall clock
(``wallclock()``) is read only for the initiation timestamp and `wg show`'s
last-handshake time.

    dev = Device(private_key, *, backend="native", rng=os.urandom,
                 wallclock=time.time, timer_config=None, mtu=1420)
    dev.public_key, dev.private_key, dev.peers -> {public_key: Peer}, dev.table
    dev.set_private_key(key); dev.set_mtu(mtu)
    dev.add_peer(public_key, *, preshared_key=None, allowed_ips=(), endpoint=None,
                 persistent_keepalive=0) -> Peer
    dev.update_peer(public_key, *, preshared_key=..., endpoint=..., persistent_keepalive=...,
                    allowed_ips=None, replace_allowed_ips=False) -> Peer
    dev.remove_peer(public_key); dev.remove_allowed_ip(public_key, cidr); dev.clear_peers()
    dev.has_session(peer); dev.drops() -> {reason: n}

    dev.receive_datagrams([(udp_payload, addr), ...], now) -> Output
    dev.receive_datagram(udp_payload, addr, now) -> Output
    dev.serve_handshakes(now, limit) -> (Output, messages still waiting)
    dev.take_handshake_work(now, limit) -> [HandshakeWork]   # .compute() on any thread, then
    dev.finish_handshake_work(work, now) -> (Output, messages still waiting)
    dev.send_packets([ip_packet, ...], now) -> Output
    dev.on_transport(touches, now, waiting=()) -> Output
    dev.handle_timers(now) -> Output
    dev.next_deadline() -> float | None      # call handle_timers at (or after) it

Output (vpncrypt.protocol.events) holds datagrams to send, inner packets for
the TUN and events.

Handshake messages pass the session table's cheap checks first (sizes,
mac1, and under load mac2 with a cookie reply and the per-source rate
limit: the table owns the cookie secret, the load state and the limiter)
and wait in its bounded queue; ``serve_handshakes`` takes up to `limit` of
them, newest first, and does what needs the Noise state.  The list-form
``receive_datagrams`` serves the whole queue before it returns.

Sessions live in the session table (vpncrypt.transport), which this object
drives and never mirrors: keys, counters, replay windows, expiry, endpoints
and AllowedIPs.  It has two backends, "native" and "pynacl"; the handshake
uses the crypto backend of the same name.  The native data plane seals and
opens transport data in the table itself and brings the batch results here
in one call (``on_transport``); the list-form calls do the same through the
table's list interface.

The parts: handshakes (vpncrypt.protocol.handshakes), session lifecycle
(sessions), the data side and batch results (datapath), timers (timers, one
transition table and a heap of deadlines).
"""
import os
import time

from vpncrypt.crypto import get_backend
from vpncrypt.protocol import keys
from vpncrypt.protocol.counters import Counters
from vpncrypt.protocol.datapath import DataPath
from vpncrypt.protocol.events import HandshakeCompleted, HandshakeGaveUp, Output
from vpncrypt.protocol.handshakes import Handshakes
from vpncrypt.protocol.messages import HDR_TRANSPORT
from vpncrypt.protocol.peer import Peer
from vpncrypt.protocol.sessions import Sessions
from vpncrypt.protocol.timers import (
    KEEPALIVE, NEW_HANDSHAKE, PERSISTENT, RETRANSMIT, ZERO_KEYS, TimerConfig, TimerQueue,
)
from vpncrypt.transport import TableConfig, new_table

__all__ = ["Device", "Output"]

_KEEP = object()


class Device:
    def __init__(self, private_key: bytes | None, *, backend: str = "native", rng=os.urandom,
                 wallclock=time.time, timer_config: TimerConfig | None = None, mtu: int = 1420,
                 ratelimit_rate: float = 20.0, ratelimit_burst: int = 5):
        self.rng = rng
        self.wallclock = wallclock
        self.config = c = timer_config or TimerConfig()
        self.backend = backend
        self.crypto = get_backend(backend)
        self._ratelimit = (float(ratelimit_rate), int(ratelimit_burst))
        self.table = new_table(backend, self._table_config(mtu))
        self.peers: dict[bytes, Peer] = {}
        self.by_pid: dict[int, Peer] = {}
        self.counters = Counters()
        self.timers = TimerQueue(self._delay)
        self.handshakes = Handshakes(self)
        self.sessions = Sessions(self)
        self.datapath = DataPath(self)
        self._last_wall = float("-inf")
        self.static_private = None        # bytearray, wiped when replaced
        self.key_generation = 0
        self.public_key = None
        if private_key is not None:
            self.set_private_key(private_key)

    def __repr__(self):
        pub = keys.encode(self.public_key) if self.public_key else None
        return f"<Device public_key={pub} peers={len(self.peers)}>"

    def _table_config(self, mtu: int) -> TableConfig:
        c = self.config
        return TableConfig(reject_after_time=c.reject_after_time, rekey_after_time=c.rekey_after_time,
                           rekey_on_receive_age=c.rekey_on_receive_age,
                           reject_after_messages=c.reject_after_messages,
                           rekey_after_messages=c.rekey_after_messages, mtu=mtu,
                           handshake_queue=c.handshake_queue_size,
                           under_load_depth=c.under_load_queue_depth,
                           under_load_hold=c.under_load_after_time,
                           cookie_secret_age=c.cookie_secret_max_age,
                           ratelimit_rate=self._ratelimit[0], ratelimit_burst=self._ratelimit[1])

    # ------------------------------------------------------------ configuration

    @property
    def private_key(self) -> bytes | None:
        return bytes(self.static_private) if self.static_private is not None else None

    @property
    def mtu(self) -> int:
        return self.table.config.mtu

    def set_mtu(self, mtu: int) -> None:
        """The interface MTU: the padding never goes past it."""
        self.table.configure(self._table_config(mtu))

    def set_private_key(self, private_key: bytes | None) -> None:
        """Set (or clear) the static key; re-derives each peer's static-static
        DH and ends every session and handshake in flight."""
        if self.static_private is not None:
            self.static_private[:] = bytes(32)
        self.key_generation += 1      # handshake work begun with the old key is stale
        if private_key is None or not any(private_key):
            self.static_private = None
            self.public_key = None
            self.table.set_public_key(None)
        else:
            self.static_private = bytearray(keys.clamp(bytes(private_key)))
            self.public_key = keys.public_from_private(bytes(self.static_private))
            self.table.set_public_key(self.public_key)
            if self.public_key in self.peers:  # a peer cannot be ourselves
                self.remove_peer(self.public_key)
        for peer in self.peers.values():
            self._precompute(peer)
            self.sessions.drop_pending(peer)
            self.table.zero(peer.pid)
            # as expiring the current keypairs does in the kernel and
            # wireguard-go: the next packet may start a handshake at once,
            # not REKEY_TIMEOUT after the last one
            peer.last_sent_handshake = float("-inf")

    def _precompute(self, peer: Peer) -> None:
        peer.static_static = None
        if self.static_private is not None:
            try:
                peer.static_static = keys.dh(bytes(self.static_private), peer.public_key)
            except keys.DHError:
                peer.static_static = None
        peer.refresh_handshake_config()

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
        pid = self.table.add_peer()
        peer = Peer(self, public_key, pid, persistent_keepalive,
                    c.cookie_secret_max_age - c.cookie_secret_latency)
        try:
            peer.set_psk(preshared_key)
            if endpoint is not None:
                self.table.set_endpoint(pid, endpoint)
            for cidr in allowed_ips:
                self.table.route_add(pid, cidr)
        except BaseException:
            self.table.remove_peer(pid)
            raise
        self._precompute(peer)
        self.peers[public_key] = peer
        self.by_pid[pid] = peer
        if peer.persistent_keepalive:
            self.timers.arm(peer, PERSISTENT, float("-inf"))  # one keepalive at the next handle_timers
        return peer

    def update_peer(self, public_key: bytes, *, preshared_key=_KEEP, endpoint=_KEEP,
                    persistent_keepalive=_KEEP, allowed_ips=None, replace_allowed_ips=False) -> Peer:
        peer = self.peers[bytes(public_key)]
        if preshared_key is not _KEEP:
            peer.set_psk(preshared_key)
        if endpoint is not _KEEP and endpoint is not None:
            self.table.set_endpoint(peer.pid, endpoint)
        if persistent_keepalive is not _KEEP and persistent_keepalive is not None:
            old = peer.persistent_keepalive
            peer.persistent_keepalive = int(persistent_keepalive)
            if peer.persistent_keepalive and not old:
                self.timers.arm(peer, PERSISTENT, float("-inf"))
            elif not peer.persistent_keepalive:
                self.timers.disarm(peer, PERSISTENT)
        if replace_allowed_ips:
            self.table.routes_clear(peer.pid)
        for cidr in allowed_ips or ():
            self.table.route_add(peer.pid, cidr)
        return peer

    def remove_allowed_ip(self, public_key: bytes, cidr) -> None:
        peer = self.peers[bytes(public_key)]
        self.table.route_remove(peer.pid, cidr)

    def remove_peer(self, public_key: bytes) -> None:
        peer = self.peers.pop(bytes(public_key), None)
        if peer is None:
            return
        self.sessions.drop_pending(peer)
        peer.staged.clear()
        peer.set_psk(None)
        peer.timers.gone = True
        del self.by_pid[peer.pid]
        self.table.remove_peer(peer.pid)
        if len(self.timers) > 64 and len(self.timers) > 16 * (len(self.peers) + 1):
            self.timers.compact()

    def clear_peers(self) -> None:
        for pub in list(self.peers):
            self.remove_peer(pub)

    # ------------------------------------------------------------ reading

    def has_session(self, peer) -> bool:
        """The peer has a current keypair (usable or not)."""
        return self.table.stats(peer.pid, self.table.clock_offset()).current is not None

    def drops(self) -> dict:
        """Every drop by reason: the handshake side's and the session table's
        (its own and every peer's)."""
        total = {k: v for k, v in self.counters.drops.items() if v}
        parts = [self.table.drops()]
        parts.extend(self.table.stats(p.pid, 0.0).drops for p in self.peers.values())
        for part in parts:
            for k, v in part.items():
                total[k] = total.get(k, 0) + v
        return total

    # ------------------------------------------------------------ shared helpers

    def unix_now(self) -> float:
        """The wall clock for an initiation timestamp: never earlier than the
        last one (the peer refuses a timestamp that goes back)."""
        t = max(self.wallclock(), self._last_wall)
        self._last_wall = t
        return t

    def drop(self, reason: str, peer=None, n: int = 1) -> None:
        self.counters.drop(reason, n)
        if peer is not None:
            peer.counters.drop(reason, n)

    def count_rx(self, peer, nbytes: int) -> None:
        for c in (peer.counters, self.counters):
            c.rx_packets += 1
            c.rx_bytes += nbytes

    def emit(self, peer, datagram: bytes, endpoint, out) -> None:
        out.datagrams.append((datagram, endpoint))
        for c in (peer.counters, self.counters):
            c.tx_packets += 1
            c.tx_bytes += len(datagram)

    def handshake_complete(self, peer, initiator: bool, now: float, out) -> None:
        pt = peer.timers
        self.timers.event(peer, "handshake_complete", now)
        pt.attempts = 0
        pt.last_minute_sent = False
        wall = self.wallclock()
        for c in (peer.counters, self.counters):
            c.handshakes_completed += 1
            c.last_handshake = wall
        out.events.append(HandshakeCompleted(peer, initiator))

    def _delay(self, peer, timer):
        c = self.config
        if timer == RETRANSMIT:
            return c.rekey_timeout + self._jitter()
        if timer == KEEPALIVE:
            return c.keepalive_timeout
        if timer == NEW_HANDSHAKE:
            return c.keepalive_timeout + c.rekey_timeout + self._jitter()
        if timer == ZERO_KEYS:
            return 3 * c.reject_after_time
        return peer.persistent_keepalive or None

    def _jitter(self) -> float:
        return int.from_bytes(self.rng(2), "little") / 65535.0 * self.config.rekey_timeout_jitter

    # ------------------------------------------------------------ traffic

    def receive_datagrams(self, datagrams, now: float) -> Output:
        """UDP payloads of any type: handshake messages first (the table's
        cheap checks, then the whole queue served), then transport data
        through the table."""
        now = self.table.clock(now)
        out = Output()
        transport, control = [], []
        for item in datagrams:
            (transport if bytes(item[0][:4]) == HDR_TRANSPORT else control).append(item)
        if control:
            self.datapath.receive(control, now, out)
            while self.handshakes.serve(now, out, 1024):
                pass
        if transport:
            self.datapath.receive(transport, now, out)
        return out

    def receive_datagram(self, data: bytes, addr, now: float) -> Output:
        return self.receive_datagrams([(data, addr)], now)

    def serve_handshakes(self, now: float, limit: int) -> tuple[Output, int]:
        """Up to `limit` handshake messages from the table's queue, newest
        first (the data plane's open batches queued them); returns the
        Output and how many still wait."""
        out = Output()
        self.handshakes.serve(self.table.clock(now), out, limit)
        return out, self.handshakes.waiting

    def take_handshake_work(self, now: float, limit: int) -> list:
        """serve_handshakes in two phases, for a caller that runs the
        expensive part elsewhere: up to `limit` queued messages, newest
        first, as HandshakeWork (vpncrypt.protocol.handshake_work).  Each
        one's ``compute()`` may run on any thread; then hand them all, in
        this order, to finish_handshake_work with the same `now`."""
        return self.handshakes.take(self.table.clock(now), limit)

    def finish_handshake_work(self, work, now: float) -> tuple[Output, int]:
        """Apply HandshakeWork from take_handshake_work (its `now`), after
        compute() ran on each; returns the Output and how many messages
        still wait.  Work for a configuration since changed (our key, the
        peer, its PSK) is dropped as unknown_peer."""
        out = Output()
        self.handshakes.finish(work, self.table.clock(now), out)
        return out, self.handshakes.waiting

    def send_packets(self, ip_packets, now: float) -> Output:
        out = Output()
        self.datapath.send(ip_packets, self.table.clock(now), out)
        return out

    def on_transport(self, touches, now: float, waiting=()) -> Output:
        """Batch results of the native data plane, in one call: the table's
        touches, and (peer id, packet) pairs that found no usable key."""
        out = Output()
        self.datapath.apply(touches, self.table.clock(now), out, waiting)
        return out

    # ------------------------------------------------------------ timers

    def handle_timers(self, now: float) -> Output:
        now = self.table.clock(now)
        out = Output()
        q = self.timers
        while True:
            due = q.pop_due(now)
            if due is None:
                break
            peer, timer = due
            self._expired(peer, timer, now, out)
        self.handshakes.note_load(now, out)
        self.table.maintain()
        return out

    def _expired(self, peer, timer, now, out) -> None:
        c = self.config
        pt = peer.timers
        if timer == RETRANSMIT:
            if pt.attempts > c.max_timer_handshakes:
                # give up: what waited is dropped; the handshake state stays
                # until the keys are zeroed
                out.events.append(HandshakeGaveUp(peer, pt.attempts + 1))
                self.timers.disarm(peer, KEEPALIVE)
                self.datapath.flush_staged(peer, "expired")
                if not pt.pending(ZERO_KEYS):
                    self.timers.arm(peer, ZERO_KEYS, now + 3 * c.reject_after_time)
            else:
                pt.attempts += 1
                self.handshakes.initiate(peer, now, out, retry=True)
        elif timer == KEEPALIVE:
            self.datapath.keepalive(peer, now, out, persistent=False)
            if pt.need_another_keepalive:
                pt.need_another_keepalive = False
                self.timers.arm(peer, KEEPALIVE, now + c.keepalive_timeout)
        elif timer == NEW_HANDSHAKE:
            self.handshakes.initiate(peer, now, out)
        elif timer == ZERO_KEYS:
            self.sessions.zero(peer, out)
        elif timer == PERSISTENT:
            if peer.persistent_keepalive:
                self.datapath.keepalive(peer, now, out, persistent=True)

    def next_deadline(self) -> float | None:
        """When handle_timers has work next, on the caller's clock."""
        t = self.timers.next_deadline()
        return None if t is None else t - self.table.clock_offset()
