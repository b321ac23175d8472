"""The native transport fast path: a protocol Device's sessions mirrored into a
vc_wg_table (native/wg_transport.c), so that transport data is sealed and
opened a whole batch per native call.

The Device stays the authority: it runs handshakes, timers and configuration.
After every Device call that may change sessions, ``sync()`` mirrors the
changes (receiving keypairs with their expiry, each peer's current sending
keypair and counter, endpoints, AllowedIPs).  After every batch, the peers that
sent or received are reported back to the Device (``note_data_sent`` /
``note_data_received``) so that its timers, key confirmation and roaming see
the traffic.  Python work is per batch and per peer touched, never per packet.

Counter ownership: a sending counter advances in exactly one place at a time.
The native table advances it during a batch; the new value is copied into the
Python keypair right after the batch.  The Device advances it when it seals in
Python (keepalives, packets queued during a handshake); ``sync()`` then copies
it into the table before the next batch.
"""
from vpncrypt._native import ffi, lib
from vpncrypt.dataplane.io import endpoint_from_addr, endpoint_to_addr

STATUS_NAMES = {
    lib.VC_WG_UNKNOWN_INDEX: "unknown_index", lib.VC_WG_MALFORMED: "malformed",
    lib.VC_WG_BAD_TAG: "bad_tag", lib.VC_WG_REPLAY: "replay",
    lib.VC_WG_NOT_ALLOWED: "source_not_allowed", lib.VC_WG_NO_ROUTE: "no_route",
    lib.VC_WG_EXPIRED: "expired", lib.VC_WG_NO_ENDPOINT: "no_endpoint",
}


class _Mirror:
    """What the table holds for one peer."""
    __slots__ = ("pid", "current", "rx", "endpoint", "tx_counter", "rx_packets")

    def __init__(self, pid):
        self.pid = pid
        self.current = None      # the Keypair installed as the sending one
        self.rx = {}             # local index -> Keypair installed for receiving
        self.endpoint = None
        self.tx_counter = 0
        self.rx_packets = 0


