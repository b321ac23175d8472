"""The session table in pure Python over a crypto backend (pynacl, the
reference): the same interface and the same decisions as the native table
(native/wg_table.c, wg_data.c), one message at a time.  The differential
tests hold the two against each other."""

import ipaddress
import math
from collections.abc import Iterable
from typing import Any, Literal, overload

from vpncrypt.crypto import get_backend
from vpncrypt.drop_reasons import DropReason
from vpncrypt.transport import status as S
from vpncrypt.transport.admission import Admission
from vpncrypt.transport.model import Addr, Datagram, KeypairInfo, OpenResult, PeerStats, SealResult, Session
from vpncrypt.transport.model import TableConfig, Touch
from vpncrypt.sourced import source_of
from vpncrypt.transport.packets import inner_address, own_datagram, padded_length
from vpncrypt.transport.replay import ReplayWindow
from vpncrypt.transport.routing import AllowedIPs, Network

_Touches = dict[int, list[int]]  # peer -> [flags, messages, wire bytes, inner packets, inner bytes]

CLOCK_JUMP = 1.0
_TYPE4 = b"\x04\x00\x00\x00"


class _Keypair:
    __slots__ = (
        "send_key",
        "recv_key",
        "local_index",
        "remote_index",
        "peer",
        "initiator",
        "born",
        "send_counter",
        "replay",
        "live",
    )

    def __init__(
        self,
        peer: int,
        local_index: int,
        remote_index: int,
        send_key: bytes,
        recv_key: bytes,
        initiator: bool,
        born: float,
    ) -> None:
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

    def wipe(self) -> None:
        for key in (self.send_key, self.recv_key):
            key[:] = bytes(len(key))
        self.live = False


class _Peer:
    __slots__ = ("cur", "prev", "next", "endpoint", "reserved", "stats")

    def __init__(self) -> None:
        self.cur: _Keypair | None = None
        self.prev: _Keypair | None = None
        self.next: _Keypair | None = None
        self.endpoint: Addr | None = None
        self.reserved: set[int] = set()
        self.stats = PeerStats(drops=dict.fromkeys(S.DROP_NAMES.values(), 0))


