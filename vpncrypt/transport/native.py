"""The session table in native code (native/wg_table.c, wg_routes.c,
wg_data.c) behind the interface of vpncrypt.transport.

Two ways in: the list form (``open``/``seal`` on bytes, as the reference
table) for the protocol core's own traffic and for tests, and ``Batch``, the
zero-copy form the data plane uses on its receive and send slabs.  A Batch's
rounds (``receive``, ``send``, ``seal_send``) do a batch's socket and TUN I/O
and its table work in one call into C (native/wg_rounds.c) for the data
plane's own UdpBatchSocket and TunBatch, and the same steps in Python for
any other object (a tracing socket, the bench's in-memory inner)."""

import dataclasses
import errno
import ipaddress
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, NoReturn, Protocol, TypeVar, overload

from vpncrypt.drop_reasons import DropReason
from vpncrypt.transport.cnative import CData, ffi, lib
from vpncrypt.transport import status as S
from vpncrypt.transport.endpoint_cache import endpoint_from_addr, endpoint_to_addr
from vpncrypt.transport.model import Addr, Datagram, KeypairInfo, OpenResult, PeerStats, SealResult, Session
from vpncrypt.transport.model import TableConfig, Touch
from vpncrypt.transport.routing import Network, route_network

_T = TypeVar("_T")

MAX_BATCH = 1024  # messages per native batch call (WG_MAX_BATCH)
_ROUTE_ENTRY = 18  # vc_wg_route_list: family, cidr, 16 address bytes


def _c_config(config: TableConfig) -> CData:
    """The C struct: every field of TableConfig has one of the same name."""
    c = ffi.new("vc_wg_config *")
    for f in dataclasses.fields(config):
        setattr(c, f.name, getattr(config, f.name))
    return c


def _touches(arr: CData, n: int) -> list[Touch]:
    return [Touch(arr[i].peer, arr[i].flags, arr[i].packets, arr[i].bytes) for i in range(n)]


