"""The sans-I/O WireGuard device: the object the asyncio data plane drives.

No sockets, no clock, no threads.  Every call that depends on time takes
``now`` (monotonic seconds); randomness comes from ``rng(n)``, except the
cookie secret and the cookie replies' nonces, which the session table draws
from a generator of its own, seeded from the system (``table.seed`` makes
it deterministic for tests); the wall clock
(``wallclock()``) is read only for the initiation timestamp and `wg show`'s
last-handshake time.

    dev = Device(private_key, *, backend="native", rng=os.urandom,
                 wallclock=time.time, protocol_config=None, mtu=DEFAULT_MTU)
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
    dev.handle_timers(now) -> Output
    dev.next_deadline() -> float | None      # call handle_timers at (or after) it

    path = dev.batch_path(capacity, stride)   # native backend: the data plane's way in
    path.receive(udp, inner, now) / path.send(inner, udp, now) / path.seal_send(...)
    dev.fold(path, now) -> Output             # on this object's thread, after each round
    dev.fold_results(path.results(), now)     # the same, for a round run on another thread
    path.seal_staged(sealing, udp, now); dev.fold(path, now)   # each Output.sealing item

Output (vpncrypt.protocol.events) holds datagrams to send, inner packets for
the TUN, staged packets to seal, how many handshake messages wait, and
events.  Once a batch path exists, staged packets and keepalives leave as
Output.sealing items, for the caller to seal through its path; without one
(the pynacl backend, the tests) the Device seals them itself in list form
before it returns.  ``tracing = True`` adds events for what crosses the
socket (MessageReceived, MessageSent): the debug trace.

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
opens transport data through a batch path (one round: its I/O and the table)
and brings each round's results here in one call (``fold``); results that
only restart timers are held up to 10 ms, merged per peer (see datapath),
and next_deadline() includes their flush.  The list-form calls seal and open
through the table's list interface and apply their results at once.

The parts: handshakes (vpncrypt.protocol.handshakes), session lifecycle
(sessions), the data side and batch results (datapath), timers (timers, one
transition table and a heap of deadlines).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from vpncrypt.crypto import get_backend
from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol import keys
from vpncrypt.protocol.counters import Counters
from vpncrypt.protocol.datapath import BatchPath, DataPath, RoundResults
from vpncrypt.protocol.events import HandshakeCompleted, HandshakeGaveUp, MessageSent, Output
from vpncrypt.protocol.handshake_work import HandshakeWork
from vpncrypt.protocol.handshakes import Handshakes
from vpncrypt.protocol.messages import HDR_TRANSPORT
from vpncrypt.protocol.peer import Peer
from vpncrypt.protocol.sessions import Sessions
from vpncrypt.protocol.timers import (
    KEEPALIVE,
    NEW_HANDSHAKE,
    PERSISTENT,
    RETRANSMIT,
    ZERO_KEYS,
    ProtocolConfig,
    TimerQueue,
)
from vpncrypt.transport import SessionTable, new_table
from vpncrypt.wire import DEFAULT_MTU

if TYPE_CHECKING:
    from vpncrypt.transport.native import NativeTable

__all__ = ["Device", "Output"]

_KEEP = object()


class Device:
    def __init__(
        self,
        private_key: bytes | None,
        *,
        backend: str = "native",
        rng: Callable[[int], bytes] = os.urandom,
        wallclock: Callable[[], float] = time.time,
        protocol_config: ProtocolConfig | None = None,
        mtu: int = DEFAULT_MTU,
        ratelimit_rate: float = 20.0,
        ratelimit_burst: int = 5,
    ) -> None:
        self.rng = rng
        self.wallclock = wallclock
        self.config = protocol_config or ProtocolConfig()
        self.backend = backend
        self.crypto = get_backend(backend)
        self._ratelimit = (float(ratelimit_rate), int(ratelimit_burst))
        self.table: SessionTable = new_table(backend, self.config.table_config(mtu, *self._ratelimit))
        self.peers: dict[bytes, Peer] = {}
        self.by_pid: dict[int, Peer] = {}
        self.counters = Counters()
        self.timers = TimerQueue(self._delay)
        self.handshakes = Handshakes(self)
        self.sessions = Sessions(self)
        self.datapath = DataPath(self)
        # fold(path, now): the results of a batch path's last round (its
        # touches, the packets that found no key, what its staged seal left),
        # routine ones held, the rest applied now; fold_results(results, now):
        # the same for path.results() taken on another thread (merged ones in
        # the order of their rounds).  The data plane calls them once per
        # batch: the data path's own, bound here.
        self.fold: Callable[[BatchPath, float], Output] = self.datapath.fold
        self.fold_results: Callable[[RoundResults, float], Output] = self.datapath.fold_results
        self.tracing = False  # events for what crosses the socket (the debug trace)
        self._batch_sealing = False  # a batch path exists: Output.sealing is the caller's
        self._last_wall = float("-inf")
        self.static_private: bytearray | None = None  # wiped when replaced
        self.key_generation = 0
        self.public_key: bytes | None = None
        if private_key is not None:
            self.set_private_key(private_key)

    def __repr__(self) -> str:
        pub = keys.encode(self.public_key) if self.public_key else None
        return f"<Device public_key={pub} peers={len(self.peers)}>"

    # ------------------------------------------------------------ configuration

    @property
    def private_key(self) -> bytes | None:
        return bytes(self.static_private) if self.static_private is not None else None

    @property
    def mtu(self) -> int:
        mtu: int = self.table.config.mtu
        return mtu

    def set_mtu(self, mtu: int) -> None:
        """The interface MTU: the padding never goes past it."""
        self.table.configure(self.config.table_config(mtu, *self._ratelimit))

    def set_private_key(self, private_key: bytes | None) -> None:
        """Set (or clear) the static key; re-derives each peer's static-static
        DH and ends every session and handshake in flight."""
        if self.static_private is not None:
            self.static_private[:] = bytes(32)
        self.key_generation += 1  # handshake work begun with the old key is stale
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

    def add_peer(
        self,
        public_key: bytes,
        *,
        preshared_key: bytes | None = None,
        allowed_ips: Iterable[Any] = (),
        endpoint: Any = None,
        persistent_keepalive: int = 0,
    ) -> Peer:
        public_key = bytes(public_key)
        if len(public_key) != 32:
            raise ValueError("a public key is 32 bytes")
        if public_key in self.peers:
            return self.update_peer(
                public_key,
                preshared_key=preshared_key,
                endpoint=endpoint,
                persistent_keepalive=persistent_keepalive,
                allowed_ips=allowed_ips,
            )
        if public_key == self.public_key:
            raise ValueError("a peer cannot have the interface's own public key")
        c = self.config
        pid = self.table.add_peer()
        peer = Peer(
            self, public_key, pid, persistent_keepalive, c.cookie_secret_max_age - c.cookie_secret_latency
        )
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

    def update_peer(
        self,
        public_key: bytes,
        *,
        preshared_key: Any = _KEEP,
        endpoint: Any = _KEEP,
        persistent_keepalive: Any = _KEEP,
        allowed_ips: Iterable[Any] | None = None,
        replace_allowed_ips: bool = False,
    ) -> Peer:
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

    def remove_allowed_ip(self, public_key: bytes, cidr: Any) -> None:
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

    def has_session(self, peer: Peer) -> bool:
        """The peer has a current keypair (usable or not)."""
        return self.table.stats(peer.pid, self.table.clock_offset()).current is not None

    def drops(self, peers: bool = True) -> dict[DropReason, int]:
        """Every drop by reason: the handshake side's and the session table's
        (its own and, with peers, every peer's: a walk over all of them,
        which a get or a scrape that reads every peer anyway does not need;
        see GetReader)."""
        total = {k: v for k, v in self.counters.drops.items() if v}
        parts: list[dict[DropReason, int]] = [self.table.drops()]
        if peers:
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

    def drop(self, reason: DropReason, peer: Peer | None = None, n: int = 1) -> None:
        self.counters.drop(reason, n)
        if peer is not None:
            peer.counters.drop(reason, n)

    def count_rx(self, peer: Peer, nbytes: int) -> None:
        for c in (peer.counters, self.counters):
            c.rx_packets += 1
            c.rx_bytes += nbytes

    def emit(self, peer: Peer, datagram: bytes, endpoint: Any, out: Output) -> None:
        out.datagrams.append((datagram, endpoint))
        if self.tracing:
            out.events.append(MessageSent(datagram[0], endpoint))
        for c in (peer.counters, self.counters):
            c.tx_packets += 1
            c.tx_bytes += len(datagram)

    def handshake_complete(self, peer: Peer, initiator: bool, now: float, out: Output) -> None:
        pt = peer.timers
        self.timers.event(peer, "handshake_complete", now)
        pt.attempts = 0
        pt.last_minute_sent = False
        wall = self.wallclock()
        for c in (peer.counters, self.counters):
            c.handshakes_completed += 1
            c.last_handshake = wall
        out.events.append(HandshakeCompleted(peer, initiator))

    def _delay(self, peer: Peer, timer: int) -> float | None:
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

    def receive_datagrams(self, datagrams: Iterable[tuple[bytes, Any]], now: float) -> Output:
        """UDP payloads of any type: handshake messages first (the table's
        cheap checks, then the whole queue served), then transport data
        through the table."""
        now = self.table.clock(now)
        out = Output()
        transport: list[tuple[bytes, Any]] = []
        control: list[tuple[bytes, Any]] = []
        for item in datagrams:
            (transport if bytes(item[0][:4]) == HDR_TRANSPORT else control).append(item)
        if control:
            self.datapath.receive(control, now, out)
            while self.handshakes.serve(now, out, 1024):
                pass
        if transport:
            self.datapath.receive(transport, now, out)
        return self._finish(out, now)

    def receive_datagram(self, data: bytes, addr: Any, now: float) -> Output:
        return self.receive_datagrams([(data, addr)], now)

    def serve_handshakes(self, now: float, limit: int) -> tuple[Output, int]:
        """Up to `limit` handshake messages from the table's queue, newest
        first (the data plane's open batches queued them); returns the
        Output and how many still wait."""
        out = Output()
        tnow = self.table.clock(now)
        self.handshakes.serve(tnow, out, limit)
        return self._finish(out, tnow), self.handshakes.waiting

    def take_handshake_work(self, now: float, limit: int) -> list[HandshakeWork]:
        """serve_handshakes in two phases, for a caller that runs the
        expensive part elsewhere: up to `limit` queued messages, newest
        first, as HandshakeWork (vpncrypt.protocol.handshake_work).  Each
        one's ``compute()`` may run on any thread; then hand them all, in
        this order, to finish_handshake_work with the same `now`."""
        return self.handshakes.take(self.table.clock(now), limit)

    def finish_handshake_work(self, work: list[HandshakeWork], now: float) -> tuple[Output, int]:
        """Apply HandshakeWork from take_handshake_work (its `now`), after
        compute() ran on each; returns the Output and how many messages
        still wait.  Work for a configuration since changed (our key, the
        peer, its PSK) is dropped as unknown_peer."""
        out = Output()
        tnow = self.table.clock(now)
        self.handshakes.finish(work, tnow, out)
        return self._finish(out, tnow), self.handshakes.waiting

    def send_packets(self, ip_packets: Sequence[bytes], now: float) -> Output:
        out = Output()
        tnow = self.table.clock(now)
        self.datapath.send(ip_packets, tnow, out)
        return self._finish(out, tnow)

    # ------------------------------------------------------------ the batch path

    def batch_path(self, capacity: int, stride: int, *, fair_queue: bool = False) -> BatchPath:
        """A data-path object for one thread of the native data plane: a
        batch of the session table for up to `capacity` messages of `stride`
        bytes, and its rounds (see vpncrypt.protocol.datapath.BatchPath;
        fair_queue: its opt-in fair queue and receive CoDel).
        From now on staged packets and keepalives leave as Output.sealing."""
        if self.backend != "native":
            raise ValueError("batch paths are the native backend's")
        self._batch_sealing = True
        # new_table("native") made a NativeTable (tests may wrap it, so the
        # backend says, not isinstance)
        return BatchPath(self, cast("NativeTable", self.table), capacity, stride, fair_queue)

    def _finish(self, out: Output, now: float) -> Output:
        """Without a batch path, seal what out.sealing holds here (now: the
        table's clock)."""
        if not self._batch_sealing:
            while out.sealing:
                items, out.sealing = out.sealing, []
                for item in items:
                    self.datapath.seal_listed(item, now, out)
        return out

    # ------------------------------------------------------------ timers

    def handle_timers(self, now: float) -> Output:
        """What is held applied, then every timer due at `now`."""
        now = self.table.clock(now)
        out = Output()
        self.datapath.flush_held(now, out)
        q = self.timers
        while True:
            due = q.pop_due(now)
            if due is None:
                break
            peer, timer = due
            self._expired(peer, timer, now, out)
        self.handshakes.note_load(now, out)
        self.table.maintain()
        return self._finish(out, now)

    def _expired(self, peer: Peer, timer: int, now: float, out: Output) -> None:
        c = self.config
        pt = peer.timers
        if timer == RETRANSMIT:
            if pt.attempts > c.max_timer_handshakes:
                # give up: what waited is dropped; the handshake state stays
                # until the keys are zeroed
                out.events.append(HandshakeGaveUp(peer, pt.attempts + 1))
                self.timers.disarm(peer, KEEPALIVE)
                self.datapath.flush_staged(peer)
                if not pt.pending(ZERO_KEYS):
                    self.timers.arm(peer, ZERO_KEYS, now + 3 * c.reject_after_time)
            else:
                pt.attempts += 1
                self.handshakes.initiate(peer, now, out, retry=True)
        elif timer == KEEPALIVE:
            self.datapath.keepalive(peer, out, persistent=False)
            if pt.need_another_keepalive:
                pt.need_another_keepalive = False
                self.timers.arm(peer, KEEPALIVE, now + c.keepalive_timeout)
        elif timer == NEW_HANDSHAKE:
            self.handshakes.initiate(peer, now, out)
        elif timer == ZERO_KEYS:
            self.sessions.zero(peer, out)
        elif timer == PERSISTENT:
            if peer.persistent_keepalive:
                self.datapath.keepalive(peer, out, persistent=True)

    def next_deadline(self) -> float | None:
        """When handle_timers has work next (a timer, or the held results'
        flush), on the caller's clock."""
        t = self.timers.next_deadline()
        held = self.datapath.held_until
        if t is None:
            return held
        t -= self.table.clock_offset()
        return held if held is not None and held < t else t
