"""The Device and the Engine of one interface (DataPlane): built here with
the UDP sockets and the TUN device's queues, told when the configuration
changed (its timers may move), and read for what the daemon reports
(counters, STATUS=, the peers' AllowedIPs for routes, the metrics' rows).

Queues: with N of them the Engine gets N (UDP socket, TUN queue) pairs, the
sockets one SO_REUSEPORT group (udpsocket.open_udp_sockets) and the queues
one multi-queue TUN (tun.TunDevice.create(queues=N)); the counters add up
every queue's, and queue_K_rx_packets / queue_K_tx_packets tell what each
one carried."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence, Union

from ..config.keytypes import fingerprint
from ..dataplane.engine import FAIR_QUEUE_REASONS, EngineCounters
from ..dataplane.io import UdpBatchSocket
from ..dataplane.sockopts import socket_drops
from ..drop_reasons import DropReason
from ..endpoints import format_endpoint
from ..wire import DEFAULT_MTU
from .counter_snapshot import CounterSnapshot
from .get_reader import GetReader
from .logsetup import RateLimitedLog
from .peer_metrics import HandshakeStats, MetricRow
from .trace import EventTrace, tracing

if TYPE_CHECKING:
    from ..dataplane.engine import BatchIO, Engine, Worker
    from ..protocol.events import Event
    from ..protocol.timers import ProtocolConfig
    from ..transport.routing import Network

# The TUN read buffers and the fast path's seal buffers are sized for this, so
# that the interface MTU can be changed at run time (`ip link set mtu`, as
# wg-quick does) without reallocating anything.
MAX_PACKET = 65535
# Datagrams or TUN reads per round: 128 cut both daemons' CPU per Gbit by 9%
# against 64 (TCP, median of 3 alternating runs), the ping under load no
# slower (BENCHMARKS.md, "Batch size"); each slab is about 8 MiB
BATCH = 128

log = logging.getLogger("vpncrypt.daemon")


def kernels(engine: Optional[Engine]) -> dict[str, str]:
    """The kernels selected, and those that served the data path last (its
    threads record theirs; with one thread it is this one)."""
    from .. import crypto

    out = {"chacha": crypto.active_implementation(), "poly1305": crypto.active_poly1305_implementation()}
    served = (engine.last_kernels if engine is not None else None) or crypto.last_kernels()
    if served[0]:
        out["data_chacha"] = served[0]
    if served[1]:
        out["data_poly1305"] = served[1]
    return out


def queue_workers(engine: Optional[Engine]) -> list[tuple[Worker, Worker]]:
    """(receiving worker, sending worker) of each of the engine's queues,
    the first first; none for the pure-Python backend or before start."""
    if engine is None:
        return []
    return engine.queue_workers()


def _socket_drops(udps: Sequence[BatchIO]) -> tuple[int, int]:
    """(datagrams the kernel dropped at these sockets, datagrams too large
    for a receive slot)."""
    return sum(socket_drops(u.sock) for u in udps), sum(int(u.dropped) for u in udps)


def ffi_fields(struct: Any) -> list[str]:
    from .._native import ffi

    t = ffi.typeof(struct)
    return [name for name, _ in (t.item if t.kind == "pointer" else t).fields]


def _summed(stats: list[Any]) -> dict[str, int]:
    """Each field of these cffi structs (one per queue), added up."""
    return {name: sum(int(getattr(s, name)) for s in stats) for name in ffi_fields(stats[0])}


def open_fds() -> int:
    """The process's open file descriptors (-1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir opened
    except OSError:
        return -1


def handshake_threads() -> int:
    """Worker threads for the responders' X25519 and Noise work (it runs
    without the GIL): 2 where there is a second core, else none (the loop
    serves the slices itself)."""
    return 2 if (os.cpu_count() or 1) > 1 else 0


