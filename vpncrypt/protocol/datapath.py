"""The Device's data side: what the session table's batch results mean for
the protocol (timers, key confirmation, rekeying, roaming), the packets that
wait for a handshake, keepalives, and the data-path object the native data
plane moves its batches through (``BatchPath``, from Device.batch_path).

Results that only restart timers (data went in or out: EV_ROUTINE) are held
for up to HOLD, merged per peer, and applied at the deadline the Device
gives through next_deadline() (handle_timers applies them), or before any
other result, which is applied at once.  The list-form calls (``send`` and
``receive``: the pynacl backend and the tests) apply everything at once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol import messages as M
from vpncrypt.protocol.events import (
    NOTHING,
    EndpointChanged,
    KeepaliveSent,
    MessageReceived,
    MessageSent,
    NotTraced,
    Output,
    Sealing,
)
from vpncrypt.transport import status as S
from vpncrypt.transport.model import Touch

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device
    from vpncrypt.transport.native import NativeTable
    from vpncrypt.protocol.peer import Peer

# Routine results reach the protocol's timers at most this long (10 ms) after
# the batch that made them.
HOLD = 0.01

# What a BatchPath's last round was.
RECEIVE, SEND, STAGED = 1, 2, 3

_ROUTINE_NOT = ~S.EV_ROUTINE
_RX = S.EV_AUTH | S.EV_DATA
_DATA = S.EV_DATA
# (direction, kind, size, endpoint, receiver index): what a traced round saw
Wire = tuple[bool, int, int, Any, int]
# A Wire entry of this kind says how many datagrams (its size) went untraced.
UNTRACED = -3
# The debug trace's budget per BatchPath: entries for TRACE_BURST datagrams at
# once, then TRACE_RATE a second (the log's own rate limit lets fewer lines
# through).  Past it rounds run as untraced ones do, looped and not looked at
# in Python, and are only counted: a flood at a traced daemon costs it no
# more Python per datagram than at an untraced one.
TRACE_BURST = 256
TRACE_RATE = 64.0
# Pieces of a packet too big for its path sealed per call (seal_pieces): a
# 64 KiB TSO segment cut at a 1280-byte path is at most 64 of them.
_PIECES = 64


class RoundResults:
    """A round's results in a form that outlives the batch's arrays: the
    table's touches, the (peer id, packet) pairs that found no usable key,
    how many handshake messages went into the table's queue, what crossed
    the socket (only while tracing), and for a staged round the packets that
    still found no key and whether its keepalive was sealed.  The data
    threads post these to the event loop (merged, see merge())."""

    __slots__ = ("touches", "waiting", "queued", "wire", "staged", "left", "keepalive_sealed")

    def __init__(
        self,
        touches: list[Touch],
        waiting: list[tuple[int, bytes]] | None = None,
        queued: int = 0,
        wire: list[Wire] | None = None,
    ) -> None:
        self.touches = touches
        self.waiting = waiting or []
        self.queued = queued
        self.wire = wire
        self.staged: Sealing | None = None
        self.left: list[bytes] = []
        self.keepalive_sealed = False

    def merge(self, other: RoundResults) -> None:
        """Another round's results after these (rounds of data only)."""
        self.touches.extend(other.touches)
        self.waiting.extend(other.waiting)
        self.queued += other.queued
        if other.wire:
            self.wire = (self.wire or []) + other.wire