class Batch:
    """Preallocated arrays for batch calls of up to `capacity` messages.

    open(slab, off, lens, ep, n, now) -> (delivered, n_reply): the inner
    packets are slab[deliver_off[i]:+deliver_len[i]] for i < delivered; the
    cookie replies made under load are sent like sealed messages (tx_slab,
    tx_off, tx_len[j], tx_ep[j] for j < n_reply); n_queued says how many
    handshake messages went into the table's handshake queue, and touches()
    what happened to each peer.
    seal(slab, off, lens, n, now, peer=-1) -> sealed: message j is
    tx_slab[j * stride:+tx_len[j]] for tx_ep[j]; status[i] says what became of
    packet i (NO_KEY: the caller queues it for a handshake).
    fair_queue (opt-in, off by default): the send round drains the TUN into
    a fair queue with CoDel (native/fq_codel.c) and seals in its order, and a
    socket the receive round meets gets CoDel on its sojourn time
    (SO_TIMESTAMPNS); fair_queue_stats() counts what they dropped."""

    def __init__(self, table: "NativeTable", capacity: int, stride: int, fair_queue: bool = False) -> None:
        if not 1 <= capacity <= MAX_BATCH:
            raise ValueError(f"batch capacity must be in 1..{MAX_BATCH}")
        if stride < S.OVERHEAD:
            raise ValueError("stride too small")
        self.table = table
        self.capacity = capacity
        self.stride = (max(stride, S.COOKIE_REPLY_LEN) + 63) & ~63
        self.status = ffi.new("int32_t[]", capacity)
        self.peer_of = ffi.new("int32_t[]", capacity)
        self.deliver_off = ffi.new("uint32_t[]", capacity)
        self.deliver_len = ffi.new("uint32_t[]", capacity)
        self.touched = ffi.new("vc_wg_touch[]", capacity)
        # the same memory as 32-bit words: touch i's peer at [_TOUCH_WORDS * i], its flags after it
        # (a word read makes no object, a struct field read does)
        self.touch_words = memoryview(ffi.buffer(self.touched)).cast("I")
        self.tx_slab = ffi.new("uint8_t[]", capacity * self.stride)
        self.tx_off = ffi.new("uint32_t[]", [i * self.stride for i in range(capacity)])
        self.tx_len = ffi.new("uint32_t[]", capacity)
        self.tx_ep = ffi.new("vc_endpoint[]", capacity)
        self.n_touched = 0
        self.n_queued = 0
        self._src: tuple[Any, CData, CData, int] = (None, None, None, 0)
        # the round (vc_wg_round): the batch's arrays now, a socket's and a
        # TUN's when a round first meets them; its fair queue (made by the
        # first send round with fq_on) is freed with it
        r = self._round = ffi.gc(ffi.new("vc_wg_round *"), lib.vc_wg_round_release)
        self.fair_queue = fair_queue
        r.fq_on = int(fair_queue)
        self._fq_stats = ffi.new("vc_fq_stats *")
        r.cap, r.stride, r.status, r.peer_of = capacity, self.stride, self.status, self.peer_of
        r.deliver_off, r.deliver_len, r.touched = self.deliver_off, self.deliver_len, self.touched
        r.tx_slab, r.tx_off, r.tx_len, r.tx_ep = self.tx_slab, self.tx_off, self.tx_len, self.tx_ep
        r.tun_fd = -1
        self.io: RoundIO = r.io
        self._tptr = table.ptr
        self._rx_udp: Any = None
        self._rx_inner: Any = None
        self._tx_udp: Any = None
        self._tx_inner: Any = None
        self._rx_native = self._tx_native = self._udp_native = False
        self._nbufs_of_udp: CData = None
        # the looped rounds (receive_rounds, send_rounds): what the rounds before the last did
        self.loop = ffi.new("vc_wg_loop *")
        self.loop_sizes = memoryview(ffi.buffer(self.loop.sizes)).cast("q")
        self.loop_words = memoryview(ffi.buffer(self.loop)).cast("I")  # [0]: rounds (a read makes no object)
        # a looped round's failure after routine rounds, per direction: raised by
        # the next call of that direction (one round or looped)
        self._deferred_rx = self._deferred_tx = 0
        self._make_calls()

    def _make_calls(self) -> None:
        """open() and seal() as closures over the round's arrays: the data
        plane calls them once per batch, so their Python cost is kept to a
        call."""
        ptr, cap, r, refused = self.table.ptr, self.capacity, self._round, _REFUSED
        open_batch, seal_batch = lib.vc_wg_round_open, lib.vc_wg_round_seal
        batch = self

        def open_(slab: CData, off: CData, lens: CData, ep: CData, n: int, now: float) -> tuple[int, int]:
            got: int = open_batch(ptr, r, slab, off, lens, ep, n, now)
            if got == refused:
                _refused(n, cap)
            batch.n_touched = r.n_touched
            batch.n_queued = r.n_queued
            return got, int(r.n_reply)

        def seal(slab: CData, off: CData, lens: CData, n: int, now: float, peer: int = -1) -> int:
            got: int = seal_batch(ptr, r, slab, off, lens, n, peer, now)
            if got == refused:
                _refused(n, cap)
            batch.n_touched = r.n_touched
            return got

        self.open: Callable[[CData, CData, CData, CData, int, float], tuple[int, int]] = open_
        self.seal: Callable[..., int] = seal

    def touches(self) -> list[Touch]:
        return _touches(self.touched, self.n_touched)

    # ------------------------------------------------------------ rounds: I/O and the table
    # One call into C each (native/wg_rounds.c) for the data plane's own
    # socket and TUN objects; the same steps composed in Python for anything
    # else (the bench's in-memory inner, a tracing socket).

    def receive(self, udp: Any, inner: Any, now: float) -> int:
        """One receive round: a batch of datagrams from `udp` (a
        dataplane.io.UdpBatchSocket), opened; the cookie replies made under
        load sent back on `udp`; the inner packets written to `inner` (a
        TunBatch, or anything with its write()).  Returns how many datagrams
        were received (0: none waiting).  Afterwards: touches()/n_touched,
        n_queued, and `io` (RoundIO) for what the sockets did.  OSError for a
        receive error."""
        if self._deferred_rx:
            code, self._deferred_rx = self._deferred_rx, 0
            _round_failed(code)
        if udp is not self._rx_udp or inner is not self._rx_inner:
            self._bind_receive(udp, inner)
        if not self._rx_native:
            return self._receive_composed(udp, inner, now)
        return self._received_round(udp, _receive_round(self._tptr, self._round, now, udp.gro, udp.gso))

    def _received_round(self, udp: Any, n: int) -> int:
        """receive()'s (and receive_rounds()') part after the call into C."""
        r = self._round
        if n <= 0:
            if n == 0:
                udp.nbufs = 0
                self.n_touched = self.n_queued = 0
                return 0
            if n == _REFUSED:  # received, then refused: as the composition
                udp.nbufs = self._nbufs_of_udp[0]
            _round_failed(n)
        udp.nbufs = self._nbufs_of_udp[0]
        self.n_touched = r.n_touched
        self.n_queued = r.n_queued
        if self.io.gso_off:
            udp.gso = False
        return n

    def send(self, inner: Any, udp: Any, now: float) -> int:
        """One send round: a batch of packets read from `inner` (a TunBatch,
        or anything with its read()), sealed, and sent on `udp`.  Returns how
        many packets were read (0: none waiting).  Afterwards: touches(),
        waiting() for the packets that found no key, and `io`."""
        if self._deferred_tx:
            code, self._deferred_tx = self._deferred_tx, 0
            _round_failed(code)
        if udp is not self._tx_udp or inner is not self._tx_inner:
            self._bind_send(inner, udp)
        if not self._tx_native:
            return self._send_composed(inner, udp, now)
        return self._sent_round(inner, udp, _send_round(self._tptr, self._round, now, udp.gso))

    def _sent_round(self, inner: Any, udp: Any, n: int) -> int:
        """send()'s (and send_rounds()') part after the call into C."""
        r = self._round
        if n <= 0:
            if n == 0:
                self.n_touched = 0
                self._src = (None, None, None, 0)  # waiting(): nothing from an empty round
                return 0
            if n == _REFUSED:
                self._src = (inner.view, inner.off, inner.len, r.io.received)
            _round_failed(n)
        self._src = (inner.view, inner.off, inner.len, n)
        self.n_touched = r.n_touched
        if self.io.gso_off:
            udp.gso = False
        return n

    # ------------------------------------------------------------ rounds looped in C
    # Up to k rounds in one call while each is routine (native/vc_wg.h,
    # vc_wg_receive_rounds): the last round is in the arrays and io as after
    # receive()/send(); `loop` sums the routine rounds before it
    # (loop.rounds - 1 of them: prefix_peer, prefix_flags, prefix_data) and
    # loop_sizes[i] is what round i took.  full: what a full round takes
    # (the object's batch; a round under half of it that leaves nothing held
    # back is the last).  Objects that are not bound natively get one round.
    # A failure after routine rounds is raised by the next call, so the
    # rounds before it are counted first.

    def receive_rounds(self, udp: Any, inner: Any, now: float, k: int, full: int) -> int:
        if self._deferred_rx:
            code, self._deferred_rx = self._deferred_rx, 0
            _round_failed(code)
        if udp is not self._rx_udp or inner is not self._rx_inner:
            self._bind_receive(udp, inner)
        loop = self.loop
        if not self._rx_native:
            loop.rounds, loop.prefix_flags = 1, 0
            one = self.loop_sizes[0] = self.receive(udp, inner, now)
            return one
        n: int = _receive_rounds(self._tptr, self._round, now, udp.gro, udp.gso, k, full, loop)
        if n < 0 and self.loop_words[0] > 1:
            self._deferred_rx = n
            udp.nbufs = self._nbufs_of_udp[0]
            self.n_touched = self.n_queued = 0
            return 0
        return self._received_round(udp, n)

    def send_rounds(self, inner: Any, udp: Any, now: float, k: int, full: int) -> int:
        if self._deferred_tx:
            code, self._deferred_tx = self._deferred_tx, 0
            _round_failed(code)
        if udp is not self._tx_udp or inner is not self._tx_inner:
            self._bind_send(inner, udp)
        loop = self.loop
        if not self._tx_native:
            loop.rounds, loop.prefix_flags = 1, 0
            one = self.loop_sizes[0] = self.send(inner, udp, now)
            return one
        n: int = _send_rounds(self._tptr, self._round, now, udp.gso, k, full, loop)
        if n < 0 and self.loop_words[0] > 1:
            self._deferred_tx = n
            self.n_touched = 0
            self._src = (None, None, None, 0)
            return 0
        return self._sent_round(inner, udp, n)

    def seal_send(
        self, slab: CData, view: Any, off: CData, lens: CData, n: int, udp: Any, now: float, peer: int = -1
    ) -> int:
        """Seal n packets (slab: a cffi pointer, view: a memoryview of the
        same memory, for waiting()) and send them on `udp`; returns how many
        were sealed.  n may not exceed the capacity."""
        if udp is not self._tx_udp:
            self._bind_send(self._tx_inner, udp)
        if not self._udp_native:
            return self._seal_send_composed(slab, view, off, lens, n, udp, now, peer)
        self._src = (view, off, lens, n)
        r = self._round
        k: int = _seal_send(self._tptr, r, slab, off, lens, n, peer, now, udp.gso)
        if k < 0:
            _round_failed(k)
        self.n_touched = r.n_touched
        if self.io.gso_off:
            udp.gso = False
        return k

    def seal_send_packets(self, packets: list[bytes], udp: Any, now: float, peer: int = -1) -> int:
        """seal_send for packets given as bytes (at most the capacity: a
        peer's staged packets, a keepalive), copied into a slab of their own."""
        slab, off, lens = _slab_of(packets)
        return self.seal_send(slab, memoryview(ffi.buffer(slab)), off, lens, len(packets), udp, now, peer)

    def fair_queue_stats(self) -> dict[str, int]:
        """The send round's fair queue's counters (vc_fq_stats: codel_drops,
        overlimit_drops, ...), all 0 before it is made or without it."""
        st = self._fq_stats
        if lib.vc_wg_round_fq_stats(self._round, st) != 0:
            return dict.fromkeys(_FQ_STATS, 0)
        return {name: int(getattr(st, name)) for name in _FQ_STATS}

    def waiting(self) -> list[tuple[int, bytes]]:
        """After a send round: [(peer id, packet bytes)] for the packets that
        found no usable key (status NO_KEY), for the handshake queue."""
        view, off, lens, n = self._src
        st, peer_of = self.status, self.peer_of
        return [(peer_of[i], bytes(view[off[i] : off[i] + lens[i]])) for i in range(n) if st[i] == S.NO_KEY]

    def unroutable(self) -> list[memoryview]:
        """After a send round: the packets dropped for no route or no
        endpoint (status NO_ROUTE, NO_ENDPOINT: the ones the Linux module
        answers with an ICMP error), as views of the slab they were read
        into (valid until the next round)."""
        view, off, lens, n = self._src
        st = self.status
        return [view[off[i] : off[i] + lens[i]] for i in range(n) if st[i] in _UNROUTABLE]

    def too_big(self) -> list[tuple[memoryview, int]]:
        """After a send round: (packet, peer id) for the packets dropped for
        their peer's path MTU (status PATH_MTU, io.too_big of them), as views
        of the slab they were read into (valid until the next round)."""
        view, off, lens, n = self._src
        st, peer_of = self.status, self.peer_of
        return [(view[off[i] : off[i] + lens[i]], peer_of[i]) for i in range(n) if st[i] == S.PATH_MTU]

    # the binding of a round to its socket and TUN

    def _bind_receive(self, udp: Any, inner: Any) -> None:
        self._rx_udp, self._rx_inner = udp, inner
        self._rx_native = _bind_udp(self._round, udp) and _bind_tun(self._round, inner, "write")
        self._tx_udp = self._tx_inner = None  # the round's fields now point elsewhere
        self._tx_native = self._udp_native = False
        if self._rx_native:
            self._nbufs_of_udp = udp._nbufs
            if self.fair_queue and udp.state.aqm == 0:
                udp.state.aqm = 2  # wanted: the next receive round sets CoDel up

    def _bind_send(self, inner: Any, udp: Any) -> None:
        self._tx_udp, self._tx_inner = udp, inner
        self._udp_native = _bind_udp(self._round, udp)
        self._tx_native = self._udp_native and _bind_tun(self._round, inner, "read")
        self._rx_udp = self._rx_inner = None
        self._rx_native = False

    # the same rounds composed in Python

    def _receive_composed(self, udp: Any, inner: Any, now: float) -> int:
        io = self.io
        n: int
        n, _view, off, lens, ep = udp.recv()
        io.pmtu_learned = io.pmtu_refused = 0
        if getattr(udp, "errors_read", 0):  # (a UdpBatchSocket read its error queue)
            self._learn_errors(udp, now, read=False)
        io.received = n
        io.replies = io.replies_sent = io.delivered = io.written = 0
        io.send_errno = io.write_errno = io.gso_off = 0
        if n == 0:
            self.n_touched = self.n_queued = 0
            return 0
        delivered, n_reply = self.open(udp.slab, off, lens, ep, n, now)
        if n_reply:
            io.replies = n_reply
            gso = udp.gso
            io.replies_sent, io.send_errno = udp.send(
                self.tx_slab, self.tx_off, self.tx_len, self.tx_ep, n_reply
            )
            io.gso_off = int(gso and not udp.gso)
            self.forget_sources(n_reply)
        if delivered:
            io.delivered = delivered
            io.written, io.write_errno = inner.write(udp.slab, self.deliver_off, self.deliver_len, delivered)
        return n

    def _send_composed(self, inner: Any, udp: Any, now: float) -> int:
        n: int
        n, view, off, lens = inner.read()
        if n == 0:
            self.io.received = 0
            self.n_touched = 0
            self._src = (None, None, None, 0)
            return 0
        self._seal_send_composed(inner.slab, view, off, lens, n, udp, now)
        return n

    def _seal_send_composed(
        self, slab: CData, view: Any, off: CData, lens: CData, n: int, udp: Any, now: float, peer: int = -1
    ) -> int:
        io = self.io
        io.received = n
        io.replies = io.replies_sent = io.delivered = io.written = io.write_errno = io.gso_off = 0
        self._src = (view, off, lens, n)
        k = self.seal(slab, off, lens, n, now, peer)
        io.sealed = k
        gso = udp.gso
        io.sent, io.send_errno = (
            udp.send(self.tx_slab, self.tx_off, self.tx_len, self.tx_ep, k) if k else (0, 0)
        )
        io.gso_off = int(gso and not udp.gso)
        io.pmtu_learned = io.pmtu_refused = 0
        if io.send_errno == errno.EMSGSIZE and hasattr(udp, "read_errors"):
            self._learn_errors(udp, now)  # (as the C round: the datagram's local error is queued)
        self.forget_sources(k)
        return k

    def _learn_errors(self, udp: Any, now: float, read: bool = True) -> None:
        """What the socket's error queue holds (read: read it now, else what
        its last receive read) given to the table, counted in io."""
        if read:
            udp.read_errors()
        taken, refused = self.table.learn_errors(udp.errors, udp.errors_read, now)
        self.io.pmtu_learned += taken
        self.io.pmtu_refused += refused
        udp.errors_read = 0

    def forget_sources(self, n: int) -> int:
        """After a send of the first n tx messages (the C rounds do it
        themselves): the peers whose source address the kernel refused give
        it up (vc_wg_forget_sources).  Returns how many did."""
        got: int = lib.vc_wg_forget_sources(self._tptr, self.touched, self.n_touched, self.tx_ep, n)
        return got


