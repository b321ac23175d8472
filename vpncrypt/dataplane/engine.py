"""The data plane: moves bytes between the UDP socket, the inner side (a TUN
device, or the in-memory port of the loopback bench) and the sans-I/O
protocol Device, in batches.

    engine = Engine(device, udp, inner, loop=loop, max_packet=65535, threads=1,
                    handshake_threads=0, on_events=None, on_fatal=None)
    engine.start()            # the UDP (and TUN) fds to the loop, or to worker threads
    engine.send_inner(...)    # the inner side hands over a batch of IP packets
    engine.stop()

On the native backend, transport data never goes through Python one message
at a time: one call into the session table opens or seals a whole batch
(vpncrypt.transport.native.Batch), and the batch results go to the Device in
one call per wakeup (Device.on_transport).  The same open batch makes the
cheap checks of handshake messages in C (sizes, mac1; under load mac2, with
the cookie replies it makes, which the engine sends at once, and the
per-source rate limit) and puts what passes into the table's bounded
handshake queue.  Data comes first: each turn of the event loop serves the
sockets, then one slice of at most HANDSHAKE_SLICE queued handshake messages
(Device.serve_handshakes), and schedules the next slice for the next turn.
With ``handshake_threads=N`` (native backend) the expensive part of a slice
(the X25519 and hashing of each initiation, which changes no state) runs on
N worker threads (vpncrypt.dataplane.handshake_workers) while the loop goes
on; when a slice is computed, the loop applies it (Device.
finish_handshake_work: the replay and rate checks on the peer's state, the
session, the response).  At most HANDSHAKE_IN_FLIGHT slices are out at a
time; they are applied in the order they were taken, so each is served newest
first as without workers.  On the pynacl backend every packet goes through the
Device's list-form calls: that is what ``--crypto pynacl`` measures.

Threads: with ``threads=1`` everything runs on the event loop.  With
``threads=2`` (native backend) the two directions run on threads of their
own: one receives UDP, opens and writes the TUN, the other reads the TUN,
seals and sends UDP.  The table's batch calls release the GIL and the table
is safe for that (a sending counter is taken atomically).  Each direction
stays on one thread, so packets keep their order.  The Device stays on the
event loop: the threads hand it their batch results and handshake messages
through ``loop.call_soon_threadsafe``.

The engine reads the clock (``loop.time()``: CLOCK_MONOTONIC, the same in
every thread), turns it into the device's clock for batch calls
(``table.clock``), and arms the Device's timer after every Device call.  It
never interprets packets itself.
"""
import errno
import logging
import os
import select
import threading
import time
from collections import deque

from vpncrypt.dataplane.handshake_workers import HandshakeWorkers
from vpncrypt.transport import status as S
from vpncrypt.transport.model import Touch

log = logging.getLogger("vpncrypt.dataplane")

# How many batches one readiness callback may take before yielding.
MAX_ROUNDS = 16
# Batch results that only say "data went in or out" (timers to restart) reach
# the Device at most this long (10 ms) after the batch, merged per peer; anything else
# (a key confirmed, a rekey due, roaming, packets without a key) at once.  The
# held results are also handed over before the Device's timers run.
HOLD = 0.01
# Handshake messages the Device serves in one turn of the event loop (each
# costs it up to 3 X25519 operations); the rest wait for the next turn, after
# the sockets have been served again.
HANDSHAKE_SLICE = 16
# With handshake worker threads: how many slices may be computing at once (one
# being applied on the loop while the next computes keeps both cores busy).
HANDSHAKE_IN_FLIGHT = 2
_SEAL_ROOM = S.OVERHEAD + 16
_IGNORED_RECV_ERRORS = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)


# Batch sizes are counted in buckets of at most 1, 2, 4, ... 64 packets, and more
# (bucket (n - 1).bit_length(), the last one open): one addition per batch.
BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64)


