"""The data plane: moves bytes between the UDP socket, the inner side (a TUN
device, or the in-memory port of the loopback bench) and the sans-I/O
protocol Device, in batches.

    engine = Engine(device, udp, inner, loop=loop, max_packet=65535, threads=1,
                    handshake_threads=0, on_events=None, on_fatal=None, queues=(),
                    fair_queue=False)
    engine.start()            # the UDP (and TUN) fds to the loop, or to worker threads
    engine.send_inner(...)    # the inner side hands over a batch of IP packets
    engine.stop()

The engine holds descriptors (the UdpBatchSocket, the TUN's TunBatch or the
bench's inner port), threads and one timer; it never interprets a packet and
never reaches past the Device into the sessions (vpncrypt.transport).  The
native backend's way through is a data-path object per thread from the Device (Device.batch_path:
vpncrypt.protocol.datapath.BatchPath).

One packet out (native backend, threads=1; with threads=2 the same on the
worker's thread, its results posted to the loop):

    _on_readable(tx)            the TUN fd is readable (the loop's reader)
      Worker.rounds             this file
        path.send_rounds(...)   protocol/datapath.py BatchPath -> transport/native.py Batch.send_rounds
         vc_wg_send_rounds      ONE call into C (native/wg_rounds.c) for up to TURN_ROUNDS
                                (on a worker's thread MAX_ROUNDS) rounds while they are
                                routine and full; each round:
          vc_wg_send_round      read(2) from the TUN
                                with the TSO/USO split (tun_offload.c), route, pad and seal
                                (wg_data.c), sendmmsg with GSO (udp_batch.c)
      device.fold(path, now)    protocol/datapath.py: the rounds' touches; one peer's
                                routine results are held (no object made), the rest applied
      emit(Output)              this file: datagrams, inner packets, events, sealing

One packet in:

    _on_readable(rx)            the UDP fd is readable
      Worker.rounds
        path.receive_rounds(...) BatchPath -> Batch.receive_rounds:
         vc_wg_receive_rounds   ONE call into C for up to TURN_ROUNDS routine rounds; each:
          vc_wg_receive_round   recvmmsg with GRO;
                                replay window, open, AllowedIPs, and the handshake
                                messages' cheap checks (sizes, mac1, under load mac2)
                                and queue (wg_data.c, wg_admit.c); sendmmsg of the
                                cookie replies made under load; write(2) to the TUN
                                with GRO coalescing (tun_offload.c)
      device.fold(path, now)    as above; Output.handshakes: messages wait in the queue
      emit(Output)

So a run of batches crosses into C once (I/O and the sessions together) and
back, then into the Device once: the loop in C stops after a round that is
not routine (handshake messages, replies, a short write or send, another
peer, flags the Device must act on) or not full (Worker.more).  (Objects without a descriptor, such as the
loopback bench's in-memory port, take the same steps as separate C calls.)
A packet that finds no key waits in the Device (peer.staged) and goes out,
like a keepalive, as an Output.sealing item: emit() seals it through the
loop's own path (BatchPath.seal_staged: Batch.seal_send with the peer's id,
the same C calls) and folds that round too.  What else the Device gives
back emit() applies: datagrams to UDP (handshake messages), packets to the
inner side, events to ``on_events``.

Handshake messages: data comes first.  Each turn of the event loop serves
the sockets, then one slice of at most HANDSHAKE_SLICE queued handshake
messages (Device.serve_handshakes), and schedules the next slice for the
next turn.  With ``handshake_threads=N`` the expensive part of a slice (the
X25519 and hashing of each initiation, which changes no state) runs on N
worker threads (vpncrypt.dataplane.handshake_workers) while the loop goes
on; when a slice is computed, the loop applies it (Device.
finish_handshake_work).  At most HANDSHAKE_IN_FLIGHT slices are out at a
time, applied in the order they were taken.  On the pynacl backend every
packet goes through the Device's list-form calls: that is what ``--crypto
pynacl`` measures.

Threads: with ``threads=1`` everything runs on the event loop.  With
``threads=2`` (native backend) each direction is a worker on a thread of its
own, owning one (UDP object, inner object, batch path): one receives UDP,
opens and writes the TUN, the other reads the TUN, seals and sends UDP.  The
sessions are safe for that (a sending counter is taken atomically) and
their batch calls release the GIL.  Each direction stays on one thread, so packets keep
their order.  The Device stays on the event loop: a worker takes its round's
results out of its path (path.results()) and posts them with
``loop.call_soon_threadsafe``, one callback at a time; the loop hands them
to Device.fold_results.

Queues (native backend): ``queues=[(udp, inner), ...]`` adds pairs, each a
socket of the same SO_REUSEPORT group and a queue of the same multi-queue
inner side, with a receiving and a sending worker of their own (on the loop,
or on two threads each with threads=2).  The kernel hashes each flow to one
socket and one TUN queue, so a flow stays on one worker and in order; the
sessions give every sealed message its own counter, whichever worker seals
it.  ``send_inner(..., queue=k)`` seals through queue k's sending worker.

Time: CLOCK_MONOTONIC seconds, the same in every thread (loop.time() for
the Device, time.monotonic() for a round); after every Device call the engine arms its one timer for
Device.next_deadline() (the protocol's timers and the flush of held
results), which runs Device.handle_timers.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import select
import threading
import time
from collections import deque
from concurrent.futures import Executor
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vpncrypt.dataplane import pmtu
from vpncrypt.dataplane.handshake_workers import HandshakeWorkers
from vpncrypt.dataplane.unreachable import UnreachableReplies
from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol.events import NOTHING
from vpncrypt.wire import TRANSPORT_OVERHEAD

if TYPE_CHECKING:
    from vpncrypt.protocol.datapath import BatchPath, RoundResults
    from vpncrypt.protocol.device import Device
    from vpncrypt.protocol.events import Event, Output, Sealing
    from vpncrypt.transport.native import RoundIO

# A worker's UDP and inner objects: a UdpBatchSocket and a TunBatch
# (vpncrypt.dataplane.io), or loopback-bench's in-memory port and packet
# source; the batch path reads their arrays (transport.native.Batch).
BatchIO = Any

log = logging.getLogger("vpncrypt.dataplane")

# How many batches a worker on a thread of its own (threads=2) takes, and
# posts to the loop at once, before it looks at its fd again.
MAX_ROUNDS = 16
# How many batches one readiness callback on the loop (threads=1) takes
# before yielding.  Both directions and the timers share the loop: at full
# speed 16 rounds were 2-3 ms of sealing while the ACKs and a ping's reply
# waited in the other direction's socket, and the inner TCP's RTT, and so its
# window, grew with it (BENCHMARKS.md: 4 rounds, the loaded ping's p50 -23%,
# its p99 -13%, TCP +6%, the CPU per Gbit +2.4%).
TURN_ROUNDS = 4
# Handshake messages the Device serves in one turn of the event loop (each
# costs it up to 3 X25519 operations); the rest wait for the next turn, after
# the sockets have been served again.
HANDSHAKE_SLICE = 16
# With handshake worker threads: how many slices may be computing at once (one
# being applied on the loop while the next computes keeps both cores busy).
HANDSHAKE_IN_FLIGHT = 2
_SEAL_ROOM = TRANSPORT_OVERHEAD + 16  # the header, the tag and up to 15 bytes of padding
# The loop's own path seals staged packets and keepalives, this many at a time.
_STAGED_BATCH = 16
# (a socket's error from an ICMP message, reported once by a receive; with
# IP_RECVERR on, for "fragmentation needed" too: EMSGSIZE)
_IGNORED_RECV_ERRORS = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EMSGSIZE)
# The fair queue's drops: its C counters (vc_fq_stats, native/vc_io.h) by
# the reason each counts; with CoDel's on the receiving sockets (aqm), what
# the data plane lists, at 0 or more, while the fair queue is on.
FAIR_QUEUE_DROPS: dict[str, DropReason] = {
    "codel_drops": DropReason.FQ_CODEL,
    "overlimit_drops": DropReason.FQ_OVERFLOW,
    "too_big": DropReason.FQ_TOO_BIG,
    "nomem_drops": DropReason.FQ_NOMEM,
}
FAIR_QUEUE_REASONS = (DropReason.AQM, *FAIR_QUEUE_DROPS.values())


# Batch sizes are counted in buckets of at most 1, 2, 4, ... 128 packets (the
# daemon's batch), and more (bucket (n - 1).bit_length(), the last one open): one
# addition per batch.
BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128)
# The bucket of a round of n packets, by lookup (n is at most a batch's capacity, 1024).
_BUCKET = (0,) + tuple(min((n - 1).bit_length(), len(BATCH_SIZE_BOUNDS)) for n in range(1, 1025))


def _bucket(n: int) -> int:
    return _BUCKET[n] if n < len(_BUCKET) else len(BATCH_SIZE_BOUNDS)


class EngineCounters:
    """Drops the engine itself sees (the protocol and the sessions count
    the rest), and the batches it moved with their sizes."""

    __slots__ = (
        "tx_send_errors",
        "tx_dropped",
        "inner_write_errors",
        "inner_dropped",
        "rx_batches",
        "tx_batches",
        "rx_batch_packets",
        "tx_batch_packets",
        "rx_batch_sizes",
        "tx_batch_sizes",
        "icmp_errors_sent",
        "icmp_errors_limited",
        "pmtu_errors_sent",
        "pmtu_errors_limited",
        "pmtu_refit_packets",
        "pmtu_refit_pieces",
    )
    _LISTS = ("rx_batch_sizes", "tx_batch_sizes")
    tx_send_errors: int
    tx_dropped: int
    inner_write_errors: int
    inner_dropped: int
    rx_batches: int
    tx_batches: int
    rx_batch_packets: int
    tx_batch_packets: int
    rx_batch_sizes: list[int]
    tx_batch_sizes: list[int]
    # ICMP errors for packets with no peer or no endpoint (dataplane.unreachable):
    # written to the inner side, and not sent for the rate limits
    icmp_errors_sent: int
    icmp_errors_limited: int
    # packets too big for their peer's path MTU (dataplane.pmtu): the
    # "fragmentation needed" / "packet too big" errors written to the inner
    # side and held back by the limits, and the packets cut to fit
    # (TCP segments, IPv4 without DF) with the pieces sealed from them
    pmtu_errors_sent: int
    pmtu_errors_limited: int
    pmtu_refit_packets: int
    pmtu_refit_pieces: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, [0] * (len(BATCH_SIZE_BOUNDS) + 1) if name in self._LISTS else 0)

    def rx_batch(self, n: int) -> None:
        self.rx_batches += 1
        self.rx_batch_packets += n
        self.rx_batch_sizes[_bucket(n)] += 1

    def tx_batch(self, n: int) -> None:
        self.tx_batches += 1
        self.tx_batch_packets += n
        self.tx_batch_sizes[_bucket(n)] += 1

    def add(self, other: "EngineCounters") -> None:
        for name in self.__slots__:
            if name in self._LISTS:
                mine = getattr(self, name)
                for i, v in enumerate(getattr(other, name)):
                    mine[i] += v
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, int]:
        """The plain counts (the size buckets are batch_sizes())."""
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LISTS}

    def batch_sizes(self) -> dict[str, tuple[list[int], int]]:
        """{"rx"/"tx": (counts per bucket of BATCH_SIZE_BOUNDS and one more, packets)}."""
        return {
            "rx": (list(self.rx_batch_sizes), self.rx_batch_packets),
            "tx": (list(self.tx_batch_sizes), self.tx_batch_packets),
        }


class _Watched:
    """A Worker's udp or inner object: assigning one (a twin for a thread, a
    new socket) makes the worker look again at what its rounds read from."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = "_" + name

    def __get__(self, obj: Worker | None, owner: type | None = None) -> Any:
        return self if obj is None else obj.__dict__[self.key]

    def __set__(self, obj: Worker, value: BatchIO) -> None:
        obj.__dict__[self.key] = value
        obj._watch()