_REFUSED = lib.VC_WG_ROUND_REFUSED
_UNROUTABLE = (S.NO_ROUTE, S.NO_ENDPOINT)
# vc_wg_touch as words: peer, flags, packets, a pad, the 64-bit byte count
_TOUCH_WORDS = 6
if ffi.sizeof("vc_wg_touch") != 4 * _TOUCH_WORDS or ffi.offsetof("vc_wg_touch", "flags") != 4:
    raise ImportError("vc_wg_touch is not the layout Batch.touch_words reads")
if ffi.offsetof("vc_wg_loop", "rounds") != 0:
    raise ImportError("vc_wg_loop is not the layout Batch.loop_words reads")
_receive_round, _send_round, _seal_send = lib.vc_wg_receive_round, lib.vc_wg_send_round, lib.vc_wg_seal_send
_receive_rounds, _send_rounds = lib.vc_wg_receive_rounds, lib.vc_wg_send_rounds
_FQ_STATS = tuple(name for name, _ in ffi.typeof("vc_fq_stats").fields)


def _refused(n: int, cap: int) -> NoReturn:
    raise ValueError(f"the table refused a batch of {n} messages (capacity {cap})")


def _round_failed(code: int) -> NoReturn:
    if code == _REFUSED:
        raise ValueError("the table refused the batch (more messages than its capacity)")
    raise OSError(-code, os.strerror(-code))


