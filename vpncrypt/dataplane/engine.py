"""The data plane: moves bytes between the UDP socket, the inner side (a TUN
device, or the in-memory port of the loopback bench) and the sans-I/O
protocol Device, in batches, on an asyncio event loop.

    engine = Engine(device, udp, inner, loop=loop, max_packet=65535, on_events=None)
    engine.start()            # registers the UDP (and TUN) fds with the loop
    engine.send_inner(...)    # the inner side hands over a batch of IP packets
    engine.stop()

On the native backend, transport data never goes through Python one message
at a time: one call into the session table opens or seals a whole batch
(vpncrypt.transport.native.Batch), and the batch results go to the Device in
one call per wakeup (Device.on_transport).  Handshake messages go to the
Device as a list.  On the pynacl backend every packet goes through the
Device's list-form calls: that is what ``--crypto pynacl`` measures.

The engine reads the clock (``loop.time()``), turns it into the device's
clock for the batch calls (``table.clock``), and arms the Device's timer
after every Device call.  It never interprets packets itself.
"""
import errno
import logging

from vpncrypt.transport import status as S

log = logging.getLogger("vpncrypt.dataplane")

# How many batches one readiness callback may take before yielding.
MAX_ROUNDS = 16
_SEAL_ROOM = S.OVERHEAD + 16


class EngineCounters:
    """Drops the engine itself sees (the protocol and the session table count the rest)."""
    __slots__ = ("tx_send_errors", "tx_dropped", "inner_write_errors", "inner_dropped",
                 "rx_batches", "tx_batches")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}


class Engine:
    def __init__(self, device, udp, inner, *, loop, max_packet: int = 65535, on_fatal=None,
                 on_events=None):
        self.device = device
        self.table = device.table
        self.udp = udp
        self.inner = inner
        self.loop = loop
        self.native = device.backend == "native"
        if self.native:
            self.rx = self.table.batch(udp.batch, S.OVERHEAD)
            # inner batches are at most as large as UDP ones; max_packet: the
            # largest inner packet (the TUN's read size, not its current MTU)
            self.tx = self.table.batch(udp.batch, max_packet + _SEAL_ROOM)
        self.counters = EngineCounters()
        self.on_fatal = on_fatal
        self.on_events = on_events
        self._timer = None
        self._timer_at = None
        self._running = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._running = True
        self.loop.add_reader(self.udp.fd, self._on_udp_readable)
        fd = getattr(self.inner, "fd", None)
        if fd is not None:
            self.loop.add_reader(fd, self._on_inner_readable)
        self.run_timers()

    def stop(self) -> None:
        self._running = False
        for fd in (self.udp.fd, getattr(self.inner, "fd", None)):
            if fd is not None:
                try:
                    self.loop.remove_reader(fd)
                except (ValueError, OSError):
                    pass
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def replace_udp(self, udp) -> None:
        """Switch to another UdpBatchSocket (same batch size), e.g. after a
        listen-port change; the caller closes the old one."""
        if udp.batch != self.udp.batch:
            raise ValueError("the new socket must have the same batch size")
        if self._running:
            try:
                self.loop.remove_reader(self.udp.fd)
            except (ValueError, OSError):
                pass
        self.udp = udp
        if self._running:
            self.loop.add_reader(udp.fd, self._on_udp_readable)

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
                self.counters.tx_dropped += len(datagrams) - sent
                self.counters.tx_send_errors += 1
                self._check_gso(err)
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

    # ------------------------------------------------------------ receive

    def _on_udp_readable(self) -> None:
        try:
            if self.native:
                self._receive_native()
            else:
                self._receive_python()
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                return   # an ICMP error for an earlier datagram: not fatal
            self._fatal(e)

    def _receive_python(self) -> None:
        to_addr = self.udp.endpoints.to_addr
        for _ in range(MAX_ROUNDS):
            n, view, off, lens, ep = self.udp.recv()
            if n == 0:
                break
            self.counters.rx_batches += 1
            datagrams = [(bytes(view[off[i]:off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]
            self.emit(self.device.receive_datagrams(datagrams, self.loop.time()))

    def _receive_native(self) -> None:
        """Open every transport datagram of up to MAX_ROUNDS batches in the
        table, deliver them, then give the Device the batch results and the
        handshake messages, each in one call."""
        now = self.loop.time()
        tnow = self.table.clock(now)
        udp, rx, inner, dev = self.udp, self.rx, self.inner, self.device
        to_addr = udp.endpoints.to_addr
        touches, control = [], []
        for _ in range(MAX_ROUNDS):
            n, view, off, lens, ep = udp.recv()
            if n == 0:
                break
            self.counters.rx_batches += 1
            delivered, n_other = rx.open(udp.slab, off, lens, ep, n, tnow)
            if delivered:
                w, _err = inner.write(udp.slab, rx.deliver_off, rx.deliver_len, delivered)
                if w < delivered:
                    self.counters.inner_dropped += delivered - w
                    self.counters.inner_write_errors += 1
            if rx.n_touched:
                touches.extend(rx.touches())
            for k in range(n_other):
                j = rx.other[k]
                control.append((bytes(view[off[j]:off[j] + lens[j]]), to_addr(ep + j)))
        if touches:
            self.emit(dev.on_transport(touches, now))
        if control:
            self.emit(dev.receive_handshakes(control, now))

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
        now = self.loop.time()
        self.counters.tx_batches += 1
        if not self.native:
            pkts = [bytes(view[off[i]:off[i] + lens[i]]) for i in range(n)]
            self.emit(self.device.send_packets(pkts, now))
            return
        cap = self.tx.capacity
        if n > cap:                           # in pieces the batch arrays can hold
            for first in range(0, n, cap):
                m = min(cap, n - first)
                self._seal_send(slab, view, off + first, lens + first, m, now)
            return
        self._seal_send(slab, view, off, lens, n, now)

    def _seal_send(self, slab, view, off, lens, n: int, now: float) -> None:
        tx = self.tx
        k = tx.seal(slab, off, lens, n, self.table.clock(now))
        if k:
            sent, err = self.udp.send(tx.tx_slab, tx.tx_off, tx.tx_len, tx.tx_ep, k)
            if sent < k:
                self.counters.tx_dropped += k - sent
                self.counters.tx_send_errors += 1
                self._check_gso(err)
        if tx.n_touched:
            touches = tx.touches()
            waiting = ()
            if any(t.flags & S.EV_NEED_KEY for t in touches):
                st, peer_of = tx.status, tx.peer_of
                waiting = [(peer_of[i], bytes(view[off[i]:off[i] + lens[i]]))
                           for i in range(n) if st[i] == S.NO_KEY]
            self.emit(self.device.on_transport(touches, now, waiting))

    def _check_gso(self, err: int) -> None:
        """EMSGSIZE from a UDP_SEGMENT send: the segments are larger than the
        outer path MTU (the kernel fragments single datagrams, but never GSO
        segments).  Send without GSO from now on."""
        if err == errno.EMSGSIZE and self.udp.gso:
            self.udp.gso = False
            log.info("UDP GSO disabled: datagrams exceed the path MTU and need fragmentation")

    def _fatal(self, exc) -> None:
        log.error("data plane stopped: %s", exc)
        self.stop()
        if self.on_fatal is not None:
            self.on_fatal(exc)