class BatchPath:
    """One thread's way through the session table: a table Batch (its
    arrays) and the rounds it runs.  A round moves one batch between the
    descriptors it is given and the table (transport.native.Batch: receive,
    send, seal_send) and leaves its results here until the next round; hand
    them to Device.fold(path, now) on the Device's thread, or take them with
    results() (another thread) for Device.fold_results.  ``io`` says what
    the sockets did (transport.native.RoundIO).  Times are the caller's
    clock (monotonic seconds).  fair_queue: the batch's (opt-in) fair queue
    on the send round and CoDel on the receiving socket (Batch)."""

    def __init__(
        self, device: Device, table: NativeTable, capacity: int, stride: int, fair_queue: bool = False
    ) -> None:
        self._device = device
        self.batch = batch = table.batch(capacity, stride, fair_queue)
        self.capacity: int = batch.capacity
        self.io = batch.io
        self._clock = table.clock
        self._now: float | None = None  # the last round's caller time, and its table time
        self._tnow = 0.0
        self._pieces: Any = None  # a batch of its own for seal_pieces, made at first use
        # the first touch's peer and flags (words 0 and 1) without making an object
        self.touch_words = batch.touch_words
        self.kind = 0
        self.wire: list[Wire] | None = None
        self._staged: RoundResults | None = None
        # rounds the last call ran (receive_rounds, send_rounds; else 1): the ones before
        # the last are routine and summed in batch.loop (prefix_peer, prefix_flags, prefix_data)
        self.rounds = 1
        self.loop = batch.loop
        self.loop_sizes = batch.loop_sizes
        self._loop_words = batch.loop_words
        self._trace_tokens = float(TRACE_BURST)
        self._trace_last: float | None = None
        self.untraced = 0  # datagrams received while tracing, past the budget, not yet reported

    def _trace_room(self, now: float) -> bool:
        """Whether the trace's budget has room for a round (refilled to `now`)."""
        last, self._trace_last = self._trace_last, now
        if last is not None and now > last:
            self._trace_tokens = min(float(TRACE_BURST), self._trace_tokens + (now - last) * TRACE_RATE)
        return self._trace_tokens >= 1.0

    def _trace_round(self, udp: Any, n: int, now: float) -> list[Wire] | None:
        """A traced receive round's wire, within the budget (else None, counted)."""
        if not self._trace_room(now):
            self.untraced += n
            return None
        wire, more = _received(udp, self.batch, n, int(self._trace_tokens))
        self._trace_tokens -= len(wire)
        if more or self.untraced:
            wire.append((False, UNTRACED, more + self.untraced, None, -1))
            self.untraced = 0
        return wire

    # ------------------------------------------------------------ rounds

    def receive(self, udp: Any, inner: Any, now: float) -> int:
        """Datagrams from `udp` opened, replies sent, packets to `inner`;
        returns how many datagrams came (0: none waited)."""
        if now != self._now:  # rounds of one turn share one reading
            self._now, self._tnow = now, self._clock(now)
        b = self.batch
        n: int = b.receive(udp, inner, self._tnow)
        self.rounds = 1
        self.kind = RECEIVE
        self.wire = self._trace_round(udp, n, now) if n and self._device.tracing else None
        return n

    def send(self, inner: Any, udp: Any, now: float) -> int:
        """Packets read from `inner`, sealed and sent on `udp`; returns how
        many were read (0: none waited)."""
        if now != self._now:
            self._now, self._tnow = now, self._clock(now)
        n: int = self.batch.send(inner, udp, self._tnow)
        self.rounds = 1
        self.kind = SEND
        self.wire = None
        return n

    def receive_rounds(self, udp: Any, inner: Any, now: float, k: int, full: int) -> int:
        """Up to k receive rounds in one call while they are routine
        (transport.native.Batch.receive_rounds; full: what a full round
        takes); returns what the last one took.  Afterwards `rounds` says how
        many ran and loop_sizes[i] what round i took.  While tracing, one
        round (each round's wire is traced) while the trace's budget has
        room; past it the rounds are looped and counted."""
        tracing = self._device.tracing
        if tracing and self._trace_room(now):
            n = self.receive(udp, inner, now)
            self.loop_sizes[0] = n
            return n
        if now != self._now:
            self._now, self._tnow = now, self._clock(now)
        b = self.batch
        got: int = b.receive_rounds(udp, inner, self._tnow, k, full)
        self.rounds = rounds = self._loop_words[0]
        self.kind = RECEIVE
        self.wire = None
        if tracing:
            sizes = self.loop_sizes
            self.untraced += sum(sizes[i] for i in range(rounds))
        return got

    def send_rounds(self, inner: Any, udp: Any, now: float, k: int, full: int) -> int:
        """Up to k send rounds in one call while they are routine (as
        receive_rounds)."""
        if now != self._now:
            self._now, self._tnow = now, self._clock(now)
        got: int = self.batch.send_rounds(inner, udp, self._tnow, k, full)
        self.rounds = self._loop_words[0]
        self.kind = SEND
        self.wire = None
        return got

    def seal_send(self, slab: Any, view: Any, off: Any, lens: Any, n: int, udp: Any, now: float) -> int:
        """n (at most capacity) packets of a slab sealed and sent on `udp`;
        returns how many were sealed."""
        k: int = self.batch.seal_send(slab, view, off, lens, n, udp, self._clock(now))
        self.rounds = 1
        self.kind = SEND
        self.wire = None
        return k

    def seal_staged(self, item: Sealing, udp: Any, now: float) -> None:
        """An Output's Sealing: its packets sealed for its peer and sent on
        `udp` (in pieces of at most capacity); ``io`` sums the pieces."""
        b, io = self.batch, self.io
        tnow = self._clock(now)
        res = RoundResults([])
        res.staged = item
        packets = item.packets
        sealed = sent = err = 0
        for first in range(0, len(packets), self.capacity):
            chunk = list(packets[first : first + self.capacity])
            k = len(chunk)
            b.seal_send_packets(chunk, udp, tnow, item.peer)
            sealed += io.sealed
            sent += io.sent
            err = err or io.send_errno
            status = b.status
            res.left.extend(p for i, p in enumerate(chunk) if status[i] == S.NO_KEY)
            if item.keepalive is not None and first + k == len(packets):
                res.keepalive_sealed = status[k - 1] == S.OK
            res.touches.extend(b.touches())
        io.received, io.sealed, io.sent, io.send_errno = len(packets), sealed, sent, err
        self.rounds = 1
        self.kind = STAGED
        self.wire = None
        self._staged = res

    def unroutable(self) -> list[memoryview]:
        """The last send round's packets that had no peer or no endpoint
        (io.unroutable of them; Batch.unroutable), for their ICMP errors."""
        got: list[memoryview] = self.batch.unroutable()
        return got

    def too_big(self) -> list[tuple[memoryview, int, int]]:
        """The last send round's packets too big for their peer's path MTU
        (io.too_big of them; Batch.too_big): (packet, peer id, the inner MTU
        the peer's path takes), for their "packet too big" errors."""
        table, now = self.batch.table, self._tnow
        mtus: dict[int, int] = {}
        out = []
        for pkt, pid in self.batch.too_big():
            if pid not in mtus:
                mtus[pid] = table.inner_mtu(pid, now)
            out.append((pkt, pid, mtus[pid]))
        return out

    def seal_pieces(self, packets: list[bytes], pid: int, udp: Any) -> int:
        """Seal packets (the pieces of one too big for the path) to peer
        `pid` and send them on `udp`, through a batch of this path's own (the
        round's arrays still hold the round); returns how many were sent.
        What the table says of these seals (touches) is not folded: the
        peer's round, folded next, has the same flags but for a rekey due on
        exactly these messages, which the next one meets."""
        b = self._pieces
        if b is None:
            b = self._pieces = self.batch.table.batch(_PIECES, self.batch.stride)
        sent = 0
        for at in range(0, len(packets), _PIECES):
            b.seal_send_packets(packets[at : at + _PIECES], udp, self._tnow, pid)
            sent += b.io.sent
        return sent

    def fair_queue_stats(self) -> dict[str, int]:
        """The send round's fair queue's counters (Batch.fair_queue_stats)."""
        stats: dict[str, int] = self.batch.fair_queue_stats()
        return stats

    # ------------------------------------------------------------ results

    def results(self) -> RoundResults | None:
        """The last call's results (its rounds', see receive_rounds), copied
        out of the batch's arrays; None if there is nothing in them for the
        Device."""
        last = self.last_results()
        if self.rounds == 1:
            return last
        prefix = self.prefix_touches()
        if not prefix:
            return last
        if last is None:
            return RoundResults(prefix)
        last.touches[:0] = prefix
        return last

    def last_results(self) -> RoundResults | None:
        """The last round's results (as results() after a one-round call)."""
        if self.kind == STAGED:
            return self._staged
        b = self.batch
        queued: int = b.n_queued if self.kind == RECEIVE else 0
        if not b.n_touched and not queued and not self.wire:
            return None
        touches: list[Touch] = b.touches()
        waiting = None
        if self.kind == SEND:
            for t in touches:
                if t.flags & S.EV_NEED_KEY:
                    waiting = b.waiting()
                    break
        return RoundResults(touches, waiting, queued, self.wire)

    def prefix_touches(self) -> list[Touch]:
        """The routine rounds before the last one (rounds > 1) as touches
        that fold as they would have one by one: their flags (and sums),
        then one data reception more for each further round of them that
        had data (the Device's hold counts them)."""
        lp = self.loop
        f = lp.prefix_flags
        if not f:
            return []
        pid = lp.prefix_peer
        out = [Touch(pid, f, lp.prefix_packets, lp.prefix_bytes)]
        if lp.prefix_data > 1:
            out.extend([Touch(pid, _RX, 0, 0)] * (lp.prefix_data - 1))  # (_RX: a data reception's flags)
        return out