def _native_io(obj: object, class_name: str, methods: tuple[str, ...]) -> bool:
    """Whether obj is vpncrypt.dataplane.io's `class_name` (or a subclass that
    keeps its `methods`): its arrays and descriptor can then be handed to C.
    A subclass that overrides one of them (a tracing socket) keeps the Python
    composition, so what it adds still happens."""
    for base in type(obj).__mro__:
        if base.__name__ == class_name and base.__module__ == "vpncrypt.dataplane.io":
            return all(getattr(type(obj), m) is base.__dict__[m] for m in methods)
    return False


def _bind_udp(r: CData, udp: Any) -> bool:
    if not _native_io(udp, "UdpBatchSocket", ("recv", "send")):
        return False
    r.udp_fd, r.udp_max, r.udp_rx = udp.fd, udp.batch, udp.state
    r.udp_slab, r.udp_slab_size, r.udp_mtu = udp.slab, udp.slab_size, udp.mtu
    r.udp_off, r.udp_len, r.udp_ep, r.udp_segs, r.udp_nbufs = udp.off, udp.len, udp.ep, udp.segs, udp._nbufs
    return True


def _bind_tun(r: CData, tun: Any, method: str) -> bool:
    if tun is None or not _native_io(tun, "TunBatch", (method,)):
        r.tun_fd = -1
        return False
    r.tun_fd, r.tun_max = tun.fd, tun.batch
    r.tun_slab, r.tun_slab_size, r.tun_mtu = tun.slab, tun.slab_size, tun.mtu
    r.tun_off, r.tun_len = tun.off, tun.len
    if tun.vnet_hdr:
        r.tun_rx, r.gro_out, r.gro_size = tun._rx, tun.gro_out, tun.gro_size
        r.gro_flags, r.gro_stats = tun.gro_flags, tun.tx_stats
    else:
        r.tun_rx = r.gro_out = r.gro_stats = ffi.NULL
        r.gro_size = r.gro_flags = 0
    return True