class EngineCounters:
    """Drops the engine itself sees (the protocol and the session table count
    the rest), and the batches it moved with their sizes."""
    __slots__ = ("tx_send_errors", "tx_dropped", "inner_write_errors", "inner_dropped",
                 "rx_batches", "tx_batches", "rx_batch_packets", "tx_batch_packets",
                 "rx_batch_sizes", "tx_batch_sizes")
    _LISTS = ("rx_batch_sizes", "tx_batch_sizes")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [0] * (len(BATCH_SIZE_BOUNDS) + 1) if name in self._LISTS else 0)

    def rx_batch(self, n: int) -> None:
        self.rx_batches += 1
        self.rx_batch_packets += n
        self.rx_batch_sizes[min((n - 1).bit_length(), len(BATCH_SIZE_BOUNDS))] += 1

    def tx_batch(self, n: int) -> None:
        self.tx_batches += 1
        self.tx_batch_packets += n
        self.tx_batch_sizes[min((n - 1).bit_length(), len(BATCH_SIZE_BOUNDS))] += 1

    def add(self, other: "EngineCounters") -> None:
        for name in self.__slots__:
            if name in self._LISTS:
                mine = getattr(self, name)
                for i, v in enumerate(getattr(other, name)):
                    mine[i] += v
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self):
        """The plain counts (the size buckets are batch_sizes())."""
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LISTS}

    def batch_sizes(self) -> dict:
        """{"rx"/"tx": (counts per bucket of BATCH_SIZE_BOUNDS and one more, packets)}."""
        return {"rx": (list(self.rx_batch_sizes), self.rx_batch_packets),
                "tx": (list(self.tx_batch_sizes), self.tx_batch_packets)}


class _Direction:
    """What one direction needs for itself: its own UDP and inner objects
    (arrays, receive state), its table batch and its counters."""

    def __init__(self, engine, udp, inner, batch):
        self.engine = engine
        self.udp = udp
        self.inner = inner
        self.batch = batch
        self.counters = EngineCounters()


