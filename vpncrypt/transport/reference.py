"""The session table in pure Python over a crypto backend (pynacl, the
reference): the same interface and the same decisions as the native table
(native/wg_table.c, wg_data.c), one message at a time.  The differential
tests hold the two against each other."""
import ipaddress
import math

from vpncrypt.crypto import get_backend
from vpncrypt.transport import status as S
from vpncrypt.transport.admission import Admission
from vpncrypt.transport.model import KeypairInfo, OpenResult, PeerStats, SealResult, TableConfig, Touch
from vpncrypt.transport.packets import inner_address, padded_length
from vpncrypt.transport.replay import ReplayWindow
from vpncrypt.transport.routing import AllowedIPs

CLOCK_JUMP = 1.0
_TYPE4 = b"\x04\x00\x00\x00"


class _Keypair:
    __slots__ = ("send_key", "recv_key", "local_index", "remote_index", "peer", "initiator",
                 "born", "send_counter", "replay", "live")

    def __init__(self, peer, local_index, remote_index, send_key, recv_key, initiator, born):
        self.send_key = bytearray(send_key)
        self.recv_key = bytearray(recv_key)
        self.local_index = local_index
        self.remote_index = remote_index
        self.peer = peer
        self.initiator = bool(initiator)
        self.born = born
        self.send_counter = 0
        self.replay = ReplayWindow()
        self.live = True

    def wipe(self):
        for key in (self.send_key, self.recv_key):
            key[:] = bytes(len(key))
        self.live = False


class _Peer:
    __slots__ = ("cur", "prev", "next", "endpoint", "reserved", "stats")

    def __init__(self):
        self.cur = self.prev = self.next = None
        self.endpoint = None
        self.reserved = set()
        self.stats = PeerStats(drops=dict.fromkeys(S.DROP_NAMES.values(), 0))