class RoundIO(Protocol):
    """What the sockets did in the last round of a Batch (Batch.io, a
    vc_wg_round_io): datagrams (or packets) received, inner packets
    delivered by the table and written, messages sealed and sent, cookie
    replies made and sent, the first errno of a short send or write (0:
    none), gso_off: the send asked to turn the socket's GSO off, and
    unroutable: the packets of the last seal dropped for no route or no
    endpoint (Batch.unroutable() gives them)."""

    received: int
    delivered: int
    written: int
    sealed: int
    sent: int
    replies: int
    replies_sent: int
    send_errno: int
    write_errno: int
    gso_off: int
    unroutable: int
    too_big: int
    pmtu_learned: int
    pmtu_refused: int


class NativeTable:
    """See vpncrypt.transport for the interface."""

    backend = "native"

    def __init__(self, config: TableConfig | None = None) -> None:
        self.config = config or TableConfig()
        ptr = lib.vc_wg_table_new(_c_config(self.config))
        if ptr == ffi.NULL:
            raise MemoryError("vc_wg_table_new failed")
        self.ptr = ffi.gc(ptr, lib.vc_wg_table_free)
        self._stats = ffi.new("vc_wg_peer_stats *")
        self._ep = ffi.new("vc_endpoint *")
        self._list_batch: Batch | None = None
        self._route_buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * 64)
        self._hs_cap = 0
        self._hs_buf: CData = None
        self._hs_len: CData = None
        self._hs_ep: CData = None
        self._under_load = ffi.new("int32_t *")

    def batch(self, capacity: int, stride: int, fair_queue: bool = False) -> Batch:
        return Batch(self, capacity, stride, fair_queue)

    @property
    def sources_forgotten(self) -> int:
        """Peers' source addresses given up because the kernel refused them
        on a send (the address was removed): replies then left from the one
        routing picks."""
        return int(lib.vc_wg_sources_forgotten(self.ptr))

    def set_listen_port(self, port: int) -> None:
        """The device's UDP port: a packet from it to the endpoint of the
        peer it is routed to is the device's own datagram come back (a
        routing loop), refused (vc_wg_set_listen_port; 0: no check)."""
        lib.vc_wg_set_listen_port(self.ptr, port)

    @property
    def routing_loops(self) -> tuple[int, int]:
        """(packets refused as routing loops, every peer's; the last peer
        one was refused for, or -1)."""
        last = ffi.new("int64_t *")
        n = int(lib.vc_wg_routing_loops(self.ptr, last))
        return n, int(last[0]) if n else -1

    # ------------------------------------------------------------ config, clock

    @property
    def pmtu_counts(self) -> tuple[int, int]:
        """(taken, refused): the errors of the sockets' error queues the
        table took as a peer's path MTU, and refused (vc_wg_pmtu_learn)."""
        learned, refused = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        lib.vc_wg_pmtu_counts(self.ptr, learned, refused)
        return int(learned[0]), int(refused[0])

    def learn_errors(self, errors: CData, n: int, now: float) -> tuple[int, int]:
        """Give n errors of a socket's error queue (vc_udp_error) to the
        table (vc_wg_pmtu_learn); returns (taken, refused)."""
        taken = sum(lib.vc_wg_pmtu_learn(self.ptr, errors + i, now) >= 0 for i in range(n))
        return taken, n - taken

    def inner_mtu(self, pid: int, now: float) -> int:
        """The largest inner packet the peer's path takes now (0: no limit known)."""
        st = self._stats
        if lib.vc_wg_peer_get(self.ptr, pid, st, now):
            return 0
        return int(st.inner_mtu)

    def configure(self, config: TableConfig) -> None:
        if lib.vc_wg_table_configure(self.ptr, _c_config(config)):
            raise ValueError(f"bad table configuration: {config}")
        self.config = config

    def clock(self, now: float) -> float:
        return float(lib.vc_wg_clock(self.ptr, now))

    def clock_offset(self) -> float:
        return float(lib.vc_wg_clock_offset(self.ptr))

    # ------------------------------------------------------------ handshake messages

    def set_public_key(self, public_key: bytes | None) -> None:
        if public_key is not None and len(public_key) != 32:
            raise ValueError("a public key is 32 bytes")
        lib.vc_wg_set_public_key(self.ptr, ffi.NULL if public_key is None else bytes(public_key))

    def seed(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("the seed is 32 bytes")
        lib.vc_wg_seed(self.ptr, bytes(seed))

    def take_handshakes(self, limit: int) -> list[Datagram]:
        """Up to `limit` queued handshake messages, newest first: [(bytes, addr)]."""
        if limit <= 0:
            return []
        if limit > self._hs_cap:
            self._hs_cap = limit
            self._hs_buf = ffi.new("uint8_t[]", limit * S.HANDSHAKE_MAX)
            self._hs_len = ffi.new("uint32_t[]", limit)
            self._hs_ep = ffi.new("vc_endpoint[]", limit)
        buf, lens, eps = self._hs_buf, self._hs_len, self._hs_ep
        n = lib.vc_wg_handshakes_take(self.ptr, buf, lens, eps, limit)
        return [
            (ffi.buffer(buf + i * S.HANDSHAKE_MAX, lens[i])[:], endpoint_to_addr(eps + i)) for i in range(n)
        ]

    def handshakes_waiting(self, now: float) -> tuple[int, bool]:
        """(messages in the handshake queue, under load at now)."""
        n = int(lib.vc_wg_handshakes_waiting(self.ptr, now, self._under_load))
        return n, bool(self._under_load[0])

    # ------------------------------------------------------------ peers

    def add_peer(self) -> int:
        pid = int(lib.vc_wg_peer_add(self.ptr))
        if pid < 0:
            raise MemoryError("vc_wg_peer_add failed")
        return pid

    def remove_peer(self, pid: int) -> None:
        if lib.vc_wg_peer_remove(self.ptr, pid):
            raise KeyError(f"no peer {pid}")

    def peer_count(self) -> int:
        return int(lib.vc_wg_peer_count(self.ptr))

    def set_endpoint(self, pid: int, addr: Addr | None) -> None:
        ep = ffi.NULL if addr is None else endpoint_from_addr(addr, self._ep)
        if lib.vc_wg_peer_set_endpoint(self.ptr, pid, ep):
            raise KeyError(f"no peer {pid}")

    def endpoint(self, pid: int) -> Addr | None:
        return self.stats(pid, 0.0, _keypairs=False).endpoint  # ages unused: any now

    # ------------------------------------------------------------ indices

    def reserve_index(self, index: int, pid: int) -> bool:
        return bool(lib.vc_wg_index_reserve(self.ptr, index, pid) == 0)

    def release_index(self, index: int) -> bool:
        return bool(lib.vc_wg_index_release(self.ptr, index) == 0)

    def index_peer(self, index: int) -> int | None:
        pid = int(lib.vc_wg_index_peer(self.ptr, index))
        return None if pid < 0 else pid

    def index_count(self) -> int:
        return int(lib.vc_wg_index_count(self.ptr))

    # ------------------------------------------------------------ sessions

    def install(self, pid: int, session: Session, now: float) -> None:
        local_index, remote_index, send_key, recv_key, initiator = session
        if len(send_key) != 32 or len(recv_key) != 32:
            raise ValueError("session keys are 32 bytes")
        if lib.vc_wg_install(
            self.ptr,
            pid,
            local_index,
            remote_index,
            ffi.from_buffer(send_key),
            ffi.from_buffer(recv_key),
            bool(initiator),
            now,
        ):
            raise ValueError(f"index {local_index:#010x} is not reserved for peer {pid}")

    def zero(self, pid: int) -> None:
        if lib.vc_wg_peer_zero(self.ptr, pid):
            raise KeyError(f"no peer {pid}")

    def maintain(self) -> None:
        lib.vc_wg_maintain(self.ptr)

    # ------------------------------------------------------------ routes

    @staticmethod
    def _route_args(cidr: Any) -> tuple[int, bytes, int]:
        net = route_network(cidr)
        return (4 if net.version == 4 else 6), net.network_address.packed, net.prefixlen

    def route_add(self, pid: int, cidr: Any) -> None:
        fam, addr, plen = self._route_args(cidr)
        if lib.vc_wg_route_add(self.ptr, fam, addr, plen, pid):
            raise ValueError(f"cannot add route {cidr} for peer {pid}")

    def route_remove(self, pid: int, cidr: Any) -> bool:
        fam, addr, plen = self._route_args(cidr)
        return bool(lib.vc_wg_route_remove(self.ptr, fam, addr, plen, pid) == 0)

    def routes_clear(self, pid: int) -> None:
        lib.vc_wg_route_clear_peer(self.ptr, pid)

    @overload
    def routes(self, pid: int, *, text: Literal[False] = False) -> list[Network]: ...

    @overload
    def routes(self, pid: int, *, text: Literal[True]) -> list[str]: ...

    def routes(self, pid: int, *, text: bool = False) -> list[Network] | list[str]:
        cap = len(self._route_buf) // _ROUTE_ENTRY
        n = lib.vc_wg_route_list(self.ptr, pid, self._route_buf, cap)
        if n > cap:
            self._route_buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * 2 * n)
            n = lib.vc_wg_route_list(self.ptr, pid, self._route_buf, 2 * n)
        raw: bytes = ffi.buffer(self._route_buf, _ROUTE_ENTRY * n)[:]
        out: list[Any] = []
        for i in range(n):
            e = raw[_ROUTE_ENTRY * i : _ROUTE_ENTRY * (i + 1)]
            if e[0] == 4:
                # as text straight from the bytes: a UAPI get of many routes
                # would spend most of its time making objects to print them
                out.append(
                    f"{socket.inet_ntop(socket.AF_INET, e[2:6])}/{e[1]}"
                    if text
                    else ipaddress.IPv4Network((e[2:6], e[1]))
                )
            else:
                net = ipaddress.IPv6Network((e[2:18], e[1]))
                out.append(str(net) if text else net)
        return out

    def lookup(self, addr: str | bytes) -> int | None:
        if isinstance(addr, str):
            addr = ipaddress.ip_address(addr).packed
        addr = bytes(addr)
        fam = 4 if len(addr) == 4 else 6 if len(addr) == 16 else 0
        if not fam:
            return None
        pid = int(lib.vc_wg_route_lookup(self.ptr, fam, addr))
        return None if pid < 0 else pid

    # ------------------------------------------------------------ stats

    @staticmethod
    def _info(k: CData) -> KeypairInfo | None:
        if not k.valid:
            return None
        return KeypairInfo(
            k.local_index,
            k.remote_index,
            bool(k.initiator),
            k.age,
            k.send_counter,
            k.greatest_received,
            bool(k.usable),
        )

    def stats(self, pid: int, now: float, _keypairs: bool = True) -> PeerStats:
        st = self._stats
        if lib.vc_wg_peer_get(self.ptr, pid, st, now):
            raise KeyError(f"no peer {pid}")
        drops = {name: st.drops[code] for code, name in S.DROP_NAMES.items() if st.drops[code]}
        ep = endpoint_to_addr(ffi.addressof(st, "endpoint")) if st.endpoint_set else None
        return PeerStats(
            st.rx_bytes,
            st.rx_packets,
            st.tx_bytes,
            st.tx_packets,
            st.rx_wire_bytes,
            st.tx_wire_bytes,
            drops,
            st.last_rx,
            st.last_tx,
            ep,
            self._info(st.current) if _keypairs else None,
            self._info(st.previous) if _keypairs else None,
            self._info(st.next) if _keypairs else None,
            st.path_mtu,
            st.inner_mtu,
        )

    def drops(self) -> dict[DropReason, int]:
        arr = ffi.new("uint64_t[]", S.STATUS_COUNT)
        lib.vc_wg_table_drops(self.ptr, arr)
        return {name: arr[code] for code, name in S.DROP_NAMES.items() if arr[code]}

    # ------------------------------------------------------------ list-form batches

    def _batch_for(self, n: int, stride: int = S.OVERHEAD) -> Batch:
        """A batch for list-form calls (the protocol core's own traffic: small
        and rare), reused while it is large enough."""
        b = self._list_batch
        if b is None or b.capacity < n or b.stride < stride:
            b = self._list_batch = Batch(self, max(n, 16), max(stride, 2048))
        return b

    def open(self, datagrams: Iterable[tuple[bytes, Addr]], now: float) -> OpenResult:
        res = OpenResult([], [], [], 0, [])
        for chunk in _chunks(list(datagrams)):
            n = len(chunk)
            b = self._batch_for(n)
            slab, off, lens = _slab_of([bytes(d) for d, _ in chunk])
            eps = ffi.new("vc_endpoint[]", n)
            for i, (_, addr) in enumerate(chunk):
                endpoint_from_addr(addr, eps + i)
            delivered, n_reply = b.open(slab, off, lens, eps, n, now)
            res.status.extend(b.status[i] for i in range(n))
            res.packets.extend(
                ffi.buffer(slab + b.deliver_off[i], b.deliver_len[i])[:] for i in range(delivered)
            )
            res.replies.extend(_messages(b, n_reply))
            res.queued += b.n_queued
            res.touched.extend(b.touches())
        return res

    def seal(self, packets: Iterable[bytes], now: float, peer: int | None = None) -> SealResult:
        res = SealResult([], [], [], [])
        for chunk in _chunks(list(packets)):
            n = len(chunk)
            blobs = [bytes(p) for p in chunk]
            b = self._batch_for(n, S.OVERHEAD + 16 + max(len(p) for p in blobs))
            slab, off, lens = _slab_of(blobs)
            sealed = b.seal(slab, off, lens, n, now, -1 if peer is None else peer)
            res.status.extend(b.status[i] for i in range(n))
            res.peers.extend(b.peer_of[i] for i in range(n))
            res.datagrams.extend(_messages(b, sealed))
            res.touched.extend(b.touches())
        return res


def _chunks(items: Sequence[_T]) -> Iterator[Sequence[_T]]:
    for i in range(0, len(items), MAX_BATCH):
        yield items[i : i + MAX_BATCH]


def _slab_of(blobs: list[bytes]) -> tuple[CData, CData, CData]:
    """(slab, off, lens): the blobs one after the other in a new cffi slab."""
    n = len(blobs)
    slab = ffi.new("uint8_t[]", max(1, sum(len(d) for d in blobs)))
    off = ffi.new("uint32_t[]", n)
    lens = ffi.new("uint32_t[]", n)
    pos = 0
    for i, d in enumerate(blobs):
        ffi.memmove(slab + pos, d, len(d))
        off[i], lens[i] = pos, len(d)
        pos += len(d)
    return slab, off, lens


def _messages(b: Batch, k: int) -> Iterator[Datagram]:
    """The first k messages a batch made (sealed, or cookie replies) as bytes."""
    for j in range(k):
        yield ffi.buffer(b.tx_slab + j * b.stride, b.tx_len[j])[:], endpoint_to_addr(b.tx_ep + j)