class Worker:
    """One direction of the data plane and what it owns: its UDP and inner
    objects (their arrays and receive state), its batch path and its
    counters.  It runs on the loop (threads=1) or on a thread of its own; a
    worker is the unit of parallelism: its packets stay in order."""

    def __init__(self, udp: BatchIO, inner: BatchIO, path: BatchPath, sending: bool) -> None:
        self.path = path
        self.sending = sending  # inner -> UDP; else UDP -> inner
        self.counters = EngineCounters()
        self._udp = udp
        self._inner = inner
        self.replies: UnreachableReplies | None = None  # the engine's, for a sending worker
        self._watch()

    udp = _Watched()
    inner = _Watched()

    def _watch(self) -> None:
        """What more() asks of the object a round reads from: the largest
        batch it returns and whether it holds back what it read.  An object
        that cannot say (no holds()) is always asked again."""
        src = self._inner if self.sending else self._udp
        holds = getattr(src, "holds", None)
        self._full = src.batch if holds is not None else 0
        self._holds = holds if holds is not None else _always

    @property
    def fd(self) -> int:
        """What it waits on: the inner side's fd when sending, else the socket's."""
        fd: int = self._inner.fd if self.sending else self._udp.fd
        return fd

    def more(self, n: int) -> bool:
        """After a round that took n: whether to run the next one at once.
        Yes if the object holds back what it read (that does not make the
        fd readable), or if the round took at least half a batch: traffic
        that streams in is met sooner and cheaper by the next round than by
        a turn of the loop.  After a smaller round (a burst ended: the
        round read until EAGAIN) the fd signals what comes later, readiness
        being level-triggered, and no empty round (a system call and a trip
        through Python) is spent to learn that nothing waits."""
        return 2 * n >= self._full or self._holds()

    def round(self, now: float) -> int:
        """One round (a batch through the sockets and the sessions), counted;
        returns how many packets or datagrams it took (0: none waited).
        now: time.monotonic() (one reading may serve several rounds)."""
        path = self.path
        if self.sending:
            n = path.send(self._inner, self._udp, now)
        else:
            n = path.receive(self._udp, self._inner, now)
        if n:
            self._count(n)
        return n

    def rounds(self, now: float, k: int) -> int:
        """Up to k rounds in one call into C while they are routine
        (BatchPath.receive_rounds/send_rounds), counted as round() counts
        each; returns what the last one took (path.rounds: how many ran; the
        Device folds them at once).  The rounds before the last are routine:
        nothing of theirs failed, was dropped or replied to."""
        path = self.path
        if self.sending:
            n = path.send_rounds(self._inner, self._udp, now, k, self._full)
        else:
            n = path.receive_rounds(self._udp, self._inner, now, k, self._full)
        used = path.rounds
        if used > 1:  # (routine: only their sizes count)
            count = self.counters.tx_batch if self.sending else self.counters.rx_batch
            sizes = path.loop_sizes
            for i in range(used - 1):
                count(sizes[i])
        if n:
            self._count(n)
        return n

    def _count(self, n: int) -> None:
        """A round of n (the last of a call) counted: its batch size, and
        what its socket and TUN I/O did not do."""
        c, io = self.counters, self.path.io
        if self.sending:
            c.tx_batch(n)
            if io.sent < io.sealed or io.gso_off:
                _count_sent(c, io)
            if io.unroutable and self.replies is not None:
                self._unreachable(io.unroutable)
            if io.too_big and self.replies is not None:
                self._too_big()
            return
        c.rx_batch(n)
        if io.replies:
            _count_sent(c, io, io.replies, io.replies_sent)
        if io.written < io.delivered:
            c.inner_dropped += io.delivered - io.written
            c.inner_write_errors += 1

    def _unreachable(self, n: int) -> None:
        """The ICMP errors for the round's n packets that had no peer or
        no endpoint (rare: only such a round comes here); past the global
        limit they are only counted."""
        replies, c, now = self.replies, self.counters, time.monotonic()
        assert replies is not None
        if not replies.room(now):
            c.icmp_errors_limited += n
            return
        inner = self._inner
        packets = self.path.unroutable()
        sent, limited = replies.answer(packets, inner, now, bool(getattr(inner, "vnet_hdr", False)))
        c.icmp_errors_sent += sent
        c.icmp_errors_limited += limited

    def _too_big(self) -> None:
        """The round's packets too big for their peer's path MTU (rare: only
        such a round comes here): their senders told, within the limits,
        and what may be cut to fit sealed again in pieces (dataplane.pmtu)."""
        replies, c, now, inner = self.replies, self.counters, time.monotonic(), self._inner
        assert replies is not None
        found = self.path.too_big()
        pairs = [(pkt, mtu) for pkt, _pid, mtu in found]
        if replies.room(now):
            sent, limited = pmtu.answer(replies, pairs, inner, now, bool(getattr(inner, "vnet_hdr", False)))
        else:
            sent, limited = 0, len(pairs)
        c.pmtu_errors_sent += sent
        c.pmtu_errors_limited += limited
        for pkt, pid, mtu in found:
            pieces = pmtu.refit(pkt, mtu)
            if pieces:
                c.pmtu_refit_packets += 1
                c.pmtu_refit_pieces += self.path.seal_pieces(pieces, pid, self._udp)