def _received(udp: Any, b: Any, n: int, room: int) -> tuple[list[Wire], int]:
    """What a traced receive round saw: every datagram but transport data,
    by type and size, and the cookie replies the table sent; at most `room`
    of them, and how many more there were."""
    view, off, lens, ep, to_addr = udp.view, udp.off, udp.len, udp.ep, udp.endpoints.to_addr
    out: list[Wire] = []
    more = 0
    for i in range(n):
        o, size = off[i], lens[i]
        kind = M.classify(view, o, size)
        if kind != M.DATA:
            if len(out) >= room:
                more += 1
                continue
            index = int.from_bytes(view[o + 4 : o + 8], "little") if kind == M.KEEPALIVE else -1
            out.append((False, kind, size, to_addr(ep + i), index))
    replies = b.io.replies_sent
    take = max(0, min(replies, room - len(out)))
    for j in range(take):
        out.append((True, M.MSG_COOKIE_REPLY, M.COOKIE_REPLY_LEN, to_addr(b.tx_ep + j), -1))
    return out, more + replies - take


class DataPath:
    def __init__(self, device: Device) -> None:
        self.dev = device
        self._held: dict[int, list[Any]] = {}  # peer id -> [received?, flags, data batches]
        self.held_until: float | None = None  # the caller's clock

    # ------------------------------------------------------------ list-form traffic

    def send(self, packets: Sequence[bytes], now: float, out: Output) -> None:
        res = self.dev.table.seal(packets, now)
        out.datagrams.extend(res.datagrams)
        waiting = [(res.peers[i], p) for i, p in enumerate(packets) if res.status[i] == S.NO_KEY]
        self.apply(res.touched, now, out, waiting)

    def receive(self, datagrams: Sequence[tuple[bytes, Any]], now: float, out: Output) -> None:
        dev = self.dev
        res = dev.table.open(datagrams, now)
        out.packets.extend(res.packets)
        out.datagrams.extend(res.replies)
        if dev.tracing:
            wire: list[Wire] = []
            for data, addr in datagrams:
                kind = M.classify(data)
                if kind != M.DATA:
                    index = int.from_bytes(data[4:8], "little") if kind == M.KEEPALIVE else -1
                    wire.append((False, kind, len(data), addr, index))
            wire.extend((True, M.MSG_COOKIE_REPLY, len(d), a, -1) for d, a in res.replies)
            self.trace(wire, out)
        self.apply(res.touched, now, out)

    # ------------------------------------------------------------ batch results

    def fold(self, path: BatchPath, now: float, last: bool = False) -> Output:
        """A BatchPath's last call (see Device.fold): its last round, after
        the routine rounds before it when the call ran several
        (BatchPath.receive_rounds), as if each had been folded on its own
        (last: the last round only).  The usual round, one peer's routine
        result, is merged into what is held without making any object."""
        if path.rounds != 1 and not last:
            lp = path.loop
            f = lp.prefix_flags
            pre = self.hold(lp.prefix_peer, f, now, lp.prefix_data) if f else NOTHING
            out = self.fold(path, now, True)
            if pre is NOTHING:
                return out
            return pre if out is NOTHING else pre.extend(out)
        kind = path.kind
        if kind != STAGED and path.wire is None:
            b = path.batch
            nt = b.n_touched
            queued = kind == RECEIVE and b.n_queued
            if nt == 1 and not queued:
                tw = path.touch_words
                f = tw[1]
                if not f & _ROUTINE_NOT:
                    pid = tw[0]
                    h = self._held.get(pid)
                    if h is None or h[0] != bool(f & _RX):
                        return self.hold(pid, f, now)
                    h[1] |= f  # the usual case: merged into what is held
                    if f & _DATA:
                        h[2] += 1
                    return NOTHING
            elif not nt and not queued:
                return NOTHING
        res = path.last_results()
        return NOTHING if res is None else self.fold_results(res, now)

    def fold_results(self, res: RoundResults, now: float) -> Output:
        urgent: list[Touch] = []
        out: Output = NOTHING
        for t in res.touches:
            if t.flags & _ROUTINE_NOT or res.staged is not None:
                urgent.append(t)
            else:
                got = self.hold(t.peer, t.flags, now)
                if got is not NOTHING:
                    out = got
        if not (urgent or res.waiting or res.queued or res.wire or res.staged is not None):
            return out
        if out is NOTHING:
            out = Output()
        dev = self.dev
        tnow = dev.table.clock(now)
        self.flush_held(tnow, out)
        item = res.staged
        if item is not None:
            peer = dev.by_pid.get(item.peer)
            if peer is not None:
                if res.left:
                    peer.staged.extendleft(reversed(res.left))
                if res.keepalive_sealed:
                    out.events.append(KeepaliveSent(peer, bool(item.keepalive)))
        if res.wire:
            self.trace(res.wire, out)
        self.apply(urgent, tnow, out, res.waiting)
        out.handshakes = res.queued
        return out

    def hold(self, pid: int, flags: int, now: float, data: int = -1) -> Output:
        """Merge a routine result into the held ones.  Results of one
        direction merge; a result of the other direction first applies what
        is held, because the timers depend on the order of "sent" and
        "received" (sending stops the keepalive timer, receiving data starts
        it).  A second merged data reception is applied as such (it asks for
        another keepalive).  NOTHING unless the deadline moved or something
        was applied.  data: how many results with data it stands for (-1: this
        one's flags say; the routine rounds of a looped call are one hold)."""
        rx = bool(flags & _RX)
        if data < 0:
            data = 1 if flags & _DATA else 0
        held = self._held
        h = held.get(pid)
        out: Output = NOTHING
        if h is not None and h[0] != rx:
            out = Output()
            self.flush_held(self.dev.table.clock(now), out)
            held = self._held
            h = None
        if h is None:
            if not held:
                self.held_until = now + HOLD
                if out is NOTHING:
                    out = Output()  # a new deadline
            held[pid] = [rx, flags, data]
        else:
            h[1] |= flags
            h[2] += data
        return out

    def flush_held(self, now: float, out: Output) -> None:
        """Apply what is held (now: the table's clock)."""
        held = self._held
        if not held:
            return
        self._held = {}
        self.held_until = None
        touches = []
        for pid, (rx, f, data) in held.items():
            touches.append(Touch(pid, f, 0, 0))  # (the counts are the table's: apply() needs the flags)
            if rx and data > 1:
                touches.append(Touch(pid, S.EV_AUTH | S.EV_DATA, 0, 0))
        self.apply(touches, now, out)

    def apply(
        self,
        touches: Iterable[Touch],
        now: float,
        out: Output,
        waiting: Iterable[tuple[int, bytes]] = (),
    ) -> None:
        """What one or more batch calls did: `touches` from the table, and
        `waiting`, the (peer id, packet) pairs that found no usable key
        (now: the table's clock)."""
        dev = self.dev
        by_pid = dev.by_pid
        for pid, pkt in waiting:
            peer = by_pid.get(pid)
            if peer is not None:
                self.stage(peer, (pkt,))
        timers = dev.timers
        for pid, flags, _messages, _nbytes in touches:
            peer = by_pid.get(pid)
            if peer is None:
                continue
            if flags & S.EV_AUTH:
                if flags & S.EV_ROAMED:
                    out.events.append(EndpointChanged(peer, peer.endpoint))
                if flags & S.EV_CONFIRMED:
                    dev.handshake_complete(peer, False, now, out)
                    self.send_staged(peer, out)
                if flags & S.EV_REKEY_RX and not peer.timers.last_minute_sent:
                    peer.timers.last_minute_sent = True
                    dev.handshakes.initiate(peer, now, out)
                timers.event(peer, "traversal", now)
                timers.event(peer, "authenticated_received", now)
                if flags & S.EV_DATA:
                    timers.event(peer, "data_received", now)
            if flags & S.EV_SENT:
                timers.event(peer, "traversal", now)
                timers.event(peer, "authenticated_sent", now)
                if flags & S.EV_DATA_SENT:
                    timers.event(peer, "data_sent", now)
                if flags & S.EV_REKEY_TX:
                    dev.handshakes.initiate(peer, now, out)
            if flags & S.EV_NEED_KEY:
                dev.handshakes.initiate(peer, now, out)

    def trace(self, wire: Iterable[Wire], out: Output) -> None:
        """A traced round's datagrams as events (a keepalive's peer found by
        its receiver index)."""
        dev = self.dev
        for sent, kind, size, addr, index in wire:
            if kind == UNTRACED:
                out.events.append(NotTraced(size))
                continue
            if sent:
                out.events.append(MessageSent(kind, addr))
                continue
            peer = None
            if index >= 0:
                pid = dev.table.index_peer(index)
                peer = dev.by_pid.get(pid) if pid is not None else None
            out.events.append(MessageReceived(kind, size, addr, peer))

    # ------------------------------------------------------------ staged packets

    def stage(self, peer: Peer, packets: Iterable[bytes]) -> None:
        """Keep packets for after the handshake; past the limit the oldest go."""
        q = peer.staged
        q.extend(packets)
        excess = len(q) - self.dev.config.max_staged_packets
        if excess > 0:
            for _ in range(excess):
                q.popleft()
            self.dev.drop(DropReason.QUEUE_FULL, peer, excess)

    def send_staged(self, peer: Peer, out: Output, keepalive: bool | None = None) -> None:
        """What waits for the peer goes out as an Output Sealing (what still
        finds no key when it is sealed waits on, in front)."""
        q = peer.staged
        if not q:
            return
        packets = list(q)
        q.clear()
        out.sealing.append(Sealing(peer.pid, packets, keepalive))

    def seal_listed(self, item: Sealing, now: float, out: Output) -> None:
        """A Sealing sealed here, in list form (a Device without a batch
        path: the pynacl backend, the tests); now: the table's clock."""
        dev = self.dev
        res = dev.table.seal(item.packets, now, peer=item.peer)
        out.datagrams.extend(res.datagrams)
        peer = dev.by_pid.get(item.peer)
        if peer is not None:
            left = [p for i, p in enumerate(item.packets) if res.status[i] == S.NO_KEY]
            if left:
                peer.staged.extendleft(reversed(left))
            if item.keepalive is not None and res.status[-1] == S.OK:
                out.events.append(KeepaliveSent(peer, item.keepalive))
        self.apply(res.touched, now, out)

    def keepalive(self, peer: Peer, out: Output, persistent: bool) -> None:
        """WireGuard's SendKeepalive: an empty packet if nothing else waits,
        then send what waits (which may start a handshake)."""
        if peer.staged:
            self.send_staged(peer, out)
        else:
            peer.staged.append(b"")
            self.send_staged(peer, out, keepalive=persistent)

    def flush_staged(self, peer: Peer) -> None:
        """What waited for a handshake that will not come: dropped, counted
        as staged_flushed."""
        n = sum(1 for p in peer.staged if p)
        peer.staged.clear()
        if n:
            self.dev.drop(DropReason.STAGED_FLUSHED, peer, n)
