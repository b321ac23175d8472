"""The data plane: moves bytes between the UDP socket, the inner side (a TUN
device, or the in-memory port of the loopback bench) and the sans-I/O
protocol Device, in batches, on an asyncio event loop.

    engine = Engine(device, udp, inner, loop=loop, fast=True)
    engine.start()            # registers the UDP (and TUN) fds with the loop
    engine.send_inner(...)    # the inner side hands over a batch of IP packets
    engine.stop()

With ``fast`` (the default), transport data goes through the native fast path
(NativeFastPath): one native call opens or seals a whole batch.  Without it,
every packet goes through the Device's own Python data path with its crypto
backend: that is what ``--crypto pynacl`` measures.

The engine is the only place that reads the clock (``loop.time()``) and arms
the Device's timer.  It never interprets packets itself.
"""
import errno
import logging

from vpncrypt._native import ffi, lib
from vpncrypt.dataplane.fastpath import NativeFastPath

log = logging.getLogger("vpncrypt.dataplane")

# How many receive batches one readiness callback may take before yielding.
MAX_ROUNDS = 16
# While batches flow, the Device's next deadline (a walk over every peer) is
# looked up at most this often; a Device call that handled a protocol event
# forces the next lookup.  A timer can so fire at most this late.
TIMER_RECHECK = 0.01


class EngineCounters:
    """Drops the engine itself sees (the protocol and native table count the rest)."""
    __slots__ = ("tx_send_errors", "tx_dropped", "inner_write_errors", "inner_dropped",
                 "rx_batches", "tx_batches")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}


class Engine:
    def __init__(self, device, udp, inner, *, loop, fast: bool = True, mtu: int = 1420,
                 on_fatal=None):
        self.device = device
        self.udp = udp
        self.inner = inner
        self.loop = loop
        self.fast = NativeFastPath(device, mtu=mtu, batch=udp.batch) if fast else None
        self._retry_arrays = (ffi.new("uint32_t[]", udp.batch), ffi.new("uint32_t[]", udp.batch),
                              ffi.new("vc_endpoint[]", udp.batch))
        self.counters = EngineCounters()
        self.on_fatal = on_fatal
        self._timer = None
        self._timer_at = None
        self._recheck_at = 0.0
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

    def resync(self) -> None:
        """After a configuration change made directly on the Device."""
        if self.fast is not None:
            self.fast.sync()
        self._arm_timer()

    # ------------------------------------------------------------ output

    def emit(self, out) -> None:
        """Send what a Device call produced."""
        if out.datagrams:
            datagrams = [(d, a) for d, a in out.datagrams if a is not None]
            sent, err = self.udp.send_datagrams(datagrams)
            if sent < len(datagrams):
                self.counters.tx_dropped += len(datagrams) - sent
                self.counters.tx_send_errors += 1
                self._check_gso(err)
        if out.packets:
            self.inner.write_packets(out.packets)

    def _device_call(self, out) -> None:
        """Emit a Device call's output and mirror what it changed."""
        self.emit(out)
        if self.fast is not None:
            self.fast.sync()
        self._recheck_at = 0.0

    # ------------------------------------------------------------ timers

    def run_timers(self) -> None:
        self._timer = None
        self._timer_at = None
        if not self._running:
            return
        self._device_call(self.device.handle_timers(self.loop.time()))
        self._arm_timer()

    def _arm_timer_after_batch(self) -> None:
        now = self.loop.time()
        if now >= self._recheck_at:
            self._recheck_at = now + TIMER_RECHECK
            self._arm_timer()

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
            for _ in range(MAX_ROUNDS):
                n, view, off, lens, ep = self.udp.recv()
                if n == 0:
                    break
                self.counters.rx_batches += 1
                self._receive(n, view, off, lens, ep)
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                return   # an ICMP error for an earlier datagram: not fatal
            self._fatal(e)
        self._arm_timer_after_batch()

    def _receive(self, n, view, off, lens, ep) -> None:
        now = self.loop.time()
        to_addr = self.udp.endpoints.to_addr
        fp = self.fast
        if fp is None:
            datagrams = [(bytes(view[off[i]:off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]
            self.emit(self.device.receive_datagrams(datagrams, now))
            return
        delivered, n_other = fp.open(self.udp.slab, off, lens, ep, n, now)
        self._deliver(delivered, now)
        if n_other:
            other = fp.other
            datagrams = [(bytes(view[off[j]:off[j] + lens[j]]), to_addr(ep + j))
                         for j in (other[k] for k in range(n_other))]
            unknown = [i for i in range(n) if fp.rx_status[i] == lib.VC_WG_UNKNOWN_INDEX]
            self._device_call(self.device.receive_datagrams(datagrams, now))
            if unknown:
                self._retry(unknown, off, lens, ep, now)

    def _deliver(self, delivered: int, now: float) -> None:
        fp = self.fast
        if delivered:
            w, err = self.inner.write(self.udp.slab, fp.deliver_off, fp.deliver_len, delivered)
            if w < delivered:
                self.counters.inner_dropped += delivered - w
                self.counters.inner_write_errors += 1
        for out in fp.after_open(now):
            self._device_call(out)

    def _retry(self, unknown, off, lens, ep, now) -> None:
        """Data that came in the same batch as the handshake message that
        created its keypair: open it again now that the keypair is installed."""
        fp = self.fast
        r_off, r_len, r_ep = self._retry_arrays
        for k, i in enumerate(unknown):
            r_off[k], r_len[k], r_ep[k] = off[i], lens[i], ep[i]
        lib.vc_wg_table_undrop(fp.table, lib.VC_WG_UNKNOWN_INDEX, len(unknown))
        delivered, _ = fp.open(self.udp.slab, r_off, r_len, r_ep, len(unknown), now)
        self._deliver(delivered, now)

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
        fp = self.fast
        self.counters.tx_batches += 1
        if fp is None:
            pkts = [bytes(view[off[i]:off[i] + lens[i]]) for i in range(n)]
            self.emit(self.device.send_packets(pkts, now))
            self._arm_timer()
            return
        k = fp.seal(slab, off, lens, n, now)
        if k:
            sent, err = self.udp.send(fp.tx_slab, fp.tx_off, fp.tx_len, fp.tx_ep, k)
            if sent < k:
                self.counters.tx_dropped += k - sent
                self.counters.tx_send_errors += 1
                self._check_gso(err)
        if k < n:
            waiting = fp.unsealed(view, off, lens, n)
            if waiting:
                self._device_call(self.device.send_packets(waiting, now))
        for out in fp.after_seal(now):
            self._device_call(out)
        self._arm_timer_after_batch()

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