class Engine:
    def __init__(self, device, udp, inner, *, loop, max_packet: int = 65535, threads: int = 1,
                 handshake_threads: int = 0, handshake_executor=None, on_fatal=None, on_events=None):
        self.device = device
        self.table = device.table
        self.udp = udp
        self.inner = inner
        self.loop = loop
        self.native = device.backend == "native"
        self.threads = max(1, int(threads)) if self.native else 1
        self.on_fatal = on_fatal
        self.on_events = on_events
        self._counters = EngineCounters()
        self._max_packet = max_packet
        if self.native:
            self.rx = _Direction(self, udp, inner, self.table.batch(udp.batch, S.OVERHEAD))
            # inner batches are at most as large as UDP ones; max_packet: the
            # largest inner packet (the TUN's read size, not its current MTU)
            self.tx = _Direction(self, udp, inner, self.table.batch(udp.batch, max_packet + _SEAL_ROOM))
        self._timer = None
        self._timer_at = None
        self._running = False
        self._threads = []
        self._wake_r = self._wake_w = None
        self._lock = threading.Lock()
        self._pending = None          # [touches, waiting, handshakes?] from the threads
        self._held = {}               # peer -> [received?, flags, messages, bytes, data batches]
        self._held_timer = None
        self._serving = None          # the handle of the next handshake slice
        # handshake work off the loop (native backend): `handshake_executor`,
        # an Executor (tests give a synchronous one), or a pool of its own
        self._hs_threads = max(1, int(handshake_threads)) if self.native and (
            handshake_threads > 0 or handshake_executor is not None) else 0
        self._hs_executor = handshake_executor
        self._workers = None          # HandshakeWorkers while started, with _hs_threads
        self._slices = deque()        # [work, now, computed?] in the order taken
        self.last_kernels = None      # (chacha, poly1305) that served a data thread last

    @property
    def counters(self) -> EngineCounters:
        """Every direction's counters, summed."""
        total = EngineCounters()
        parts = [self._counters]
        if self.native:
            parts += [self.rx.counters, self.tx.counters]
        for part in parts:
            total.add(part)
        return total

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._running = True
        if self._hs_threads and self._workers is None:
            self._workers = HandshakeWorkers(self.loop, self._hs_threads, self._hs_executor)
        inner_fd = getattr(self.inner, "fd", None)
        if self.threads >= 2:
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self.rx.udp = self.udp.twin()
            self._spawn("vpncrypt-rx", self._rx_thread)
            if inner_fd is not None:
                self.tx.inner = self.inner.twin()
                self.tx.udp = self.udp.twin()
                self._spawn("vpncrypt-tx", self._tx_thread)
        else:
            self.loop.add_reader(self.udp.fd, self._on_udp_readable)
            if inner_fd is not None:
                self.loop.add_reader(inner_fd, self._on_inner_readable)
        self.run_timers()

    def _spawn(self, name, target):
        t = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def stop(self) -> None:
        self._running = False
        if self._threads:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(5)
            self._threads = []
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_r = self._wake_w = None
        else:
            for fd in (self.udp.fd, getattr(self.inner, "fd", None)):
                if fd is not None:
                    try:
                        self.loop.remove_reader(fd)
                    except (ValueError, OSError):
                        pass
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        if self._serving is not None:
            self._serving.cancel()
            self._serving = None
        # slices still computing are dropped when they come back: their
        # initiators retry, as after any loss
        self._slices.clear()
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def replace_udp(self, udp) -> None:
        """Switch to another UdpBatchSocket (same batch size), e.g. after a
        listen-port change; the caller closes the old one."""
        if udp.batch != self.udp.batch:
            raise ValueError("the new socket must have the same batch size")
        running = self._running
        if running:
            self.stop()
        self.udp = udp
        if self.native:
            self.rx.udp = self.tx.udp = udp
        if running:
            self.start()

    def changed(self) -> None:
        """After a configuration change made directly on the Device: its
        timers may have moved."""
        self._arm_timer()

    # ------------------------------------------------------------ output

    def emit(self, out) -> None:
        """Apply what a Device call produced, and re-arm its timer."""
        if out.datagrams:
            datagrams = [(d, a) for d, a in out.datagrams if a is not None]
            sent, err = self.udp.send_datagrams(datagrams)
            if sent < len(datagrams):
                self._counters.tx_dropped += len(datagrams) - sent
                self._counters.tx_send_errors += 1
                self._check_gso(self.udp, err)
        if out.packets:
            self.inner.write_packets(out.packets)
        if out.events and self.on_events is not None:
            self.on_events(out.events)
        self._arm_timer()

    # ------------------------------------------------------------ timers

    def run_timers(self) -> None:
        self._timer = None
        self._timer_at = None
        if not self._running:
            return
        self._flush_held()
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

    # ------------------------------------------------------------ results to the Device

    def _to_device(self, touches, waiting, handshakes) -> None:
        """Batch results, and whether handshake messages wait (on the loop's
        thread): routine results held (see HOLD), the rest at once."""
        urgent = []
        for t in touches:
            if t.flags & ~S.EV_ROUTINE:
                urgent.append(t)
            else:
                self._hold(t)
        self._deliver(urgent, waiting, handshakes)

    def _hold(self, t) -> None:
        self._hold_raw(t.peer, t.flags, t.packets, t.bytes)

    def _hold_raw(self, peer, flags, packets, nbytes) -> None:
        """Merge a routine result into the held ones.  Results of one
        direction merge; a result of the other direction first hands over
        what is held, because the Device's timers depend on the order of
        "sent" and "received" (sending stops the keepalive timer, receiving
        data starts it).  A second merged data reception is handed over as
        such (it asks for another keepalive)."""
        rx = bool(flags & (S.EV_AUTH | S.EV_DATA))
        h = self._held.get(peer)
        if h is not None and h[0] != rx:
            self.emit(self.device.on_transport(self._take_held(), self.loop.time()))
            h = None
        data = 1 if flags & S.EV_DATA else 0
        if h is None:
            self._held[peer] = [rx, flags, packets, nbytes, data]
        else:
            h[1] |= flags
            h[2] += packets
            h[3] += nbytes
            h[4] += data

    def _deliver(self, urgent, waiting, handshakes) -> None:
        now = self.loop.time()
        if urgent or waiting:
            self.emit(self.device.on_transport(self._take_held() + urgent, now, waiting))
        elif self._held and self._held_timer is None:
            self._held_timer = self.loop.call_later(HOLD, self._flush_held)
        if handshakes and self._serving is None and self._running:
            self._serving = self.loop.call_soon(self._serve_handshakes)

    def _serve_handshakes(self) -> None:
        """One slice of the table's handshake queue; the next slice in the
        next turn of the loop, after the sockets."""
        self._serving = None
        if not self._running:
            return
        if self._workers is not None:
            self._send_slices()
            return
        out, left = self.device.serve_handshakes(self.loop.time(), HANDSHAKE_SLICE)
        self.emit(out)
        if left and self._running:
            self._serving = self.loop.call_soon(self._serve_handshakes)

    def _send_slices(self) -> None:
        """Slices of the queue to the worker threads, up to HANDSHAKE_IN_FLIGHT."""
        while len(self._slices) < HANDSHAKE_IN_FLIGHT:
            now = self.loop.time()
            work = self.device.take_handshake_work(now, HANDSHAKE_SLICE)
            if not work:
                return
            entry = [work, now, False]
            self._slices.append(entry)
            self._workers.run(work, lambda e=entry: self._computed(e))

    def _computed(self, entry) -> None:
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

    def _take_held(self) -> list:
        held, self._held = self._held, {}
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        out = []
        for pid, (rx, f, n, b, data) in held.items():
            out.append(Touch(pid, f, n, b))
            if rx and data > 1:
                out.append(Touch(pid, S.EV_AUTH | S.EV_DATA, 0, 0))
        return out

    def _flush_held(self) -> None:
        self._held_timer = None
        if self._held and self._running:
            self.emit(self.device.on_transport(self._take_held(), self.loop.time()))

    def _post(self, touches=(), waiting=(), handshakes=False) -> None:
        """From a data thread: hand results to the loop, one callback at a time."""
        with self._lock:
            if self._pending is None:
                self._pending = [[], [], False]
                schedule = True
            else:
                schedule = False
            p = self._pending
            p[0].extend(touches)
            p[1].extend(waiting)
            p[2] = p[2] or handshakes
        if schedule:
            self._note_kernels()
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:        # the loop is closed: shutting down
                pass

    def _drain(self) -> None:
        with self._lock:
            p, self._pending = self._pending, None
        if p is not None and self._running:
            self._to_device(*p)

    # ------------------------------------------------------------ receive

    def _on_udp_readable(self) -> None:
        try:
            if self.native:
                urgent, handshakes = self._receive_native(self.rx, self._held)
                self._deliver(urgent, (), handshakes)
            else:
                self._receive_python()
        except OSError as e:
            if e.errno not in _IGNORED_RECV_ERRORS:   # (an ICMP error for an earlier datagram)
                self._fatal(e)

    def _receive_python(self) -> None:
        to_addr = self.udp.endpoints.to_addr
        for _ in range(MAX_ROUNDS):
            n, view, off, lens, ep = self.udp.recv()
            if n == 0:
                break
            self._counters.rx_batch(n)
            datagrams = [(bytes(view[off[i]:off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]
            self.emit(self.device.receive_datagrams(datagrams, self.loop.time()))

    def _receive_native(self, d, held=None):
        """Open every datagram of up to MAX_ROUNDS batches in the table,
        deliver the inner packets and send the cookie replies it made;
        returns the batch results for the Device and whether handshake
        messages went into the table's queue (a change of the load state
        alone waits for the next slice or the timers).
        With `held` (the loop's thread), routine results are folded into it
        and only the others returned."""
        tnow = self.table.clock(time.monotonic())
        udp, rx, inner, c = d.udp, d.batch, d.inner, d.counters
        touches, handshakes = [], False
        for _ in range(MAX_ROUNDS):
            n, view, off, lens, ep = udp.recv()
            if n == 0:
                break
            c.rx_batch(n)
            delivered, n_reply = rx.open(udp.slab, off, lens, ep, n, tnow)
            if n_reply:
                sent, err = udp.send(rx.tx_slab, rx.tx_off, rx.tx_len, rx.tx_ep, n_reply)
                if sent < n_reply:
                    c.tx_dropped += n_reply - sent
                    c.tx_send_errors += 1
                    self._check_gso(udp, err)
            if rx.n_queued:
                handshakes = True
            if delivered:
                w, _err = inner.write(udp.slab, rx.deliver_off, rx.deliver_len, delivered)
                if w < delivered:
                    c.inner_dropped += delivered - w
                    c.inner_write_errors += 1
            nt = rx.n_touched
            if nt == 1 and held is not None and not rx.touched[0].flags & ~S.EV_ROUTINE:
                e = rx.touched[0]
                self._hold_raw(e.peer, e.flags, e.packets, e.bytes)
            elif nt:
                if held is None:
                    touches.extend(rx.touches())
                else:
                    for t in rx.touches():
                        if t.flags & ~S.EV_ROUTINE:
                            touches.append(t)
                        else:
                            self._hold(t)
        return touches, handshakes

    # ------------------------------------------------------------ send

    def _on_inner_readable(self) -> None:
        try:
            for _ in range(MAX_ROUNDS):
                n, view, off, lens = self.inner.read()
                if n == 0:
                    break
                self.send_inner(self.inner.slab, view, off, lens, n)
        except OSError as e:
            self._fatal(e)

    def send_inner(self, slab, view, off, lens, n: int) -> None:
        """Route, seal and send a batch of inner IP packets (slab is the cffi
        pointer, view a memoryview of the same memory)."""
        if not self.native:
            self._counters.tx_batch(n)
            pkts = [bytes(view[off[i]:off[i] + lens[i]]) for i in range(n)]
            self.emit(self.device.send_packets(pkts, self.loop.time()))
            return
        urgent, waiting = self._seal(self.tx, slab, view, off, lens, n, self._held)
        self._deliver(urgent, waiting, ())

    def _seal(self, d, slab, view, off, lens, n: int, held=None):
        """Seal and send; returns the batch results (and the packets that
        found no key) for the Device (with `held`: see _receive_native)."""
        cap = d.batch.capacity
        touches, waiting = [], []
        tnow = self.table.clock(time.monotonic())
        if n <= cap:
            self._seal_send(d, slab, view, off, lens, n, tnow, touches, waiting, held)
        else:
            for first in range(0, n, cap):        # in pieces the batch arrays can hold
                self._seal_send(d, slab, view, off + first, lens + first, min(cap, n - first),
                                tnow, touches, waiting, held)
        return touches, waiting

    def _seal_send(self, d, slab, view, off, lens, n, tnow, touches, waiting, held) -> None:
        tx, c = d.batch, d.counters
        c.tx_batch(n)
        k = tx.seal(slab, off, lens, n, tnow)
        if k:
            sent, err = d.udp.send(tx.tx_slab, tx.tx_off, tx.tx_len, tx.tx_ep, k)
            if sent < k:
                c.tx_dropped += k - sent
                c.tx_send_errors += 1
                self._check_gso(d.udp, err)
        nt = tx.n_touched
        if nt == 1 and held is not None:        # the common case, without a Touch
            e = tx.touched[0]
            f = e.flags
            if not f & ~S.EV_ROUTINE:
                self._hold_raw(e.peer, f, e.packets, e.bytes)
                return
        if nt:
            first = len(touches)
            if held is None:
                touches.extend(tx.touches())
            else:
                for t in tx.touches():
                    if t.flags & ~S.EV_ROUTINE:
                        touches.append(t)
                    else:
                        self._hold(t)
            for t in touches[first:]:
                if t.flags & S.EV_NEED_KEY:
                    st, peer_of = tx.status, tx.peer_of
                    waiting.extend((peer_of[i], bytes(view[off[i]:off[i] + lens[i]]))
                                   for i in range(n) if st[i] == S.NO_KEY)
                    break

    # ------------------------------------------------------------ the data threads

    def _wait(self, fd) -> bool:
        """Block (without the GIL) until fd is readable; False: stop."""
        p = select.poll()
        p.register(fd, select.POLLIN)
        p.register(self._wake_r, select.POLLIN)
        while self._running:
            for f, _ev in p.poll(1000):
                if f == self._wake_r:
                    return False
                return True
        return False

    def _note_kernels(self) -> None:
        from vpncrypt.crypto import last_kernels
        k = last_kernels()
        if any(k):
            self.last_kernels = k

    def _rx_thread(self) -> None:
        d = self.rx
        try:
            while self._wait(d.udp.fd):
                while self._running:
                    try:
                        touches, handshakes = self._receive_native(d)
                    except OSError as e:
                        if e.errno not in _IGNORED_RECV_ERRORS:
                            raise
                        continue
                    if touches or handshakes:
                        self._post(touches, (), handshakes)
                    else:
                        break
        except Exception as e:          # noqa: BLE001 - reported on the loop
            self._thread_failed(e)
        finally:
            self._note_kernels()

    def _tx_thread(self) -> None:
        d = self.tx
        try:
            while self._wait(d.inner.fd):
                for _ in range(MAX_ROUNDS):
                    n, view, off, lens = d.inner.read()
                    if n == 0:
                        break
                    touches, waiting = self._seal(d, d.inner.slab, view, off, lens, n)
                    if touches:
                        self._post(touches, waiting)
        except Exception as e:          # noqa: BLE001 - reported on the loop
            self._thread_failed(e)
        finally:
            self._note_kernels()

    def _thread_failed(self, exc) -> None:
        if not self._running:
            return
        try:
            self.loop.call_soon_threadsafe(self._fatal, exc)
        except RuntimeError:
            pass

    def _check_gso(self, udp, err: int) -> None:
        """EMSGSIZE from a UDP_SEGMENT send: the segments are larger than the
        outer path MTU (the kernel fragments single datagrams, but never GSO
        segments).  Send without GSO from now on."""
        if err == errno.EMSGSIZE and udp.gso:
            udp.gso = False
            log.info("UDP GSO disabled: datagrams exceed the path MTU and need fragmentation")

    def _fatal(self, exc) -> None:
        log.error("data plane stopped: %s", exc)
        self.stop()
        if self.on_fatal is not None:
            self.on_fatal(exc)