def _always() -> bool:
    return True


def _count_sent(c: EngineCounters, io: RoundIO, made: int | None = None, sent: int | None = None) -> None:
    """A round's send: what did not go counted (made/sent: a receive round's
    cookie replies; by default the sealed messages), and GSO turned off by
    the send logged."""
    if made is None or sent is None:
        made, sent = io.sealed, io.sent
    if sent < made:
        c.tx_dropped += made - sent
        c.tx_send_errors += 1
    if io.gso_off:
        _gso_disabled(io.send_errno)


def _gso_disabled(err: int) -> None:
    """A UDP_SEGMENT send was refused (EMSGSIZE: the segments are larger
    than the outer path MTU; the kernel fragments single datagrams, never
    GSO segments; EIO or EINVAL: the route cannot segment).  Every datagram
    went on its own, and the socket sends without GSO from now on (the
    socket object turned it off: transport.native.Batch, UdpBatchSocket.send)."""
    log.info(
        "UDP GSO disabled: a segmented send failed with %s (datagrams larger than the path MTU, "
        "or a route that cannot segment); sending datagram by datagram from now on",
        errno.errorcode.get(err, err),
    )


class Engine:
    def __init__(
        self,
        device: Device,
        udp: BatchIO,
        inner: BatchIO,
        *,
        loop: asyncio.AbstractEventLoop,
        max_packet: int = 65535,
        threads: int = 1,
        handshake_threads: int = 0,
        handshake_executor: Executor | None = None,
        on_fatal: Callable[[BaseException], object] | None = None,
        on_events: Callable[[list[Event]], object] | None = None,
        queues: Sequence[tuple[BatchIO, BatchIO]] = (),
        fair_queue: bool = False,
    ) -> None:
        self.device = device
        self.udp = udp
        self.inner = inner
        self.loop = loop
        self.native = device.backend == "native"
        self.threads = max(1, int(threads)) if self.native else 1
        self.on_fatal = on_fatal
        self.on_events = on_events
        self._counters = EngineCounters()
        self._max_packet = max_packet
        # opt-in: each send round's fair queue, CoDel on each receiving socket
        self.fair_queue = bool(fair_queue) and self.native
        self._aqm_retired = 0  # drop_aqm of the receive states a new socket or thread replaced
        if not self.native and queues:
            raise ValueError("queues are the native backend's")
        # the ICMP errors for packets with no peer or no endpoint, one limit for every worker
        self._replies = UnreachableReplies()
        # (UDP object, inner object, its receiving worker, its sending worker)
        # for the given pair and each of `queues`: a socket of the same
        # SO_REUSEPORT group and a queue of the same multi-queue TUN each, so
        # the kernel pins each flow to one of them
        self._pairs = (
            [(u, i, *self._queue_workers(u, i)) for u, i in [(udp, inner), *queues]] if self.native else []
        )
        if self.native:
            _udp, _inner, self.rx, self.tx = self._pairs[0]
            # the loop's own, for staged packets and keepalives
            self._staged = device.batch_path(min(udp.batch, _STAGED_BATCH), max_packet + _SEAL_ROOM)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._running = False
        self._threads: list[threading.Thread] = []
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._lock = threading.Lock()
        self._pending: RoundResults | None = None  # posted by the threads, merged
        self._serving: asyncio.Handle | None = None  # the handle of the next handshake slice
        # handshake work off the loop (native backend): `handshake_executor`,
        # an Executor (tests give a synchronous one), or a pool of its own
        self._hs_threads = (
            max(1, int(handshake_threads))
            if self.native and (handshake_threads > 0 or handshake_executor is not None)
            else 0
        )
        self._hs_executor = handshake_executor
        self._workers: HandshakeWorkers | None = None  # while started, with _hs_threads
        self._slices: deque[list[Any]] = deque()  # [work, now, computed?] in the order taken
        self.last_kernels: tuple[str | None, str | None] | None = (
            None  # (chacha, poly1305) that served a data thread last
        )

    @property
    def counters(self) -> EngineCounters:
        """Every worker's counters, summed."""
        total = EngineCounters()
        parts = [self._counters]
        for _udp, _inner, rx, tx in self._pairs:
            parts += [rx.counters, tx.counters]
        for part in parts:
            total.add(part)
        return total

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._running = True
        if self._hs_threads and self._workers is None:
            self._workers = HandshakeWorkers(self.loop, self._hs_threads, self._hs_executor)
        if self.threads >= 2:
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            for k, (udp, inner, rx, tx) in enumerate(self._pairs):
                if rx.udp is not udp:  # a twin of an earlier start
                    self._retire(rx.udp)
                rx.udp = udp.twin()
                self._spawn(f"vpncrypt-rx{k or ''}", rx)
                if getattr(inner, "fd", None) is not None:
                    tx.inner = inner.twin()
                    tx.udp = udp.twin()
                    self._spawn(f"vpncrypt-tx{k or ''}", tx)
        elif self.native:
            for udp, inner, rx, tx in self._pairs:
                self.loop.add_reader(udp.fd, self._on_readable, rx)
                if getattr(inner, "fd", None) is not None:
                    self.loop.add_reader(inner.fd, self._on_readable, tx)
        else:
            self.loop.add_reader(self.udp.fd, self._receive_python)
            if getattr(self.inner, "fd", None) is not None:
                self.loop.add_reader(self.inner.fd, self._send_python)
        self.run_timers()

    def _spawn(self, name: str, worker: Worker) -> None:
        t = threading.Thread(target=self._worker_thread, args=(worker,), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def stop(self) -> None:
        self._running = False
        if self._threads and self._wake_w is not None and self._wake_r is not None:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(5)
            self._threads = []
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = None
        else:
            pairs = [(u, i) for u, i, _rx, _tx in self._pairs] or [(self.udp, self.inner)]
            for reader in [fd for u, i in pairs for fd in (u.fd, getattr(i, "fd", None))]:
                if reader is not None:
                    try:
                        self.loop.remove_reader(reader)
                    except (ValueError, OSError):
                        pass
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._serving is not None:
            self._serving.cancel()
            self._serving = None
        # slices still computing are dropped when they come back: their
        # initiators retry, as after any loss
        self._slices.clear()
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def replace_udp(self, udp: BatchIO, queues: Sequence[BatchIO] = ()) -> None:
        """Switch to other UdpBatchSockets (same batch size), e.g. after a
        listen-port change: `udp` for the first queue and one in `queues` for
        each further one (the sockets of the new SO_REUSEPORT group, in queue
        order); the caller closes the old ones.  The workers, their counters
        and the sessions stay."""
        new = [udp, *queues]
        if len(new) != max(len(self._pairs), 1):
            raise ValueError(f"{len(new)} UDP sockets for {max(len(self._pairs), 1)} queues")
        if any(u.batch != self.udp.batch for u in new):
            raise ValueError("the new socket must have the same batch size")
        running = self._running
        if running:
            self.stop()
        self.udp = udp
        for k, (q_udp, (_old, inner, rx, tx)) in enumerate(zip(new, self._pairs)):
            self._retire(rx.udp)
            rx.udp = tx.udp = q_udp
            self._pairs[k] = (q_udp, inner, rx, tx)
        if running:
            self.start()

    def _queue_workers(self, udp: BatchIO, inner: BatchIO) -> tuple[Worker, Worker]:
        """A queue's receiving and sending worker, each with its batch path.
        Inner batches are at most as large as UDP ones; the sending path's
        room is the largest inner packet (the TUN's read size, not its
        current MTU)."""
        fq, dev = self.fair_queue, self.device
        tx = Worker(
            udp, inner, dev.batch_path(udp.batch, self._max_packet + _SEAL_ROOM, fair_queue=fq), sending=True
        )
        tx.replies = self._replies
        return Worker(
            udp, inner, dev.batch_path(udp.batch, TRANSPORT_OVERHEAD, fair_queue=fq), sending=False
        ), tx

    def queue_workers(self) -> list[tuple[Worker, Worker]]:
        """(receiving worker, sending worker) of each queue, the first first;
        none for the pure-Python backend."""
        return [(rx, tx) for _udp, _inner, rx, tx in self._pairs]

    def fair_queue_counters(self) -> tuple[dict[DropReason, int], int] | None:
        """With fair_queue, its counters summed over the queues: what it
        dropped, by reason (every one of FAIR_QUEUE_REASONS, 0 or more: aqm,
        the receive rounds' CoDel over every receiving socket's state; the
        send rounds' fair queues' by FAIR_QUEUE_DROPS), and the packets the
        send rounds' queues took in; None without it."""
        if not self.fair_queue:
            return None
        drops = dict.fromkeys(FAIR_QUEUE_REASONS, 0)
        drops[DropReason.AQM] = self._aqm_retired
        packets = 0
        for rx, tx in self.queue_workers():
            drops[DropReason.AQM] += getattr(rx.udp, "aqm_dropped", 0)
            st = tx.path.fair_queue_stats()
            for field, reason in FAIR_QUEUE_DROPS.items():
                drops[reason] += st[field]
            packets += st["enqueued"]
        return drops, packets

    def _retire(self, udp: BatchIO) -> None:
        """A receiving object the engine stops using: its CoDel drops stay
        counted (counters never go back)."""
        self._aqm_retired += getattr(udp, "aqm_dropped", 0)

    def changed(self) -> None:
        """After a configuration change made directly on the Device: its
        timers may have moved."""
        self._arm_timer()

    # ------------------------------------------------------------ output

    def emit(self, out: Output) -> None:
        """Apply what a Device call produced, and re-arm its timer (NOTHING:
        nothing to apply, no deadline moved)."""
        if out is NOTHING:
            return
        if out.datagrams:
            datagrams = [(d, a) for d, a in out.datagrams if a is not None]
            gso = self.udp.gso
            sent, err = self.udp.send_datagrams(datagrams)
            if sent < len(datagrams):
                self._counters.tx_dropped += len(datagrams) - sent
                self._counters.tx_send_errors += 1
            if gso and not self.udp.gso:
                _gso_disabled(err)
        if out.packets:
            self.inner.write_packets(out.packets)
        if out.events and self.on_events is not None:
            self.on_events(out.events)
        for item in out.sealing:
            self._seal_staged(item)
        if out.handshakes and self._serving is None and self._running:
            self._serving = self.loop.call_soon(self._serve_handshakes)
        self._arm_timer()

    def _seal_staged(self, item: Sealing) -> None:
        """A Sealing of an Output: through the loop's own batch path, then
        its round to the Device like any other."""
        path = self._staged
        path.seal_staged(item, self.udp, time.monotonic())
        _count_sent(self._counters, path.io)
        self.emit(self.device.fold(path, self.loop.time()))

    # ------------------------------------------------------------ timers

    def run_timers(self) -> None:
        self._timer = None
        self._timer_at = None
        if not self._running:
            return
        self.emit(self.device.handle_timers(self.loop.time()))

    def _arm_timer(self) -> None:
        if not self._running:
            return
        at = self.device.next_deadline()
        if at is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_at = None
            return
        if self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_at(max(at, self.loop.time()), self.run_timers)

    # ------------------------------------------------------------ handshake slices

    def _serve_handshakes(self) -> None:
        """One slice of the queued handshake messages; the next slice in the
        next turn of the loop, after the sockets."""
        self._serving = None
        if not self._running:
            return
        if self._workers is not None:
            self._send_slices()
            return
        out, left = self.device.serve_handshakes(self.loop.time(), HANDSHAKE_SLICE)
        self.emit(out)
        if left and self._running and self._serving is None:
            self._serving = self.loop.call_soon(self._serve_handshakes)

    def _send_slices(self) -> None:
        """Slices of the queue to the worker threads, up to HANDSHAKE_IN_FLIGHT."""
        workers = self._workers
        while workers is not None and len(self._slices) < HANDSHAKE_IN_FLIGHT:
            now = self.loop.time()
            work = self.device.take_handshake_work(now, HANDSHAKE_SLICE)
            if not work:
                return
            entry = [work, now, False]
            self._slices.append(entry)
            workers.run(work, functools.partial(self._computed, entry))

    def _computed(self, entry: list[Any]) -> None:
        """A slice came back from the workers (on the loop): apply every
        computed slice at the head, in the order they were taken."""
        entry[2] = True
        left = 0
        while self._slices and self._slices[0][2]:
            work, now, _ = self._slices.popleft()
            if not self._running:
                continue
            out, left = self.device.finish_handshake_work(work, now)
            self.emit(out)
        if left and self._running and self._serving is None:
            self._serving = self.loop.call_soon(self._serve_handshakes)

    # ------------------------------------------------------------ results from the threads

    def _post(self, results: RoundResults) -> None:
        """From a data thread: hand a round's results to the loop, one
        callback at a time (results posted meanwhile are merged)."""
        with self._lock:
            if self._pending is None:
                self._pending = results
                schedule = True
            else:
                self._pending.merge(results)
                schedule = False
        if schedule:
            self._note_kernels()
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: shutting down
                pass

    def _drain(self) -> None:
        with self._lock:
            p, self._pending = self._pending, None
        if p is not None and self._running:
            self.emit(self.device.fold_results(p, self.loop.time()))

    # ------------------------------------------------------------ on the loop

    def _on_readable(self, w: Worker) -> None:
        """A worker's fd is readable (threads=1): up to TURN_ROUNDS rounds,
        each handed to the Device, until one finds nothing more to do
        (Worker.more).  If the last one still found work, the rest waits for
        the next turn of the loop, not for the fd: what a socket or TUN
        object holds back (the segments of a GRO or TSO super-packet past
        its batch) does not make the fd readable."""
        if not self._running:  # (a turn scheduled below, after a stop)
            return
        fold, emit, loop, path, rounds, more = (
            self.device.fold,
            self.emit,
            self.loop,
            w.path,
            w.rounds,
            w.more,
        )
        now = time.monotonic()  # for all of this turn's rounds (they take microseconds each)
        try:
            left = TURN_ROUNDS
            while left > 0:
                n = rounds(now, left)  # (the routine ones in one call)
                used = path.rounds
                if not w.sending and (path.io.pmtu_learned or path.io.pmtu_refused):
                    self._rearm(w.fd, self._on_readable, w)
                if not n and used == 1:
                    return
                left -= used
                out = fold(path, loop.time())
                if out is not NOTHING:
                    emit(out)
                if not n or not more(n):
                    return
            if self._running:
                loop.call_soon(self._on_readable, w)
        except OSError as e:
            # (an ICMP error for an earlier datagram, on the socket)
            if w.sending or e.errno not in _IGNORED_RECV_ERRORS:
                self._fatal(e)
            else:
                self._rearm(w.fd, self._on_readable, w)

    def _rearm(self, fd: int, callback: Callable[..., object], *args: object) -> None:
        """The socket's reader again, once this callback has returned: the
        socket had an error (an ICMP message, IP_RECVERR), so the kernel
        reported it POLLERR, and libuv (uvloop) stops watching an fd on
        POLLERR after one last call of its reader.  (Measured: a TCP
        transfer stalled for good after the first "fragmentation needed",
        its ACKs left unread in the socket.)  Only such rounds come here."""

        def rearm() -> None:
            if not self._running:
                return
            try:
                self.loop.remove_reader(fd)
            except (ValueError, OSError):
                pass
            self.loop.add_reader(fd, callback, *args)

        self.loop.call_soon(rearm)

    def _receive_python(self) -> None:
        """The pynacl backend's _on_readable for the socket."""
        if not self._running:
            return
        to_addr = self.udp.endpoints.to_addr
        try:
            for _ in range(TURN_ROUNDS):
                n, view, off, lens, ep = self.udp.recv()
                if getattr(self.udp, "errors_read", 0):  # (see _rearm)
                    self.udp.errors_read = 0
                    self._rearm(self.udp.fd, self._receive_python)
                if n == 0:
                    return
                self._counters.rx_batch(n)
                datagrams = [(bytes(view[off[i] : off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]
                self.emit(self.device.receive_datagrams(datagrams, self.loop.time()))
            if self._running:
                self.loop.call_soon(self._receive_python)
        except OSError as e:
            if e.errno not in _IGNORED_RECV_ERRORS:
                self._fatal(e)

    def _send_python(self) -> None:
        """The pynacl backend's _on_readable for the inner side."""
        if not self._running:
            return
        try:
            for _ in range(TURN_ROUNDS):
                n, view, off, lens = self.inner.read()
                if n == 0:
                    return
                self.send_inner(self.inner.slab, view, off, lens, n)
            if self._running:
                self.loop.call_soon(self._send_python)
        except OSError as e:
            self._fatal(e)

    def send_inner(self, slab: Any, view: memoryview, off: Any, lens: Any, n: int, queue: int = 0) -> None:
        """Route, seal and send a batch of inner IP packets (slab is the cffi
        pointer, view a memoryview of the same memory), on the loop, through
        the sending worker of `queue` (0: the engine's own pair)."""
        if not self.native:
            self._counters.tx_batch(n)
            pkts = [bytes(view[off[i] : off[i] + lens[i]]) for i in range(n)]
            self.emit(self.device.send_packets(pkts, self.loop.time()))
            return
        w = self._pairs[queue][3]
        path, udp, c, io = w.path, w.udp, w.counters, w.path.io
        cap = path.capacity
        if n <= cap:
            c.tx_batch(n)
            path.seal_send(slab, view, off, lens, n, udp, time.monotonic())
            if io.sent < io.sealed or io.gso_off:
                _count_sent(c, io)
            if io.too_big and w.replies is not None:
                w._too_big()
            out = self.device.fold(path, self.loop.time())
            if out is not NOTHING:
                self.emit(out)
            return
        for first in range(0, n, cap):  # in pieces the batch arrays can hold
            k = min(cap, n - first)
            c.tx_batch(k)
            path.seal_send(slab, view, off + first, lens + first, k, udp, time.monotonic())
            _count_sent(c, io)
            self.emit(self.device.fold(path, self.loop.time()))

    # ------------------------------------------------------------ the data threads

    def _poller(self, fd: int) -> tuple[select.poll, int] | None:
        """(a poll object for fd and the stop pipe, the pipe), made once per
        thread; None once stopped."""
        wake = self._wake_r
        if wake is None:
            return None
        p = select.poll()
        p.register(fd, select.POLLIN)
        p.register(wake, select.POLLIN)
        return p, wake

    def _wait(self, poller: tuple[select.poll, int] | None) -> bool:
        """Block (without the GIL) until the poller's fd is readable; False: stop."""
        if poller is None:
            return False
        p, wake = poller
        while self._running:
            for f, _ev in p.poll(1000):
                if f == wake:
                    return False
                return True
        return False

    def _note_kernels(self) -> None:
        from vpncrypt.crypto import last_kernels

        k = last_kernels()
        if any(k):
            self.last_kernels = k

    def _worker_thread(self, w: Worker) -> None:
        """A worker on a thread of its own (threads=2): rounds while there is
        work (until Worker.more says the fd will signal the rest: what a
        socket or TUN object holds back does not make its fd readable), the results of up to MAX_ROUNDS
        rounds merged and posted to the loop at once; then it waits for the
        fd."""
        path = w.path
        try:
            poller = self._poller(w.fd)
            while self._wait(poller):
                more = True
                while more and self._running:
                    merged = None
                    now = time.monotonic()
                    left = MAX_ROUNDS
                    while left > 0:
                        try:
                            n = w.rounds(now, left)  # (the routine ones in one call)
                        except OSError as e:
                            if w.sending or e.errno not in _IGNORED_RECV_ERRORS:
                                raise
                            left -= 1
                            continue
                        used = path.rounds
                        if not n and used == 1:
                            more = False
                            break
                        left -= used
                        res = path.results()
                        if res is not None:
                            if merged is None:
                                merged = res
                            else:
                                merged.merge(res)
                        if not n or not w.more(n):
                            more = False
                            break
                    if merged is not None:
                        self._post(merged)
        except Exception as e:  # noqa: BLE001 - reported on the loop
            self._thread_failed(e)
        finally:
            self._note_kernels()

    def _thread_failed(self, exc: BaseException) -> None:
        if not self._running:
            return
        try:
            self.loop.call_soon_threadsafe(self._fatal, exc)
        except RuntimeError:
            pass

    def _fatal(self, exc: BaseException) -> None:
        # With on_fatal the owner decides what it was: the daemon calls a
        # read's EBADFD on a deleted TUN an orderly stop, other errors a
        # failure, and says so in one line of its own.
        if self.on_fatal is None:
            log.error("data plane stopped: %s", exc)
        else:
            log.debug("data plane stopped: %s", exc)
        self.stop()
        if self.on_fatal is not None:
            self.on_fatal(exc)