class DataPlane:
    """The Device and the Engine of one interface."""

    def __init__(
        self,
        private_key: Optional[bytes],
        protocol_config: Optional[ProtocolConfig] = None,
        mtu: int = DEFAULT_MTU,
        threads: int = 1,
        tun_offloads: bool = True,
        fair_queue: bool = False,
        backend: str = "native",  # "pynacl": `vpncrypt loopback-bench --crypto pynacl`'s naive row
    ) -> None:
        from ..protocol.device import Device

        self.device = Device(private_key, backend=backend, protocol_config=protocol_config, mtu=mtu)
        self.engine: Optional[Engine] = None  # once started
        self.inner: Any = None  # its TunBatch
        self.threads = threads
        self.tun_offloads = tun_offloads
        self.fair_queue = fair_queue  # opt-in: `vpncrypt up --fair-queue`
        self._inners: list[BatchIO] = []  # a TunBatch per TUN queue
        self._closed_drops = (0, 0)  # _socket_drops of the sockets replace_udp retired
        self.trace = EventTrace(self.device)
        self._loops_seen = 0  # the table's routing_loops count last reported
        self._loop_log = RateLimitedLog(log, interval=10.0)
        self.stats = HandshakeStats(self.device)
        self.device.tracing = tracing()

    def on_events(self, events: list[Event]) -> None:
        """The Device's events (on the loop): for the metrics, then the trace."""
        self.stats.events(events, time.monotonic())
        self.trace.events(events)

    def udp_socket(self, sock: socket.socket) -> UdpBatchSocket:
        """The batch socket the Engine gets.  (The debug trace, if on, comes
        from the Device's events: see vpncrypt.daemon.trace.)"""
        self.device.tracing = tracing()
        return UdpBatchSocket(sock, batch=BATCH, mtu=MAX_PACKET)

    def udp_sockets(self, socks: Sequence[socket.socket]) -> list[UdpBatchSocket]:
        """A batch socket for each socket of the group, the first first."""
        return [self.udp_socket(s) for s in socks]

    def set_listen_port(self, port: int) -> None:
        """The session table's: an inner packet that is our own datagram to
        its peer's endpoint (UDP from this port) is a routing loop, cut."""
        self.device.table.set_listen_port(port)

    def report_routing_loops(self) -> None:
        """A line for the routing loops the table cut since the last call
        (the daemon's tick asks each second), at most one each 10 s: as the
        module's "Avoiding routing loop to ENDPOINT", with the count."""
        n, pid = self.device.table.routing_loops
        if n == self._loops_seen:
            return
        new, self._loops_seen = n - self._loops_seen, n
        peer = self.device.by_pid.get(pid)
        if peer is not None:
            self._loop_log.warning(
                "Avoiding routing loop to %s (peer %s): %d of its own datagrams came back in on the "
                "tunnel and were dropped (the route to the endpoint leads into the tunnel)",
                format_endpoint(peer.endpoint),
                fingerprint(peer.public_key),
                new,
            )

    def start(
        self,
        udp: Union[BatchIO, Sequence[BatchIO]],
        tun_fd: Union[int, Sequence[int]],
        *,
        loop: asyncio.AbstractEventLoop,
        mtu: int,
        on_fatal: Optional[Callable[[BaseException], object]],
    ) -> None:
        """`udp`: a batch socket, or one per queue (a list); `tun_fd`: the
        TUN's descriptor, or one per queue (a list as long)."""
        from ..dataplane.io import OFFLOAD_ALL, TunBatch, offload_names

        udps = list(udp) if isinstance(udp, (list, tuple)) else [udp]
        fds = [tun_fd] if isinstance(tun_fd, int) else list(tun_fd)
        if len(udps) != len(fds):
            raise ValueError(f"{len(udps)} UDP sockets for {len(fds)} TUN queues")
        # On a TUN opened with IFF_VNET_HDR, TunBatch switches the offloads on
        # (or, with tun_offloads off, keeps them off): reads split TSO/USO
        # super-packets, writes coalesce flows (GRO).
        offloads = OFFLOAD_ALL if self.tun_offloads else 0
        inners = [TunBatch(fd, mtu=MAX_PACKET, batch=BATCH, offloads=offloads) for fd in fds]
        log.info(
            "TUN offloads: %s",
            ", ".join(offload_names(inners[0].offloads)) or "off"
            if inners[0].vnet_hdr
            else "none (no IFF_VNET_HDR)",
        )
        if len(fds) > 1:
            log.info("%d queues: a TUN queue and a UDP socket each", len(fds))
        self.start_inner(udps, inners, loop=loop, mtu=mtu, on_fatal=on_fatal)

    def start_inner(
        self,
        udps: Sequence[BatchIO],
        inners: Sequence[BatchIO],
        *,
        loop: asyncio.AbstractEventLoop,
        mtu: int,
        on_fatal: Optional[Callable[[BaseException], object]],
    ) -> None:
        """Start on these inner links, one per UDP socket: the TUN's queues
        (start), or any object with TunBatch's interface (`vpncrypt proxy`'s
        packet socket on a namespace's veth: vpncrypt.proxy.packet_link)."""
        self._inners = list(inners)
        self.inner = self._inners[0]
        self.device.set_mtu(mtu)
        self.start_engine(udps, self._inners, loop=loop, on_fatal=on_fatal)

    def start_engine(
        self,
        udps: Sequence[BatchIO],
        inners: Sequence[BatchIO],
        *,
        loop: asyncio.AbstractEventLoop,
        on_fatal: Optional[Callable[[BaseException], object]] = None,
        max_packet: int = MAX_PACKET,
    ) -> None:
        """Start the Engine over these batch sockets and inner sides, a pair
        per queue: the daemon's TUN queues (start), or `vpncrypt
        loopback-bench`'s in-memory packet source and sink, which measures
        the data plane the daemon runs through this one construction (its
        threads, handshake threads, event handling, fair queue).
        max_packet: the largest packet the inner side carries."""
        from ..dataplane.engine import Engine

        self.engine = engine = Engine(
            self.device,
            udps[0],
            inners[0],
            max_packet=max_packet,
            threads=self.threads,
            handshake_threads=handshake_threads(),
            on_events=self.on_events,
            queues=list(zip(udps[1:], inners[1:])),
            loop=loop,
            on_fatal=on_fatal,
            fair_queue=self.fair_queue,
        )
        if self.fair_queue:
            log.info("fair queue: on (fq_codel on each send round, CoDel on each receiving socket)")
        engine.start()

    def replace_udp(self, udp: Union[BatchIO, Sequence[BatchIO]]) -> None:
        """Switch to other sockets (a batch socket, or one per queue: as
        many as there are queues, in queue order), after a listen-port
        change; the caller closes the old ones.  The engine keeps its
        workers, their counters and the sessions."""
        udps = list(udp) if isinstance(udp, (list, tuple)) else [udp]
        engine = self.engine
        if engine is None:
            return
        if len(udps) != len(self._inners):
            raise ValueError(f"{len(udps)} UDP sockets for {len(self._inners)} TUN queues")
        closing = _socket_drops([rx.udp for rx, _tx in queue_workers(engine)] or [engine.udp])
        engine.replace_udp(udps[0], udps[1:])
        self._closed_drops = (self._closed_drops[0] + closing[0], self._closed_drops[1] + closing[1])

    def set_mtu(self, mtu: int) -> None:
        """The interface MTU changed: the padding stops at it (the buffers
        hold MAX_PACKET either way)."""
        self.device.set_mtu(mtu)

    def changed(self) -> None:
        """After any change made to the Device from outside the engine."""
        if self.engine is not None:
            self.engine.changed()

    def stop(self) -> None:
        """Stop moving packets and wipe the keys."""
        if self.engine is not None:
            self.engine.stop()
        self.device.clear_peers()
        self.device.set_private_key(None)

    # ------------------------------------------------------------ reading

    def peer_count(self) -> int:
        return len(self.device.peers)

    def last_handshake(self) -> float:
        return max((p.counters.last_handshake for p in self.device.peers.values()), default=0.0)

    def allowed_ips(self) -> list[Network]:
        table = self.device.table
        return [net for peer in self.device.peers.values() for net in table.routes(peer.pid)]

    def counters(
        self,
        udp: Optional[BatchIO],
        *,
        loop: Optional[asyncio.AbstractEventLoop] = None,
        pending_timers: int = 0,
        peer_drops: bool = True,
    ) -> CounterSnapshot:
        """Without peer_drops, the drop counters leave out the session
        table's per-peer ones (metric_rows() and a get's snapshot_parts()
        add them up in the pass over the peers they make)."""
        dev, eng = self.device, self.engine
        out = CounterSnapshot(drops=self.drops(udp, peer_drops=peer_drops))
        if eng is not None:
            out.engine = self.engine_counters().as_dict()
        workers = queue_workers(eng)
        if eng is not None and self.inner is not None and self.inner.vnet_hdr:
            # reads happen on the sending direction's TunBatch, writes on the
            # receiving one's: every queue's, added up
            out.tun_rx = _summed([tx.inner.rx_stats for _rx, tx in workers])
            out.tun_tx = _summed([rx.inner.tx_stats for rx, _tx in workers])
        if len(workers) > 1:
            out.queues = [(rx.counters.rx_batch_packets, tx.counters.tx_batch_packets) for rx, tx in workers]
        fq = eng.fair_queue_counters() if eng is not None else None
        if fq is not None:
            out.fair_queue_packets = fq[1]
        d = out.device
        d["handshakes_sent"] = dev.counters.handshakes_sent
        d["handshakes_completed"] = dev.counters.handshakes_completed
        d["handshakes_failed"] = self.stats.failed
        d["keepalives_sent"] = self.stats.keepalives_total
        d["under_load"] = int(self.stats.under_load)
        # peers' source addresses the kernel refused (the address left the
        # host): replies left from the one routing picks (the native table
        # only; the pure-Python one keeps no source address)
        d["source_addresses_forgotten"] = int(getattr(dev.table, "sources_forgotten", 0))
        # the errors of the sockets' error queues (ICMP "fragmentation needed"
        # / "packet too big", this host's EMSGSIZE) the table took as a
        # peer's path MTU, and refused (the native table only)
        taken, refused = getattr(dev.table, "pmtu_counts", (0, 0))
        d["path_mtu_learned"], d["path_mtu_refused"] = taken, refused
        # resource gauges, for the long-run tests: nothing here may grow
        if loop is not None:
            d["asyncio_tasks"] = len(asyncio.all_tasks(loop))
        d["pending_timers"] = pending_timers
        d["open_fds"] = open_fds()
        return out

    def drops(self, udp: Optional[BatchIO], *, peer_drops: bool = True) -> dict[DropReason, int]:
        """Every reason the interface counts, 0 or more (the fair queue's
        only while it is on), each the sum of every layer that counts it:
        the protocol core and the session table (Device.drops), the UDP
        sockets (with those a ListenPort change closed: counters never go
        back) and the fair queue."""
        eng = self.engine
        fq = eng.fair_queue_counters() if eng is not None else None
        out = dict.fromkeys((r for r in DropReason if fq is not None or r not in FAIR_QUEUE_REASONS), 0)
        for reason, n in self.device.drops(peers=peer_drops).items():
            out[reason] += n
        workers = queue_workers(eng)
        udps = [rx.udp for rx, _tx in workers] or ([udp] if udp is not None else [])
        # the kernel's count for our sockets (receive buffer full), and
        # datagrams too large for a receive slot
        overflow, truncated = _socket_drops(udps)
        out[DropReason.SOCKET_OVERFLOW] += overflow + self._closed_drops[0]
        out[DropReason.TRUNCATED] += truncated + self._closed_drops[1]
        if fq is not None:
            for reason, n in fq[0].items():
                out[reason] += n
        return out

    def engine_counters(self) -> EngineCounters:
        """The engine's counters (empty before start)."""
        return self.engine.counters if self.engine is not None else EngineCounters()

    def metric_rows(
        self, part: int = 1024, drops: Optional[dict[DropReason, int]] = None
    ) -> Iterator[list[MetricRow]]:
        """Every peer as a MetricRow, read from the session table and the
        Device, ``part`` peers per list yielded (the caller lets the loop run
        between them).  A peer removed meanwhile is left out.  The session
        table's per-peer drops are added into ``drops``."""
        dev, stats = self.device, self.stats
        reader = GetReader(dev.table, drops=drops is not None)
        peers = list(dev.peers.values())
        rtts, kas = stats.rtt, stats.keepalives
        for start in range(0, len(peers), part):
            rows = []
            now = dev.table.clock(time.monotonic())
            current = dev.peers.get
            for p in peers[start : start + part]:
                pk = p.public_key
                if current(pk) is not p:
                    continue
                routes = reader.routes(p.pid)
                if routes is None:  # more than ROUTE_STEP: listed at once
                    routes = dev.table.routes(p.pid, text=True)
                rx_wire, tx_wire, rx_n, tx_n, endpoint = reader.counts(p.pid, now)
                path_mtu = reader.path_mtu()
                c = p.counters
                rtt = rtts.get(pk)
                rows.append(
                    MetricRow(
                        pk,
                        endpoint,
                        routes,
                        c.last_handshake or 0.0,
                        c.rx_bytes + rx_wire,
                        c.tx_bytes + tx_wire,
                        c.rx_packets + rx_n,
                        c.tx_packets + tx_n,
                        sum(1 for x in p.staged if x) if p.staged else 0,
                        kas.get(pk, 0),
                        rtt.snapshot() if rtt is not None else None,
                        path_mtu,
                    )
                )
            yield rows
        if drops is not None:
            reader.add_drops(drops)
