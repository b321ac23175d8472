"""The session table in native code (native/wg_table.c, wg_routes.c,
wg_data.c) behind the interface of vpncrypt.transport.

Two ways in: the list form (``open``/``seal`` on bytes, as the reference
table) for the protocol core's own traffic and for tests, and ``Batch``, the
zero-copy form the data plane uses on its receive and send slabs."""
import dataclasses
import ipaddress
import socket

from vpncrypt._native import ffi, lib
from vpncrypt.transport import status as S
from vpncrypt.transport.endpoints import endpoint_from_addr, endpoint_to_addr
from vpncrypt.transport.model import KeypairInfo, OpenResult, PeerStats, SealResult, TableConfig, Touch
from vpncrypt.transport.routing import parse_network

MAX_BATCH = 1024        # messages per native batch call (WG_MAX_BATCH)
_FAIL = ffi.cast("size_t", -1)
_ROUTE_ENTRY = 18       # vc_wg_route_list: family, cidr, 16 address bytes


def _c_config(config: TableConfig):
    """The C struct: every field of TableConfig has one of the same name."""
    c = ffi.new("vc_wg_config *")
    for f in dataclasses.fields(config):
        setattr(c, f.name, getattr(config, f.name))
    return c


def _touches(arr, n):
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
    packet i (NO_KEY: the caller queues it for a handshake)."""

    def __init__(self, table: "NativeTable", capacity: int, stride: int):
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
        self.tx_slab = ffi.new("uint8_t[]", capacity * self.stride)
        self.tx_off = ffi.new("uint32_t[]", [i * self.stride for i in range(capacity)])
        self.tx_len = ffi.new("uint32_t[]", capacity)
        self.tx_ep = ffi.new("vc_endpoint[]", capacity)
        self._n_reply = ffi.new("size_t *")
        self._n_queued = ffi.new("size_t *")
        self._n_touched = ffi.new("size_t *")
        self.n_touched = 0
        self.n_queued = 0
        self._make_calls()

    def _make_calls(self):
        """open() and seal() as closures over the arrays: the data plane
        calls them once per batch, so their Python cost is kept to a call."""
        ptr, cap, fail, nt, nr, nq = (self.table.ptr, self.capacity, _FAIL, self._n_touched,
                                      self._n_reply, self._n_queued)
        status, touched = self.status, self.touched
        open_batch, seal_batch = lib.vc_wg_open_batch, lib.vc_wg_seal_batch
        d_off, d_len = self.deliver_off, self.deliver_len
        tx_slab, stride, tx_len, tx_ep, peer_of = (self.tx_slab, self.stride, self.tx_len,
                                                   self.tx_ep, self.peer_of)
        batch = self

        def open_(slab, off, lens, ep, n: int, now: float):
            if not 0 <= n <= cap:
                raise ValueError(f"{n} messages do not fit a batch of {cap}")
            got = open_batch(ptr, slab, off, lens, ep, n, now, status, d_off, d_len, tx_slab, stride,
                             tx_len, tx_ep, nr, nq, touched, cap, nt)
            if got == fail:
                raise ValueError("vc_wg_open_batch refused the batch")
            batch.n_touched = nt[0]
            batch.n_queued = nq[0]
            return got, nr[0]

        def seal(slab, off, lens, n: int, now: float, peer: int = -1) -> int:
            if not 0 <= n <= cap:
                raise ValueError(f"{n} messages do not fit a batch of {cap}")
            got = seal_batch(ptr, slab, off, lens, n, peer, now, tx_slab, stride, cap, tx_len,
                             tx_ep, status, peer_of, touched, cap, nt)
            if got == fail:
                raise ValueError("vc_wg_seal_batch refused the batch")
            batch.n_touched = nt[0]
            return got

        self.open, self.seal = open_, seal

    def touches(self) -> list:
        return _touches(self.touched, self.n_touched)


class NativeTable:
    """See vpncrypt.transport for the interface."""

    backend = "native"

    def __init__(self, config: TableConfig | None = None):
        self.config = config or TableConfig()
        ptr = lib.vc_wg_table_new(_c_config(self.config))
        if ptr == ffi.NULL:
            raise MemoryError("vc_wg_table_new failed")
        self.ptr = ffi.gc(ptr, lib.vc_wg_table_free)
        self._stats = ffi.new("vc_wg_peer_stats *")
        self._ep = ffi.new("vc_endpoint *")
        self._list_batch = None
        self._route_buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * 64)
        self._hs_cap = 0
        self._under_load = ffi.new("int32_t *")

    def batch(self, capacity: int, stride: int) -> Batch:
        return Batch(self, capacity, stride)

    # ------------------------------------------------------------ config, clock

    def configure(self, config: TableConfig) -> None:
        if lib.vc_wg_table_configure(self.ptr, _c_config(config)):
            raise ValueError(f"bad table configuration: {config}")
        self.config = config

    def clock(self, now: float) -> float:
        return lib.vc_wg_clock(self.ptr, now)

    def clock_offset(self) -> float:
        return lib.vc_wg_clock_offset(self.ptr)

    # ------------------------------------------------------------ handshake messages

    def set_public_key(self, public_key: bytes | None) -> None:
        if public_key is not None and len(public_key) != 32:
            raise ValueError("a public key is 32 bytes")
        lib.vc_wg_set_public_key(self.ptr, ffi.NULL if public_key is None else bytes(public_key))

    def seed(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("the seed is 32 bytes")
        lib.vc_wg_seed(self.ptr, bytes(seed))

    def take_handshakes(self, limit: int) -> list:
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
        return [(ffi.buffer(buf + i * S.HANDSHAKE_MAX, lens[i])[:], endpoint_to_addr(eps + i))
                for i in range(n)]

    def handshakes_waiting(self, now: float) -> tuple[int, bool]:
        """(messages in the handshake queue, under load at now)."""
        n = lib.vc_wg_handshakes_waiting(self.ptr, now, self._under_load)
        return n, bool(self._under_load[0])

    # ------------------------------------------------------------ peers

    def add_peer(self) -> int:
        pid = lib.vc_wg_peer_add(self.ptr)
        if pid < 0:
            raise MemoryError("vc_wg_peer_add failed")
        return pid

    def remove_peer(self, pid: int) -> None:
        if lib.vc_wg_peer_remove(self.ptr, pid):
            raise KeyError(f"no peer {pid}")

    def peer_count(self) -> int:
        return lib.vc_wg_peer_count(self.ptr)

    def set_endpoint(self, pid: int, addr) -> None:
        ep = ffi.NULL if addr is None else endpoint_from_addr(addr, self._ep)
        if lib.vc_wg_peer_set_endpoint(self.ptr, pid, ep):
            raise KeyError(f"no peer {pid}")

    def endpoint(self, pid: int):
        return self.stats(pid, 0.0, _keypairs=False).endpoint    # ages unused: any now

    # ------------------------------------------------------------ indices

    def reserve_index(self, index: int, pid: int) -> bool:
        return lib.vc_wg_index_reserve(self.ptr, index, pid) == 0

    def release_index(self, index: int) -> bool:
        return lib.vc_wg_index_release(self.ptr, index) == 0

    def index_peer(self, index: int):
        pid = lib.vc_wg_index_peer(self.ptr, index)
        return None if pid < 0 else pid

    def index_count(self) -> int:
        return lib.vc_wg_index_count(self.ptr)

    # ------------------------------------------------------------ sessions

    def install(self, pid, local_index, remote_index, send_key, recv_key, initiator, now) -> None:
        if len(send_key) != 32 or len(recv_key) != 32:
            raise ValueError("session keys are 32 bytes")
        if lib.vc_wg_install(self.ptr, pid, local_index, remote_index, ffi.from_buffer(send_key),
                             ffi.from_buffer(recv_key), bool(initiator), now):
            raise ValueError(f"index {local_index:#010x} is not reserved for peer {pid}")

    def zero(self, pid: int) -> None:
        if lib.vc_wg_peer_zero(self.ptr, pid):
            raise KeyError(f"no peer {pid}")

    def maintain(self) -> None:
        lib.vc_wg_maintain(self.ptr)

    # ------------------------------------------------------------ routes

    @staticmethod
    def _route_args(cidr):
        net = parse_network(cidr)
        return (4 if net.version == 4 else 6), net.network_address.packed, net.prefixlen

    def route_add(self, pid: int, cidr) -> None:
        fam, addr, plen = self._route_args(cidr)
        if lib.vc_wg_route_add(self.ptr, fam, addr, plen, pid):
            raise ValueError(f"cannot add route {cidr} for peer {pid}")

    def route_remove(self, pid: int, cidr) -> bool:
        fam, addr, plen = self._route_args(cidr)
        return lib.vc_wg_route_remove(self.ptr, fam, addr, plen, pid) == 0

    def routes_clear(self, pid: int) -> None:
        lib.vc_wg_route_clear_peer(self.ptr, pid)

    def routes(self, pid: int, *, text: bool = False) -> list:
        cap = len(self._route_buf) // _ROUTE_ENTRY
        n = lib.vc_wg_route_list(self.ptr, pid, self._route_buf, cap)
        if n > cap:
            self._route_buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * 2 * n)
            n = lib.vc_wg_route_list(self.ptr, pid, self._route_buf, 2 * n)
        raw = ffi.buffer(self._route_buf, _ROUTE_ENTRY * n)[:]
        out = []
        for i in range(n):
            e = raw[_ROUTE_ENTRY * i:_ROUTE_ENTRY * (i + 1)]
            if e[0] == 4:
                # as text straight from the bytes: a UAPI get of many routes
                # would spend most of its time making objects to print them
                out.append(f"{socket.inet_ntop(socket.AF_INET, e[2:6])}/{e[1]}" if text
                           else ipaddress.IPv4Network((e[2:6], e[1])))
            else:
                net = ipaddress.IPv6Network((e[2:18], e[1]))
                out.append(str(net) if text else net)
        return out

    def lookup(self, addr) -> int | None:
        if isinstance(addr, str):
            addr = ipaddress.ip_address(addr).packed
        addr = bytes(addr)
        fam = 4 if len(addr) == 4 else 6 if len(addr) == 16 else 0
        if not fam:
            return None
        pid = lib.vc_wg_route_lookup(self.ptr, fam, addr)
        return None if pid < 0 else pid

    # ------------------------------------------------------------ stats

    @staticmethod
    def _info(k):
        if not k.valid:
            return None
        return KeypairInfo(k.local_index, k.remote_index, bool(k.initiator), k.age, k.send_counter,
                           k.greatest_received, bool(k.usable))

    def stats(self, pid: int, now: float, _keypairs: bool = True) -> PeerStats:
        st = self._stats
        if lib.vc_wg_peer_get(self.ptr, pid, st, now):
            raise KeyError(f"no peer {pid}")
        drops = {name: st.drops[code] for code, name in S.DROP_NAMES.items() if st.drops[code]}
        ep = endpoint_to_addr(ffi.addressof(st, "endpoint")) if st.endpoint_set else None
        return PeerStats(st.rx_bytes, st.rx_packets, st.tx_bytes, st.tx_packets, st.rx_wire_bytes,
                         st.tx_wire_bytes, drops, st.last_rx, st.last_tx, ep,
                         self._info(st.current) if _keypairs else None,
                         self._info(st.previous) if _keypairs else None,
                         self._info(st.next) if _keypairs else None)

    def drops(self) -> dict:
        arr = ffi.new("uint64_t[]", S.STATUS_COUNT)
        lib.vc_wg_table_drops(self.ptr, arr)
        return {name: arr[code] for code, name in S.DROP_NAMES.items() if arr[code]}

    # ------------------------------------------------------------ list-form batches

    def _batch_for(self, n, stride=S.OVERHEAD):
        """A batch for list-form calls (the protocol core's own traffic: small
        and rare), reused while it is large enough."""
        b = self._list_batch
        if b is None or b.capacity < n or b.stride < stride:
            b = self._list_batch = Batch(self, max(n, 16), max(stride, 2048))
        return b

    def _chunks(self, items):
        for i in range(0, len(items), MAX_BATCH):
            yield items[i:i + MAX_BATCH]

    def open(self, datagrams, now: float) -> OpenResult:
        res = OpenResult([], [], [], 0, [])
        for chunk in self._chunks(list(datagrams)):
            n = len(chunk)
            b = self._batch_for(n)
            blobs = [bytes(d) for d, _ in chunk]
            slab = ffi.new("uint8_t[]", max(1, sum(len(d) for d in blobs)))
            off = ffi.new("uint32_t[]", n)
            lens = ffi.new("uint32_t[]", n)
            eps = ffi.new("vc_endpoint[]", n)
            pos = 0
            for i, (d, (_, addr)) in enumerate(zip(blobs, chunk)):
                ffi.memmove(slab + pos, d, len(d))
                off[i], lens[i] = pos, len(d)
                endpoint_from_addr(addr, eps + i)
                pos += len(d)
            delivered, n_reply = b.open(slab, off, lens, eps, n, now)
            res.status.extend(b.status[i] for i in range(n))
            res.packets.extend(ffi.buffer(slab + b.deliver_off[i], b.deliver_len[i])[:]
                               for i in range(delivered))
            res.replies.extend((ffi.buffer(b.tx_slab + j * b.stride, b.tx_len[j])[:],
                                endpoint_to_addr(b.tx_ep + j)) for j in range(n_reply))
            res.queued += b.n_queued
            res.touched.extend(b.touches())
        return res

    def seal(self, packets, now: float, peer: int | None = None) -> SealResult:
        res = SealResult([], [], [], [])
        for chunk in self._chunks(list(packets)):
            n = len(chunk)
            blobs = [bytes(p) for p in chunk]
            b = self._batch_for(n, S.OVERHEAD + 16 + max(len(p) for p in blobs))
            slab = ffi.new("uint8_t[]", max(1, sum(len(p) for p in blobs)))
            off = ffi.new("uint32_t[]", n)
            lens = ffi.new("uint32_t[]", n)
            pos = 0
            for i, p in enumerate(blobs):
                ffi.memmove(slab + pos, p, len(p))
                off[i], lens[i] = pos, len(p)
                pos += len(p)
            sealed = b.seal(slab, off, lens, n, now, -1 if peer is None else peer)
            res.status.extend(b.status[i] for i in range(n))
            res.peers.extend(b.peer_of[i] for i in range(n))
            res.datagrams.extend((ffi.buffer(b.tx_slab + j * b.stride, b.tx_len[j])[:],
                                  endpoint_to_addr(b.tx_ep + j)) for j in range(sealed))
            res.touched.extend(b.touches())
        return res