class NativeFastPath:
    def __init__(self, device, *, max_peers: int = 1024, batch: int = 64, mtu: int = 1420):
        self.device = device
        self.max_peers = max_peers
        self.mtu = mtu
        self.batch = batch
        self.table = ffi.gc(lib.vc_wg_table_new(max_peers, 3 * max_peers + 16), lib.vc_wg_table_free)
        if self.table == ffi.NULL:
            raise MemoryError("vc_wg_table_new failed")
        self._mirror = {}                       # Peer -> _Mirror
        self._by_pid = [None] * max_peers       # pid -> Peer
        self._free = list(range(max_peers - 1, -1, -1))
        self._route_version = -1
        self._stats = ffi.new("vc_wg_peer_stats *")
        self._ep = ffi.new("vc_endpoint *")
        # receive-side arrays
        self.rx_status = ffi.new("int32_t[]", batch)
        self.deliver_off = ffi.new("uint32_t[]", batch)
        self.deliver_len = ffi.new("uint32_t[]", batch)
        self.other = ffi.new("uint32_t[]", batch)
        self.rx_touched = ffi.new("uint32_t[]", batch)
        self._n_other = ffi.new("size_t *")
        self._n_rx_touched = ffi.new("size_t *")
        # send-side arrays and the slab sealed messages go to
        self.stride = (mtu + lib.VC_WG_OVERHEAD + 16 + 63) & ~63
        self.tx_slab = ffi.new("uint8_t[]", batch * self.stride)
        self.tx_off = ffi.new("uint32_t[]", [i * self.stride for i in range(batch)])
        self.tx_len = ffi.new("uint32_t[]", batch)
        self.tx_ep = ffi.new("vc_endpoint[]", batch)
        self.tx_status = ffi.new("int32_t[]", batch)
        self.tx_peer = ffi.new("int32_t[]", batch)
        self.tx_touched = ffi.new("uint32_t[]", batch)
        self._n_tx_touched = ffi.new("size_t *")
        self.sync()

    # ------------------------------------------------------------ mirroring

    def sync(self, peers=None) -> None:
        """Mirror the Device into the table: every peer, or just `peers`."""
        dev = self.device
        t = self.table
        if peers is None:
            for peer in [p for p in self._mirror if dev.peers.get(p.public_key) is not p]:
                self._forget(peer)
            peers = dev.peers.values()
        reject_after = dev.config.reject_after_time
        for peer in peers:
            m = self._mirror.get(peer)
            if m is None:
                if not self._free:
                    raise RuntimeError(f"more than {self.max_peers} peers")
                m = self._mirror[peer] = _Mirror(self._free.pop())
                self._by_pid[m.pid] = peer
            pid = m.pid
            # receiving keypairs
            want = {kp.local_index: kp for kp in (peer.current, peer.previous, peer.next)
                    if kp is not None and kp.alive}
            if want.keys() != m.rx.keys() or any(m.rx[i] is not kp for i, kp in want.items()):
                for idx, kp in list(m.rx.items()):
                    if want.get(idx) is not kp:
                        lib.vc_wg_rx_remove(t, idx)
                        del m.rx[idx]
                for idx, kp in want.items():
                    if idx not in m.rx:
                        if lib.vc_wg_rx_add(t, idx, pid, ffi.from_buffer(kp.recv_key),
                                            dev.external_time(kp.created + reject_after)):
                            raise RuntimeError("native keypair table is full")
                        m.rx[idx] = kp
            # the sending keypair and its counter
            cur = peer.current if peer.current is not None and peer.current.alive else None
            if cur is not m.current:
                if cur is None:
                    lib.vc_wg_tx_clear(t, pid)
                else:
                    lib.vc_wg_tx_set(t, pid, cur.remote_index, ffi.from_buffer(cur.send_key),
                                     cur.send_counter, dev.external_time(cur.created + reject_after))
                m.current = cur
                m.tx_counter = cur.send_counter if cur is not None else 0
            elif cur is not None and cur.send_counter != m.tx_counter:
                lib.vc_wg_tx_set_counter(t, pid, cur.send_counter)
                m.tx_counter = cur.send_counter
            # endpoint (roaming from data is done natively and reported back)
            if peer.endpoint != m.endpoint:
                if peer.endpoint is None:
                    lib.vc_wg_peer_set_endpoint(t, pid, ffi.NULL)
                else:
                    lib.vc_wg_peer_set_endpoint(t, pid, endpoint_from_addr(peer.endpoint, self._ep))
                m.endpoint = peer.endpoint
        if dev.routing.version != self._route_version:
            self._sync_routes()

    def _sync_routes(self) -> None:
        t = self.table
        lib.vc_wg_route_clear(t)
        for bits, plen, prefix, peer in self.device.routing.items():
            m = self._mirror.get(peer)
            if m is None:
                continue
            value = prefix << (bits - plen) if plen else 0
            lib.vc_wg_route_add(t, 4 if bits == 32 else 6, value.to_bytes(bits // 8, "big"), plen, m.pid)
        self._route_version = self.device.routing.version

    def _forget(self, peer) -> None:
        m = self._mirror.pop(peer)
        lib.vc_wg_peer_reset(self.table, m.pid)
        self._by_pid[m.pid] = None
        self._free.append(m.pid)

    # ------------------------------------------------------------ batches

    def open(self, slab, off, lens, ep, n: int, now: float):
        """Open n received datagrams in place.  Returns (delivered, n_other):
        deliver_off/deliver_len[0..delivered) are the inner packets (in slab),
        other[0..n_other) the indices of datagrams for the Device."""
        delivered = lib.vc_wg_open_batch(
            self.table, slab, off, lens, ep, n, now, self.rx_status, self.deliver_off,
            self.deliver_len, self.other, self._n_other, self.rx_touched, self._n_rx_touched)
        return delivered, self._n_other[0]

    def after_open(self, now: float):
        """Report the peers that received data in the last open() to the
        Device; returns the Device's Outputs (handshakes it started)."""
        outs = []
        t, st, dev = self.table, self._stats, self.device
        touched = []
        for i in range(self._n_rx_touched[0]):
            peer = self._by_pid[self.rx_touched[i]]
            if peer is None:
                continue
            lib.vc_wg_peer_get(t, self.rx_touched[i], st)
            m = self._mirror[peer]
            got_data = st.rx_packets != m.rx_packets
            m.rx_packets = st.rx_packets
            addr = endpoint_to_addr(ffi.addressof(st, "endpoint"))
            m.endpoint = addr
            out = dev.note_data_received(st.last_rx_index, 0, 0, got_data, addr, now)
            if out.datagrams or out.packets:
                outs.append(out)
            touched.append(peer)
        if touched:
            self.sync(touched)
        return outs

    def seal(self, slab, off, lens, n: int, now: float) -> int:
        """Route and seal n inner packets; the sealed ones are packed in
        tx_slab/tx_off/tx_len/tx_ep.  Returns how many were sealed."""
        return lib.vc_wg_seal_batch(
            self.table, slab, off, lens, n, self.mtu, now, self.tx_slab, self.stride,
            self.tx_len, self.tx_ep, self.tx_status, self.tx_peer, self.tx_touched,
            self._n_tx_touched)

    def after_seal(self, now: float):
        """Bring the Python keypairs' counters up to date and report the peers
        that sent to the Device; returns its Outputs (rekey initiations)."""
        outs = []
        t, dev = self.table, self.device
        for i in range(self._n_tx_touched[0]):
            pid = self.tx_touched[i]
            peer = self._by_pid[pid]
            m = self._mirror.get(peer)
            if m is None or m.current is None:
                continue
            m.tx_counter = m.current.send_counter = lib.vc_wg_tx_counter(t, pid)
            out = dev.note_data_sent(peer, 0, 0, True, now)
            if out.datagrams or out.packets:
                outs.append(out)
        return outs

    def unsealed(self, view, off, lens, n: int, status=lib.VC_WG_NO_KEY):
        """The inner packets of the last seal() that got `status` (NO_KEY:
        the Device queues them and starts a handshake)."""
        st = self.tx_status
        return [bytes(view[off[i]:off[i] + lens[i]]) for i in range(n) if st[i] == status]

    # ------------------------------------------------------------ reporting

    def peer_stats(self, peer):
        """The native counters for a peer (a copy), or None."""
        m = self._mirror.get(peer)
        if m is None:
            return None
        out = ffi.new("vc_wg_peer_stats *")
        lib.vc_wg_peer_get(self.table, m.pid, out)
        return out

    def drops(self) -> dict:
        """Drops by reason: the table's own plus every peer's."""
        total = {}
        arr = ffi.new("uint64_t[12]")
        lib.vc_wg_table_drops(self.table, arr)
        st = self._stats
        for m in self._mirror.values():
            lib.vc_wg_peer_get(self.table, m.pid, st)
            for code in STATUS_NAMES:
                arr[code] += st.drops[code]
        for code, name in STATUS_NAMES.items():
            if arr[code]:
                total[name] = total.get(name, 0) + arr[code]
        return total