class ReferenceTable:
    """See vpncrypt.transport for the interface."""

    backend = "pynacl"
    MAX_RESERVED = 4

    def __init__(self, config: TableConfig | None = None, crypto: Any = None) -> None:
        self.config = config or TableConfig()
        self.crypto = crypto if crypto is not None else get_backend("pynacl")
        self._peers: dict[int, _Peer] = {}
        self._free: list[int] = []
        self._next_id = 0
        # local index -> ("reserved", peer) | ("keypair", _Keypair)
        self._index: dict[int, tuple[str, Any]] = {}
        self._routes = AllowedIPs()
        self._offset = 0.0
        self._last = -math.inf
        self._drops = dict.fromkeys(S.DROP_NAMES.values(), 0)
        self._listen_port = 0
        self._loops, self._loop_peer = 0, -1
        self._admission = Admission(
            self.config, self.crypto, self._index_kind, lambda code: self._drop(None, code)
        )

    def set_listen_port(self, port: int) -> None:
        self._listen_port = port if 0 <= port <= 65535 else 0

    @property
    def routing_loops(self) -> tuple[int, int]:
        return self._loops, self._loop_peer

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

    def take_handshakes(self, limit: int) -> list[Datagram]:
        return self._admission.take(limit)

    def handshakes_waiting(self, now: float) -> tuple[int, bool]:
        return self._admission.waiting(now)

    def _index_kind(self, index: int) -> str | None:
        entry = self._index.get(index)
        return None if entry is None else entry[0]

    # ------------------------------------------------------------ peers

    def add_peer(self) -> int:
        pid = self._free.pop() if self._free else self._alloc()
        self._peers[pid] = _Peer()
        return pid

    def _alloc(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _peer(self, pid: int) -> _Peer:
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

    def set_endpoint(self, pid: int, addr: Addr | None) -> None:
        self._peer(pid).endpoint = addr

    def endpoint(self, pid: int) -> Addr | None:
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

    def index_peer(self, index: int) -> int | None:
        entry = self._index.get(index)
        if entry is None:
            return None
        pid: int = entry[1] if entry[0] == "reserved" else entry[1].peer
        return pid

    def index_count(self) -> int:
        return len(self._index)

    # ------------------------------------------------------------ sessions

    def _retire(self, kp: _Keypair | None) -> None:
        if kp is None:
            return
        local = kp.local_index
        entry = self._index.get(local)
        if entry is not None and entry[1] is kp:
            del self._index[local]
        kp.wipe()

    def install(self, pid: int, session: Session, now: float) -> None:
        local_index, remote_index, send_key, recv_key, initiator = session
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

    def route_add(self, pid: int, cidr: Any) -> None:
        self._peer(pid)
        self._routes.insert(cidr, pid)

    def route_remove(self, pid: int, cidr: Any) -> bool:
        return self._routes.remove(cidr, pid)

    def routes_clear(self, pid: int) -> None:
        self._routes.remove_peer(pid)

    @overload
    def routes(self, pid: int, *, text: Literal[False] = False) -> list[Network]: ...

    @overload
    def routes(self, pid: int, *, text: Literal[True]) -> list[str]: ...

    def routes(self, pid: int, *, text: bool = False) -> list[Network] | list[str]:
        nets = self._routes.entries(pid)
        return [str(n) for n in nets] if text else nets

    def lookup(self, addr: str | bytes) -> int | None:
        if isinstance(addr, str):
            addr = ipaddress.ip_address(addr).packed
        pid: int | None = self._routes.lookup(bytes(addr))
        return pid

    # ------------------------------------------------------------ stats

    def _info(self, kp: _Keypair | None, tnow: float, current: bool) -> KeypairInfo | None:
        if kp is None:
            return None
        age = tnow - kp.born
        return KeypairInfo(
            kp.local_index,
            kp.remote_index,
            kp.initiator,
            age,
            kp.send_counter,
            kp.replay.greatest,
            bool(
                current
                and age < self.config.reject_after_time
                and kp.send_counter < self.config.reject_after_messages
            ),
        )

    def stats(self, pid: int, now: float) -> PeerStats:
        tnow = now
        p = self._peer(pid)
        s = p.stats
        return PeerStats(
            s.rx_bytes,
            s.rx_packets,
            s.tx_bytes,
            s.tx_packets,
            s.rx_wire_bytes,
            s.tx_wire_bytes,
            {k: v for k, v in s.drops.items() if v},
            s.last_rx,
            s.last_tx,
            p.endpoint,
            self._info(p.cur, tnow, True),
            self._info(p.prev, tnow, False),
            self._info(p.next, tnow, False),
        )

    def drops(self) -> dict[DropReason, int]:
        return {k: v for k, v in self._drops.items() if v}

    def _drop(self, p: _Peer | None, code: int) -> None:
        counters = p.stats.drops if p is not None else self._drops
        counters[S.DROP_NAMES[S.Status(code)]] += 1

    # ------------------------------------------------------------ batches

    @staticmethod
    def _touch(touched: _Touches, order: list[int], pid: int) -> list[int]:
        t = touched.get(pid)
        if t is None:
            t = touched[pid] = [0, 0, 0, 0, 0]  # flags, messages, wire bytes, inner packets, inner bytes
            order.append(pid)
        return t

    def seal(self, packets: Iterable[bytes], now: float, peer: int | None = None) -> SealResult:
        tnow = now
        cfg = self.config
        status: list[int] = []
        peers: list[int] = []
        datagrams: list[Datagram] = []
        touched: _Touches = {}
        order: list[int] = []
        chosen: dict[int, tuple[_Keypair | None, Addr | None]] = {}
        for pkt in packets:
            pid = peer
            st: int = S.OK
            if pid is None:
                fam, dst, _ = inner_address(pkt, destination=True)
                if not fam or dst is None:
                    st = S.MALFORMED
                else:
                    pid = self._routes.lookup(dst)
                    if pid is None:
                        st = S.NO_ROUTE
            elif pid not in self._peers:
                pid, st = None, S.NO_ROUTE
            peers.append(-1 if pid is None else pid)
            if st != S.OK or pid is None:
                status.append(st)
                self._drop(None, st)
                continue
            p = self._peers[pid]
            t = self._touch(touched, order, pid)
            if pid not in chosen:
                chosen[pid] = (p.cur, p.endpoint)
            kp, ep = chosen[pid]
            total = S.OVERHEAD + padded_length(len(pkt), cfg.mtu)
            if peer is None and ep is None:  # (as the native table: see wg_data.c)
                st = S.NO_ENDPOINT
            elif kp is None or not kp.live or tnow - kp.born >= cfg.reject_after_time:
                st = S.NO_KEY
            elif ep is None:
                st = S.NO_ENDPOINT
            elif own_datagram(pkt, self._listen_port, ep):
                st = S.ROUTING_LOOP
                self._loops, self._loop_peer = self._loops + 1, pid
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
            if st != S.OK or kp is None or ep is None:
                status.append(st)
                self._drop(p, st)
                continue
            plain = bytes(pkt) + bytes(total - S.OVERHEAD - len(pkt))
            cb = c.to_bytes(8, "little")
            body: bytes = self.crypto.seal(bytes(kp.send_key), b"\x00\x00\x00\x00" + cb, plain)
            datagrams.append((_TYPE4 + kp.remote_index.to_bytes(4, "little") + cb + body, ep))
            status.append(S.OK)
            t[0] |= S.EV_SENT | (S.EV_DATA_SENT if len(pkt) else 0)
            t[1] += 1
            t[2] += total
            t[3] += 1 if len(pkt) else 0
            t[4] += len(pkt)
            if c + 1 > cfg.rekey_after_messages or (kp.initiator and tnow - kp.born >= cfg.rekey_after_time):
                t[0] |= S.EV_REKEY_TX
        out: list[Touch] = []
        for pid in order:
            flags, msgs, wire, inner_packets, inner_bytes = touched[pid]
            out.append(Touch(pid, flags, msgs, wire))
            if msgs:
                stats = self._peers[pid].stats
                stats.tx_packets += inner_packets
                stats.tx_bytes += inner_bytes
                stats.tx_wire_bytes += wire
                stats.last_tx = tnow
        return SealResult(status, peers, datagrams, out)

    def _after_authentic(self, p: _Peer, kp: _Keypair, tnow: float) -> int:
        flags = 0
        if p.next is kp:
            self._retire(p.prev)
            p.prev, p.cur, p.next = p.cur, kp, None
            flags |= S.EV_CONFIRMED
        cur = p.cur
        if (
            cur is not None
            and cur.live
            and cur.initiator
            and tnow - cur.born >= self.config.rekey_on_receive_age
        ):
            flags |= S.EV_REKEY_RX
        return flags

    def open(self, datagrams: Iterable[tuple[bytes, Addr]], now: float) -> OpenResult:
        tnow = now
        cfg = self.config
        status: list[int] = []
        packets: list[bytes] = []
        replies: list[Datagram] = []
        queued = 0
        touched: _Touches = {}
        order: list[int] = []
        last_ep: dict[int, Addr] = {}
        for raw, addr in datagrams:
            data = bytes(raw)
            n = len(data)
            if n < 4 or data[:4] != _TYPE4:
                st = self._admission.admit(data, addr, tnow, replies)
                status.append(st)
                if st == S.HANDSHAKE:
                    queued += 1
                else:
                    self._drop(None, st)
                continue
            p: _Peer | None = None
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
        out: list[Touch] = []
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
            elif source_of(p.endpoint) != source_of(last_ep[pid]):
                p.endpoint = last_ep[pid]  # the local address it sent to: no roam
            out.append(Touch(pid, flags, msgs, wire))
        return OpenResult(status, packets, replies, queued, out)

    def _open_one(
        self,
        kp: _Keypair,
        p: _Peer,
        c: int,
        data: bytes,
        addr: Addr,
        tnow: float,
        cfg: TableConfig,
        touched: _Touches,
        order: list[int],
        last_ep: dict[int, Addr],
        packets: list[bytes],
    ) -> int:
        if tnow - kp.born >= cfg.reject_after_time:
            return S.STALE_KEYPAIR
        if not kp.replay.fresh(c, cfg.reject_after_messages):
            return S.REPLAY
        try:
            plain: bytes = self.crypto.open(bytes(kp.recv_key), b"\x00\x00\x00\x00" + data[8:16], data[16:])
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
        if not fam or src is None:
            return S.MALFORMED
        if self._routes.lookup(src) != kp.peer:
            return S.NOT_ALLOWED
        t[3] += 1
        t[4] += ip_len
        packets.append(plain[:ip_len])
        return S.OK