class ReferenceTable:
    """See vpncrypt.transport for the interface."""

    backend = "pynacl"
    MAX_RESERVED = 4

    def __init__(self, config: TableConfig | None = None, crypto=None):
        self.config = config or TableConfig()
        self.crypto = crypto if crypto is not None else get_backend("pynacl")
        self._peers = {}
        self._free = []
        self._next_id = 0
        self._index = {}          # local index -> ("reserved", peer) | ("keypair", _Keypair)
        self._routes = AllowedIPs()
        self._offset = 0.0
        self._last = -math.inf
        self._drops = dict.fromkeys(S.DROP_NAMES.values(), 0)
        self._admission = Admission(self.config, self.crypto, self._index_kind,
                                    lambda code: self._drop(None, code))

    # ------------------------------------------------------------ config, clock

    def configure(self, config: TableConfig) -> None:
        self._admission.configure(config)
        self.config = config

    def clock(self, now: float) -> float:
        v = now + self._offset
        if v < self._last:
            if self._last - v > CLOCK_JUMP:
                self._offset += self._last - v
            v = self._last
        self._last = v
        return v

    def clock_offset(self) -> float:
        return self._offset

    # ------------------------------------------------------------ handshake messages

    def set_public_key(self, public_key: bytes | None) -> None:
        if public_key is not None and len(public_key) != 32:
            raise ValueError("a public key is 32 bytes")
        self._admission.set_public_key(public_key)

    def seed(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise ValueError("the seed is 32 bytes")
        self._admission.seed(seed)

    def take_handshakes(self, limit: int) -> list:
        return self._admission.take(limit)

    def handshakes_waiting(self, now: float) -> tuple[int, bool]:
        return self._admission.waiting(now)

    def _index_kind(self, index: int):
        entry = self._index.get(index)
        return None if entry is None else entry[0]

    # ------------------------------------------------------------ peers

    def add_peer(self) -> int:
        pid = self._free.pop() if self._free else self._alloc()
        self._peers[pid] = _Peer()
        return pid

    def _alloc(self):
        self._next_id += 1
        return self._next_id - 1

    def _peer(self, pid) -> _Peer:
        p = self._peers.get(pid)
        if p is None:
            raise KeyError(f"no peer {pid}")
        return p

    def remove_peer(self, pid: int) -> None:
        self.zero(pid)
        self._routes.remove_peer(pid)
        del self._peers[pid]
        self._free.append(pid)

    def peer_count(self) -> int:
        return len(self._peers)

    def set_endpoint(self, pid: int, addr) -> None:
        self._peer(pid).endpoint = addr

    def endpoint(self, pid: int):
        return self._peer(pid).endpoint

    # ------------------------------------------------------------ indices

    def reserve_index(self, index: int, pid: int) -> bool:
        p = self._peer(pid)
        if index in self._index or len(p.reserved) >= self.MAX_RESERVED:
            return False
        self._index[index] = ("reserved", pid)
        p.reserved.add(index)
        return True

    def release_index(self, index: int) -> bool:
        entry = self._index.get(index)
        if entry is None or entry[0] != "reserved":
            return False
        del self._index[index]
        self._peers[entry[1]].reserved.discard(index)
        return True

    def index_peer(self, index: int):
        entry = self._index.get(index)
        if entry is None:
            return None
        return entry[1] if entry[0] == "reserved" else entry[1].peer

    def index_count(self) -> int:
        return len(self._index)

    # ------------------------------------------------------------ sessions

    def _retire(self, kp) -> None:
        if kp is None:
            return
        if self._index.get(kp.local_index, (None, None))[1] is kp:
            del self._index[kp.local_index]
        kp.wipe()

    def install(self, pid, local_index, remote_index, send_key, recv_key, initiator, now) -> None:
        born = now
        p = self._peer(pid)
        if self._index.get(local_index) != ("reserved", pid):
            raise ValueError(f"index {local_index:#010x} is not reserved for peer {pid}")
        kp = _Keypair(pid, local_index, remote_index, send_key, recv_key, initiator, born)
        self._index[local_index] = ("keypair", kp)
        p.reserved.discard(local_index)
        if kp.initiator:
            if p.next is not None:
                self._retire(p.prev)
                p.prev, p.next = p.next, None
                self._retire(p.cur)
            else:
                self._retire(p.prev)
                p.prev = p.cur
            p.cur = kp
        else:
            self._retire(p.next)
            p.next = kp
            self._retire(p.prev)
            p.prev = None

    def zero(self, pid: int) -> None:
        p = self._peer(pid)
        for kp in (p.cur, p.prev, p.next):
            self._retire(kp)
        p.cur = p.prev = p.next = None
        for index in list(p.reserved):
            self._index.pop(index, None)
        p.reserved.clear()

    def maintain(self) -> None:
        """Nothing to do: retired keypairs are wiped at once here."""

    # ------------------------------------------------------------ routes

    def route_add(self, pid: int, cidr) -> None:
        self._peer(pid)
        self._routes.insert(cidr, pid)

    def route_remove(self, pid: int, cidr) -> bool:
        return self._routes.remove(cidr, pid)

    def routes_clear(self, pid: int) -> None:
        self._routes.remove_peer(pid)

    def routes(self, pid: int, *, text: bool = False) -> list:
        nets = self._routes.entries(pid)
        return [str(n) for n in nets] if text else nets

    def lookup(self, addr) -> int | None:
        if isinstance(addr, str):
            addr = ipaddress.ip_address(addr).packed
        return self._routes.lookup(bytes(addr))

    # ------------------------------------------------------------ stats

    def _info(self, kp, tnow, current):
        if kp is None:
            return None
        age = tnow - kp.born
        return KeypairInfo(kp.local_index, kp.remote_index, kp.initiator, age, kp.send_counter,
                           kp.replay.greatest, bool(current and age < self.config.reject_after_time
                                                    and kp.send_counter < self.config.reject_after_messages))

    def stats(self, pid: int, now: float) -> PeerStats:
        tnow = now
        p = self._peer(pid)
        s = p.stats
        return PeerStats(s.rx_bytes, s.rx_packets, s.tx_bytes, s.tx_packets, s.rx_wire_bytes,
                         s.tx_wire_bytes, {k: v for k, v in s.drops.items() if v}, s.last_rx,
                         s.last_tx, p.endpoint, self._info(p.cur, tnow, True),
                         self._info(p.prev, tnow, False), self._info(p.next, tnow, False))

    def drops(self) -> dict:
        return {k: v for k, v in self._drops.items() if v}

    def _drop(self, p, code):
        counters = p.stats.drops if p is not None else self._drops
        counters[S.DROP_NAMES[code]] += 1

    # ------------------------------------------------------------ batches

    @staticmethod
    def _touch(touched, order, pid):
        t = touched.get(pid)
        if t is None:
            t = touched[pid] = [0, 0, 0, 0, 0]   # flags, messages, wire bytes, inner packets, inner bytes
            order.append(pid)
        return t

    def seal(self, packets, now: float, peer: int | None = None) -> SealResult:
        tnow = now
        cfg = self.config
        status, peers, datagrams = [], [], []
        touched, order, chosen = {}, [], {}
        for pkt in packets:
            pid = peer
            st = S.OK
            if pid is None:
                fam, dst, _ = inner_address(pkt, destination=True)
                if not fam:
                    st = S.MALFORMED
                else:
                    pid = self._routes.lookup(dst)
                    if pid is None:
                        st = S.NO_ROUTE
            elif pid not in self._peers:
                pid, st = None, S.NO_ROUTE
            peers.append(-1 if pid is None else pid)
            if st != S.OK:
                status.append(st)
                self._drop(None, st)
                continue
            p = self._peers[pid]
            t = self._touch(touched, order, pid)
            if pid not in chosen:
                chosen[pid] = (p.cur, p.endpoint)
            kp, ep = chosen[pid]
            total = S.OVERHEAD + padded_length(len(pkt), cfg.mtu)
            if kp is None or not kp.live or tnow - kp.born >= cfg.reject_after_time:
                st = S.NO_KEY
            elif ep is None:
                st = S.NO_ENDPOINT
            elif total > S.LIST_SLOT:
                st = S.TOO_BIG
            else:
                c = kp.send_counter
                kp.send_counter += 1
                if c >= cfg.reject_after_messages:
                    kp.send_counter = cfg.reject_after_messages
                    st = S.NO_KEY
            if st == S.NO_KEY:
                t[0] |= S.EV_NEED_KEY
                status.append(st)
                continue
            if st != S.OK:
                status.append(st)
                self._drop(p, st)
                continue
            plain = bytes(pkt) + bytes(total - S.OVERHEAD - len(pkt))
            cb = c.to_bytes(8, "little")
            body = self.crypto.seal(bytes(kp.send_key), b"\x00\x00\x00\x00" + cb, plain)
            datagrams.append((_TYPE4 + kp.remote_index.to_bytes(4, "little") + cb + body, ep))
            status.append(S.OK)
            t[0] |= S.EV_SENT | (S.EV_DATA_SENT if len(pkt) else 0)
            t[1] += 1
            t[2] += total
            t[3] += 1 if len(pkt) else 0
            t[4] += len(pkt)
            if c + 1 > cfg.rekey_after_messages or (kp.initiator and tnow - kp.born >= cfg.rekey_after_time):
                t[0] |= S.EV_REKEY_TX
        out = []
        for pid in order:
            flags, msgs, wire, inner_packets, inner_bytes = touched[pid]
            out.append(Touch(pid, flags, msgs, wire))
            if msgs:
                st = self._peers[pid].stats
                st.tx_packets += inner_packets
                st.tx_bytes += inner_bytes
                st.tx_wire_bytes += wire
                st.last_tx = tnow
        return SealResult(status, peers, datagrams, out)

    def _after_authentic(self, p, kp, tnow) -> int:
        flags = 0
        if p.next is kp:
            self._retire(p.prev)
            p.prev, p.cur, p.next = p.cur, kp, None
            flags |= S.EV_CONFIRMED
        cur = p.cur
        if cur is not None and cur.live and cur.initiator and tnow - cur.born >= self.config.rekey_on_receive_age:
            flags |= S.EV_REKEY_RX
        return flags

    def open(self, datagrams, now: float) -> OpenResult:
        tnow = now
        cfg = self.config
        status, packets, replies = [], [], []
        queued = 0
        touched, order, last_ep = {}, [], {}
        for data, addr in datagrams:
            data = bytes(data)
            n = len(data)
            if n < 4 or data[:4] != _TYPE4:
                st = self._admission.admit(data, addr, tnow, replies)
                status.append(st)
                if st == S.HANDSHAKE:
                    queued += 1
                else:
                    self._drop(None, st)
                continue
            p = None
            if n < S.OVERHEAD:
                st = S.MALFORMED
            else:
                entry = self._index.get(int.from_bytes(data[4:8], "little"))
                kp = entry[1] if entry is not None and entry[0] == "keypair" else None
                if kp is None or not kp.live:
                    st = S.UNKNOWN_INDEX
                else:
                    p = self._peers[kp.peer]
                    c = int.from_bytes(data[8:16], "little")
                    st = self._open_one(kp, p, c, data, addr, tnow, cfg, touched, order, last_ep, packets)
            status.append(st)
            if st not in (S.OK, S.KEEPALIVE):
                self._drop(p, st)
        out = []
        for pid in order:
            flags, msgs, wire, inner_packets, inner_bytes = touched[pid]
            p = self._peers[pid]
            p.stats.rx_packets += inner_packets
            p.stats.rx_bytes += inner_bytes
            p.stats.rx_wire_bytes += wire
            p.stats.last_rx = tnow
            if p.endpoint != last_ep[pid]:
                p.endpoint = last_ep[pid]
                flags |= S.EV_ROAMED
            out.append(Touch(pid, flags, msgs, wire))
        return OpenResult(status, packets, replies, queued, out)

    def _open_one(self, kp, p, c, data, addr, tnow, cfg, touched, order, last_ep, packets) -> int:
        if tnow - kp.born >= cfg.reject_after_time:
            return S.EXPIRED
        if not kp.replay.fresh(c, cfg.reject_after_messages):
            return S.REPLAY
        try:
            plain = self.crypto.open(bytes(kp.recv_key), b"\x00\x00\x00\x00" + data[8:16], data[16:])
        except Exception:
            return S.BAD_TAG
        if not kp.replay.record(c, cfg.reject_after_messages):
            return S.REPLAY
        t = self._touch(touched, order, kp.peer)
        t[0] |= S.EV_AUTH
        t[1] += 1
        t[2] += len(data)
        last_ep[kp.peer] = addr
        t[0] |= self._after_authentic(p, kp, tnow)
        if not plain:
            return S.KEEPALIVE
        t[0] |= S.EV_DATA
        fam, src, ip_len = inner_address(plain, destination=False)
        if not fam:
            return S.MALFORMED
        if self._routes.lookup(src) != kp.peer:
            return S.NOT_ALLOWED
        t[3] += 1
        t[4] += ip_len
        packets.append(plain[:ip_len])
        return S.OK

