"""The daemon's one contact with the protocol core and the data plane.

Everything the daemon does with the sans-I/O Device, the Engine and the
native fast path happens here, and only here:

* DataPlane builds the Device and the Engine, hands them the UDP socket and
  the TUN device, tells the Engine when the configuration changed (its
  timers may move), and reads what the daemon reports (counters, STATUS=,
  the peers' AllowedIPs for routes).
* DeviceControl is the Control interface (vpncrypt.daemon.control) that the
  UAPI server and the SIGHUP reload drive.
* HandshakeStats reads the Device's events for the metrics (handshake
  round trips, failures, keepalives, the load state): per event, never per
  packet; DataPlane.metric_rows() reads the session table's counters for a
  scrape, in parts.
* TracedUdpSocket and EventTrace produce the debug trace (`--log-level
  debug`): handshake messages and keepalives as they cross the socket, and
  the Device's events (handshakes started, answered, completed and given
  up, keys confirmed and zeroed, roaming, cookies, load).  No key material
  is ever logged: peers are named by a public-key fingerprint.
"""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import heapq
import ipaddress
import logging
import os
import socket
import threading
import time
from typing import Iterator, Optional

from ..config.keys import PublicKey
from ..config.ops import PeerUpdate, SetListenPort
from ..dataplane.io import UdpBatchSocket
from ..dataplane.sockopts import socket_drops
from ..endpoints import (Endpoint, format_endpoint, format_packed_endpoint, pack_endpoint,
                         resolve_endpoint)
from .control import Control, ControlError, InterfaceSnapshot, PeerSnapshot
from .histogram import RTT_BUCKETS, Histogram

log = logging.getLogger("vpncrypt.daemon")
trace = logging.getLogger("vpncrypt.trace")

# The TUN read buffers and the fast path's seal buffers are sized for this, so
# that the interface MTU can be changed at run time (`ip link set mtu`, as
# wg-quick does) without reallocating anything.
MAX_PACKET = 65535
BATCH = 64

# WireGuard message types and sizes (whitepaper section 5.4)
MSG_INITIATION, MSG_RESPONSE, MSG_COOKIE, MSG_DATA = 1, 2, 3, 4
KEEPALIVE_LEN = 32          # a data message with an empty payload: header 16 + tag 16
_SENT = {MSG_INITIATION: "sent handshake initiation to %s",
         MSG_RESPONSE: "sent handshake response to %s",
         MSG_COOKIE: "sent cookie reply to %s (under load)"}
_SIZES = {MSG_INITIATION: 148, MSG_RESPONSE: 92, MSG_COOKIE: 64}    # the whitepaper's
_RECEIVED = {MSG_INITIATION: "received handshake initiation from %s",
             MSG_RESPONSE: "received handshake response from %s",
             MSG_COOKIE: "received cookie reply from %s"}


def kernels(engine) -> dict:
    """The kernels selected, and those that served the data path last (its
    threads record theirs; with one thread it is this one)."""
    from .. import crypto
    out = {"chacha": crypto.active_implementation(),
           "poly1305": crypto.active_poly1305_implementation()}
    served = (engine.last_kernels if engine is not None else None) or crypto.last_kernels()
    if served[0]:
        out["data_chacha"] = served[0]
    if served[1]:
        out["data_poly1305"] = served[1]
    return out


def ffi_fields(struct) -> list:
    from .._native import ffi
    t = ffi.typeof(struct)
    return [name for name, _ in (t.item if t.kind == "pointer" else t).fields]


def fingerprint(public_key) -> str:
    return PublicKey(bytes(public_key)).fingerprint()


# --------------------------------------------------------------------------
# the data plane

def handshake_threads() -> int:
    """Worker threads for the responders' X25519 and Noise work (it runs
    without the GIL): 2 where there is a second core, else none (the loop
    serves the slices itself)."""
    return 2 if (os.cpu_count() or 1) > 1 else 0


class DataPlane:
    """The Device and the Engine of one interface."""

    def __init__(self, private_key: Optional[bytes], timer_config=None, mtu: int = 1420,
                 threads: int = 1, tun_offloads: bool = True):
        from ..protocol.device import Device
        self.device = Device(private_key, timer_config=timer_config, mtu=mtu)
        self.engine = None
        self.inner = None
        self.threads = threads
        self.tun_offloads = tun_offloads
        self.trace = EventTrace(self.device)
        self.stats = HandshakeStats(self.device)

    def on_events(self, events) -> None:
        """The Device's events (on the loop): for the metrics, then the trace."""
        self.stats.events(events, time.monotonic())
        self.trace.events(events)

    def udp_socket(self, sock):
        """The batch socket the Engine gets: traced when debug logging is on."""
        cls = TracedUdpSocket if trace.isEnabledFor(logging.DEBUG) else UdpBatchSocket
        udp = cls(sock, batch=BATCH, mtu=MAX_PACKET)
        if isinstance(udp, TracedUdpSocket):
            udp.device = self.device
        return udp

    def set_listen_port(self, port: int) -> None:
        """(The protocol core does not need the port.)"""

    def start(self, udp, tun_fd: int, *, loop, mtu: int, on_fatal) -> None:
        from ..dataplane.engine import Engine
        from ..dataplane.io import OFFLOAD_ALL, TunBatch, offload_names
        # On a TUN opened with IFF_VNET_HDR, TunBatch switches the offloads on
        # (or, with tun_offloads off, keeps them off): reads split TSO/USO
        # super-packets, writes coalesce flows (GRO).
        self.inner = inner = TunBatch(tun_fd, mtu=MAX_PACKET, batch=BATCH,
                                      offloads=OFFLOAD_ALL if self.tun_offloads else 0)
        log.info("TUN offloads: %s", ", ".join(offload_names(inner.offloads)) or "off"
                 if inner.vnet_hdr else "none (no IFF_VNET_HDR)")
        self.device.set_mtu(mtu)
        self.engine = Engine(self.device, udp, inner, loop=loop, max_packet=MAX_PACKET,
                             threads=self.threads, handshake_threads=handshake_threads(),
                             on_fatal=on_fatal, on_events=self.on_events)
        self.engine.start()

    def replace_udp(self, udp) -> None:
        if self.engine is not None:
            self.engine.replace_udp(udp)

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

    def allowed_ips(self) -> list:
        table = self.device.table
        return [net for peer in self.device.peers.values() for net in table.routes(peer.pid)]

    def counters(self, udp, *, loop=None, pending_timers: int = 0,
                 peer_drops: bool = True) -> dict:
        """Without peer_drops, the drop counters leave out the session
        table's per-peer ones (metric_rows() adds them up in parts)."""
        dev = self.device
        if peer_drops:
            out = {"drop_" + k: v for k, v in dev.drops().items()}
        else:
            out = {"drop_" + k: v for k, v in dev.counters.drops.items() if v}
            for k, v in dev.table.drops().items():
                out["drop_" + k] = out.get("drop_" + k, 0) + v
        eng = self.engine
        if eng is not None:
            for k, v in eng.counters.as_dict().items():
                out["engine_" + k] = v
        if eng is not None and self.inner is not None and self.inner.vnet_hdr:
            # reads happen on the sending direction's TunBatch, writes on the receiving one's
            rx, tx = eng.tx.inner.rx_stats, eng.rx.inner.tx_stats
            for name in ffi_fields(rx):
                out["tun_rx_" + name] = int(getattr(rx, name))
            for name in ffi_fields(tx):
                out["tun_tx_" + name] = int(getattr(tx, name))
        if udp is not None:
            # the kernel's count for our socket (receive buffer full), and
            # datagrams too large for a receive slot
            out["drop_socket_overflow"] = socket_drops(udp.sock)
            if udp.dropped:
                out["drop_truncated"] = int(udp.dropped)
        out["handshakes_sent"] = dev.counters.handshakes_sent
        out["handshakes_completed"] = dev.counters.handshakes_completed
        out["handshakes_failed"] = self.stats.failed
        out["keepalives_sent"] = self.stats.keepalives_total
        out["under_load"] = int(self.stats.under_load)
        # resource gauges, for the long-run tests: nothing here may grow
        if loop is not None:
            out["asyncio_tasks"] = len(asyncio.all_tasks(loop))
        out["pending_timers"] = pending_timers
        out["open_fds"] = open_fds()
        return out

    def metric_rows(self, part: int = 1024, drops: Optional[dict] = None) -> Iterator[list]:
        """Every peer as a MetricRow, read from the session table and the
        Device, ``part`` peers per list yielded (the caller lets the loop run
        between them).  A peer removed meanwhile is left out.  The session
        table's per-peer drops are added into ``drops`` ("drop_REASON": n)."""
        dev, stats = self.device, self.stats
        reader = _GetReader(dev.table, drops=drops is not None)
        if drops is not None:
            totals = [0] * len(reader.drop_names)
        peers = list(dev.peers.values())
        rtts, kas = stats.rtt, stats.keepalives
        for start in range(0, len(peers), part):
            rows = []
            now = dev.table.clock(time.monotonic())
            current = dev.peers.get
            for p in peers[start:start + part]:
                pk = p.public_key
                if current(pk) is not p:
                    continue
                routes = reader.routes(p.pid)
                if routes is None:                  # more than ROUTE_STEP: listed at once
                    routes = dev.table.routes(p.pid, text=True)
                rx_wire, tx_wire, rx_n, tx_n, endpoint = reader.counts(p.pid, now)
                if drops is not None:
                    totals = list(map(int.__add__, totals, reader.peer_drops))
                c = p.counters
                rtt = rtts.get(pk)
                rows.append(MetricRow(pk, endpoint, routes, c.last_handshake or 0.0,
                                      c.rx_bytes + rx_wire, c.tx_bytes + tx_wire,
                                      c.rx_packets + rx_n, c.tx_packets + tx_n,
                                      sum(1 for x in p.staged if x) if p.staged else 0,
                                      kas.get(pk, 0), rtt.snapshot() if rtt is not None else None))
            yield rows
        if drops is not None:
            for name, n in zip(reader.drop_names, totals):
                if n:
                    drops["drop_" + name] = drops.get("drop_" + name, 0) + n


@dataclasses.dataclass(slots=True)
class MetricRow:
    """What a scrape shows of one peer (no key but its public one)."""
    public_key: bytes
    endpoint: Optional[str]
    allowed_ips: list            # text
    latest_handshake: float      # Unix time; 0 = never
    rx_bytes: int                # as `wg show`: whole datagrams, handshakes included
    tx_bytes: int
    rx_packets: int              # transport data messages and handshake messages
    tx_packets: int
    staged: int                  # packets waiting for a handshake
    keepalives_sent: int
    handshake_rtt: Optional[Histogram]  # a copy, or None before the first round trip


def open_fds() -> int:
    """The process's open file descriptors (-1 where /proc cannot tell)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1     # less the one listdir opened
    except OSError:
        return -1


class HandshakeStats:
    """What the metrics read from the Device's events: the round trip of
    each handshake this side initiated (from the initiation sent, a retry's
    included, to the response that completed it), handshakes given up,
    keepalives sent, and whether the device is under load.  Kept only for
    the device's peers: a removed peer is forgotten."""

    def __init__(self, device=None):
        self.device = device
        self.started = {}        # public key -> when its last initiation went out (monotonic)
        self.rtt = {}            # public key -> Histogram of round trips
        self.keepalives = {}     # public key -> keepalives sent
        self.failed = 0
        self.keepalives_total = 0
        self.under_load = False

    def events(self, events, now: float) -> None:
        from ..protocol import events as E
        for ev in events:
            kind = type(ev)
            if kind is E.KeepaliveSent:
                pk = ev.peer.public_key
                self.keepalives[pk] = self.keepalives.get(pk, 0) + 1
                self.keepalives_total += 1
            elif kind is E.HandshakeInitiated:
                self.started[ev.peer.public_key] = now
            elif kind is E.HandshakeCompleted:
                t0 = self.started.pop(ev.peer.public_key, None)
                if ev.initiator and t0 is not None:
                    h = self.rtt.get(ev.peer.public_key)
                    if h is None:
                        h = self.rtt[ev.peer.public_key] = Histogram(RTT_BUCKETS)
                    h.observe(max(0.0, now - t0))
            elif kind is E.HandshakeGaveUp:
                self.started.pop(ev.peer.public_key, None)
                self.failed += 1
            elif kind is E.LoadChanged:
                self.under_load = bool(ev.under_load)
        self._prune()

    def forget(self, public_key: bytes) -> None:
        for d in (self.started, self.rtt, self.keepalives):
            d.pop(public_key, None)

    def _prune(self) -> None:
        dev = self.device
        if dev is None:
            return
        limit = 2 * len(dev.peers) + 64
        for name in ("started", "rtt", "keepalives"):
            d = getattr(self, name)
            if len(d) > limit:
                setattr(self, name, {k: v for k, v in d.items() if k in dev.peers})


# --------------------------------------------------------------------------
# the Control adapter the UAPI server (and the SIGHUP reload) drive

# Pieces of work a big request is cut into (see vpncrypt.daemon.control):
# a few milliseconds each.
PART_WORK = 4096            # peers and allowed IPs read per part of a snapshot (a big peer aside)
ROUTE_STEP = 1024           # allowed IPs added (or listed) per step of one peer


def _trace_networks(nets) -> list:
    """The networks as the table lists them (text, host bits cleared)."""
    return [str(n) if isinstance(n, (ipaddress.IPv4Network, ipaddress.IPv6Network))
            else str(ipaddress.ip_network(n, strict=False)) for n in nets]


def _shown(nets, total: int) -> str:
    """The first 20 (in order) and the count: one line, however many."""
    first = heapq.nsmallest(20, nets)
    return (", ".join(first) or "(none)") + (f", ... ({total} in all)" if total > 20 else "")


_ROUTE_ENTRY = 18           # vc_wg_route_list (native/vc_wg.h): family, prefix length, 16 address bytes


def _route_text(e: bytes) -> str:
    """One vc_wg_route_list entry as the table's routes(text=True) writes it."""
    if e[0] == 4:
        return f"{socket.inet_ntop(socket.AF_INET, e[2:6])}/{e[1]}"
    return str(ipaddress.IPv6Network((e[2:18], e[1])))


class _GetReader:
    """What a ``get`` lists of each peer, read from the session table: the
    wire counters, the endpoint as text and the allowed IPs as text.  On
    the native table with one reused struct and one reused buffer, one call
    each: a get of 50,000 peers otherwise spends most of its time building
    what it does not list (full PeerStats with drops and keypairs, endpoint
    tuples, a buffer per peer).  A peer with more than ROUTE_STEP allowed IPs
    is listed by big_routes(), in steps."""

    def __init__(self, table, drops: bool = False):
        from ..transport import status as S
        self.table = table
        self.drops = drops                  # counts() also reads the peer's drops
        self._codes = tuple(S.DROP_NAMES)
        self.drop_names = tuple(S.DROP_NAMES.values())
        self.peer_drops = [0] * len(self._codes)
        self.native = getattr(table, "backend", None) == "native"
        if self.native:
            from .._native import ffi, lib
            self._ffi, self._lib = ffi, lib
            self._st = ffi.new("vc_wg_peer_stats *")
            self._ep = ffi.buffer(ffi.addressof(self._st, "endpoint"), ffi.sizeof("vc_endpoint"))
            self._buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * ROUTE_STEP)
            self._raw = ffi.buffer(self._buf)

    def wire(self, pid: int, now: float) -> tuple:
        """(rx wire bytes, tx wire bytes, endpoint text or None)."""
        if not self.native:
            st = self.table.stats(pid, now)
            return st.rx_wire_bytes, st.tx_wire_bytes, format_endpoint(st.endpoint)
        st = self._st
        if self._lib.vc_wg_peer_get(self.table.ptr, pid, st, now):
            raise KeyError(f"no peer {pid}")
        return (st.rx_wire_bytes, st.tx_wire_bytes,
                format_packed_endpoint(self._ep[:]) if st.endpoint_set else None)

    def counts(self, pid: int, now: float) -> tuple:
        """(rx wire bytes, tx wire bytes, rx messages, tx messages, endpoint
        text or None), one call into the table."""
        if not self.native:
            st = self.table.stats(pid, now)
            if self.drops:
                self.peer_drops = [st.drops.get(name, 0) for name in self.drop_names]
            return (st.rx_wire_bytes, st.tx_wire_bytes, st.rx_packets, st.tx_packets,
                    format_endpoint(st.endpoint))
        st = self._st
        if self._lib.vc_wg_peer_get(self.table.ptr, pid, st, now):
            raise KeyError(f"no peer {pid}")
        if self.drops:
            arr = st.drops
            self.peer_drops = [arr[code] for code in self._codes]
        return (st.rx_wire_bytes, st.tx_wire_bytes, st.rx_packets, st.tx_packets,
                format_packed_endpoint(self._ep[:]) if st.endpoint_set else None)

    def routes(self, pid: int):
        """The allowed IPs as text, or None if there are more than
        ROUTE_STEP (then big_routes())."""
        if not self.native:
            return self.table.routes(pid, text=True)
        n = self._lib.vc_wg_route_list(self.table.ptr, pid, self._buf, ROUTE_STEP)
        if n <= 1:                              # the usual peer: one network (or none)
            return [_route_text(self._raw[:_ROUTE_ENTRY])] if n else []
        if n > ROUTE_STEP:
            return None
        raw = self._raw[:_ROUTE_ENTRY * n]
        return [_route_text(raw[k:k + _ROUTE_ENTRY]) for k in range(0, _ROUTE_ENTRY * n, _ROUTE_ENTRY)]

    def big_routes(self, pid: int, out: list) -> Iterator[list]:
        """All of them listed at once, written into ``out`` as text
        ROUTE_STEP at a time, an empty snapshot part yielded before each
        (room for the loop).  The listing itself (one call into the table,
        which sorts them: 80 ms for 600,000) runs on a thread of its own,
        outside the interpreter lock; empty parts are yielded meanwhile."""
        ffi, lib = self._ffi, self._lib
        n = lib.vc_wg_route_list(self.table.ptr, pid, ffi.NULL, 0)
        buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * n)
        listed = []
        lister = threading.Thread(target=lambda: listed.append(
            lib.vc_wg_route_list(self.table.ptr, pid, buf, n)), name="uapi-routes", daemon=True)
        lister.start()
        while lister.is_alive():
            yield []
        lister.join()
        n = min(n, listed[0]) if listed else 0
        raw = ffi.buffer(buf, _ROUTE_ENTRY * n)[:]
        del buf
        for start in range(0, n, ROUTE_STEP):
            yield []
            out.extend([_route_text(raw[k:k + _ROUTE_ENTRY]) for k in
                        range(_ROUTE_ENTRY * start, _ROUTE_ENTRY * min(n, start + ROUTE_STEP),
                              _ROUTE_ENTRY)])


class DeviceControl(Control):
    """Control on top of a host (the Daemon) that has: device, listen_port,
    fwmark, v6, changed(), counters(), rebind(port), set_fwmark(mark), and
    for the wg-quick extras tun and check_mtu()."""

    def __init__(self, daemon):
        self.d = daemon

    @property
    def device(self):
        return self.d.device

    def _changed(self) -> None:
        self.d.changed()

    def _forget(self, public_key: bytes) -> None:
        """A peer is gone: nothing of it is kept (the debug trace's endpoint)."""
        dataplane = getattr(self.d, "dataplane", None)
        if dataplane is not None:
            dataplane.trace.forget(public_key)
            dataplane.stats.forget(public_key)

    # ------------------------------------------------------------ reading

    def snapshot(self) -> InterfaceSnapshot:
        parts = self.snapshot_parts()
        head = next(parts)
        peers = [p for part in parts for p in part]
        return dataclasses.replace(head, peers=peers)

    def snapshot_parts(self, *, counters: bool = True) -> Iterator:
        dev = self.device
        head = InterfaceSnapshot(private_key=dev.private_key, listen_port=self.d.listen_port,
                                 fwmark=self.d.fwmark, peers=())
        yield head
        peers = list(dev.peers.values())
        reader = _GetReader(dev.table)
        part, work = [], 0
        # the names of this loop bound once: it runs once per peer
        current, list_routes, wire, add = dev.peers.get, reader.routes, reader.wire, part.append
        # the loop's clock (asyncio and uvloop); read again for each part, as
        # the loop may have run in between
        now = dev.table.clock(time.monotonic())
        for p in peers:
            pk, pid = p.public_key, p.pid
            if current(pk) is not p:
                continue                        # removed in between: not listed
            routes = list_routes(pid)
            if routes is None:
                routes = []
                yield from reader.big_routes(pid, routes)
                if current(pk) is not p:
                    continue
                now = dev.table.clock(time.monotonic())
            rx_wire, tx_wire, endpoint = wire(pid, now)   # the session table's counters
            c = p.counters
            lh = c.last_handshake or 0.0
            sec = int(lh)
            # positional, in PeerSnapshot's field order
            add(PeerSnapshot(pk, p.preshared_key, endpoint, p.persistent_keepalive, routes, sec,
                             int((lh - sec) * 1e9) if lh else 0,
                             c.rx_bytes + rx_wire, c.tx_bytes + tx_wire))
            work += 1 + len(routes)
            if work >= PART_WORK:
                yield part
                part, work = [], 0
                add, current = part.append, dev.peers.get
                now = dev.table.clock(time.monotonic())
        if part:
            yield part
        if counters:
            head.counters = self.d.counters()
            head.info = kernels(getattr(self.d, "engine", None))

    # ------------------------------------------------------------ checking

    def _resolve(self, ep: Endpoint) -> tuple:
        try:
            addr = resolve_endpoint(ep, self.d.v6)
            pack_endpoint(addr)           # what the table is given: it must take it
        except OSError as e:
            raise ControlError(e.errno or errno.EADDRNOTAVAIL, e.strerror or str(e)) from None
        except ValueError as e:
            raise ControlError(errno.EINVAL, f"endpoint {ep}: {e}") from None
        return addr

    def _check_port(self, port: int) -> None:
        """A new listen port is free now (the request is refused before any
        of it is applied if not; the socket itself is opened when applied)."""
        if not port or port == self.d.listen_port:
            return                      # any port, or no change: rebinding cannot fail for it
        from .udpsocket import open_udp_socket
        try:
            open_udp_socket(port).close()
        except OSError as e:
            raise ControlError(e.errno or errno.EADDRINUSE, e.strerror or str(e)) from None

    def prepare(self, ops: list) -> list:
        """Every endpoint resolved now, before anything is applied: a zone
        names an interface that exists, IPv6 is there for an IPv6 endpoint,
        and the table can hold the address.  Each is then carried as the
        numbers found (so nothing is looked up again while applying).  A
        new listen port is free."""
        out = []
        for op in ops:
            if isinstance(op, SetListenPort):
                self._check_port(op.port)
            if isinstance(op, PeerUpdate) and op.endpoint is not None:
                addr = self._resolve(op.endpoint)
                host = addr[0] if len(addr) < 4 or not addr[3] else f"{addr[0]}%{addr[3]}"
                op = dataclasses.replace(op, endpoint=Endpoint(host, addr[1], op.endpoint.text))
            out.append(op)
        return out

    # ------------------------------------------------------------ changing

    def set_private_key(self, key) -> None:
        new = bytes(key) if key is not None else None
        if new == self.device.private_key:
            return  # unchanged (wg setconf always sends it): keep the sessions
        self.device.set_private_key(new)
        log.info("private key %s", "set" if new else "removed")
        self._changed()

    def set_listen_port(self, port: int) -> None:
        self.d.rebind(port)

    def set_fwmark(self, fwmark: int) -> None:
        if fwmark != self.d.fwmark:
            log.debug("fwmark set to 0x%x", fwmark)
        self.d.set_fwmark(fwmark)

    def replace_peers(self) -> None:
        if self.device.peers:
            log.info("all %d peer(s) removed", len(self.device.peers))
        for pk in list(self.device.peers):
            self._forget(pk)
        self.device.clear_peers()
        self._changed()

    def has_peer(self, public_key) -> bool:
        return bytes(public_key) in self.device.peers

    def remove_peer(self, public_key) -> None:
        pk = bytes(public_key)
        self._forget(pk)
        if pk in self.device.peers:
            self.device.remove_peer(pk)
            log.info("peer %s removed", fingerprint(pk))
            self._changed()

    def upsert_peer(self, update: PeerUpdate) -> None:
        for _ in self.upsert_peer_steps(update):
            pass

    def upsert_peer_steps(self, update: PeerUpdate) -> Iterator[None]:
        """The peer's settings and its first ROUTE_STEP allowed IPs, then the
        rest ROUTE_STEP at a time (a step each).  The debug trace costs what
        the update holds, never what the peer already has (repeated blocks
        for one peer in one request stay linear)."""
        dev = self.device
        pk = bytes(update.public_key)
        if dev.public_key is not None and pk == dev.public_key:
            return  # as wireguard-go: a peer with our own key is ignored
        endpoint = None
        if update.endpoint is not None:
            endpoint = self._resolve(update.endpoint)     # prepared: numbers only
        allowed = update.allowed_ips          # networks already; the table normalizes any form
        first, rest = allowed[:ROUTE_STEP], allowed[ROUTE_STEP:]
        psk = bytes(update.preshared_key) if update.preshared_key is not None else None
        name = fingerprint(pk)
        traced = log.isEnabledFor(logging.DEBUG) and bool(allowed or update.replace_allowed_ips)
        before = None
        if pk not in dev.peers:
            try:
                dev.add_peer(pk, preshared_key=psk, allowed_ips=first, endpoint=endpoint,
                             persistent_keepalive=update.persistent_keepalive or 0)
            except ValueError as e:
                raise ControlError(errno.EINVAL, str(e)) from None
            log.info("peer %s added", name)
            traced = False                    # "added" says it; its networks are the update's
        else:
            peer = dev.peers[pk]
            kw = {}
            if psk is not None:
                if (peer.preshared_key or None) != (psk if any(psk) else None):
                    log.debug("peer %s: preshared key %s", name, "set" if any(psk) else "removed")
                kw["preshared_key"] = psk
            if endpoint is not None:
                if endpoint != peer.endpoint:
                    log.debug("peer %s: endpoint set to %s", name, format_endpoint(endpoint))
                kw["endpoint"] = endpoint
            if update.persistent_keepalive is not None:
                if update.persistent_keepalive != peer.persistent_keepalive:
                    log.debug("peer %s: persistent keepalive %s", name,
                              f"every {update.persistent_keepalive} s"
                              if update.persistent_keepalive else "off")
                kw["persistent_keepalive"] = update.persistent_keepalive
            if traced and update.replace_allowed_ips:
                before = set(peer.allowed_ips)    # what is replaced: read once, for this update
            dev.update_peer(pk, allowed_ips=first,
                            replace_allowed_ips=update.replace_allowed_ips, **kw)
        for i in range(0, len(rest), ROUTE_STEP):
            yield
            if pk not in dev.peers:
                return
            dev.update_peer(pk, allowed_ips=rest[i:i + ROUTE_STEP])
        if traced:
            nets = set(_trace_networks(allowed))
            if before is None:
                log.debug("peer %s: allowed IPs added: %s", name, _shown(nets, len(nets)))
            elif nets != before:              # replaced: the update's networks are all it has
                log.debug("peer %s: allowed IPs %s", name, _shown(nets, len(nets)))
        if endpoint is not None:
            self.d.endpoint_set(pk, dev.peers[pk].endpoint)
        self._changed()
        yield

    def set_mtu(self, mtu: int) -> None:
        self.d.tun.set_mtu(mtu)
        self.d.check_mtu()

    def set_addresses(self, add, remove) -> None:
        self.d.tun.set_addresses(add=add, remove=remove)


# --------------------------------------------------------------------------
# the debug trace

class TracedUdpSocket(UdpBatchSocket):
    """A UdpBatchSocket that traces the protocol's control messages and
    keepalives (by type and size: nothing is decrypted here).  Used only at
    debug level; transport data of any other size passes unlogged."""

    device = None

    def recv(self):
        res = super().recv()
        n, view, off, lens, ep = res
        for i in range(n):
            o, size = off[i], lens[i]
            kind = view[o] if size else 0
            # a message is its type byte, three zero bytes and its exact size
            # (any size from a keepalive's up for data): named only if it is one
            well_formed = (size >= 4 and view[o + 1:o + 4] == b"\0\0\0"
                           and (size == _SIZES.get(kind) or kind == MSG_DATA and size >= KEEPALIVE_LEN))
            if well_formed and kind == MSG_DATA and size != KEEPALIVE_LEN:
                continue
            where = format_endpoint(self.endpoints.to_addr(ep + i))
            if not well_formed:
                trace.debug("received a malformed datagram (%d bytes) from %s", size, where)
            elif kind in _RECEIVED:
                trace.debug(_RECEIVED[kind], where)
            else:
                index = int.from_bytes(view[o + 4:o + 8], "little")
                trace.debug("received keepalive from %s%s", where, self._peer_of(index))
        return res

    def send_datagrams(self, datagrams, connected: bool = False):
        for data, addr in datagrams:
            if not data:
                continue
            kind = data[0]
            where = format_endpoint(addr)
            if kind in _SENT:
                trace.debug(_SENT[kind], where)
            elif kind == MSG_DATA and len(data) == KEEPALIVE_LEN:
                trace.debug("sent keepalive to %s", where)
        return super().send_datagrams(datagrams, connected)

    def _peer_of(self, receiver_index: int) -> str:
        dev = self.device
        pid = dev.table.index_peer(receiver_index) if dev is not None else None
        peer = dev.by_pid.get(pid) if pid is not None else None
        return f" (peer {fingerprint(peer.public_key)})" if peer is not None else ""


class EventTrace:
    """The Device's events as debug lines.

    It remembers where each peer was last seen (for "endpoint changed from
    ..."), only while the debug trace is on, and only for the device's
    peers: a removed peer is forgotten (forget(), and any entry left of a
    peer the device no longer has is dropped once they add up)."""

    def __init__(self, device=None):
        self.device = device
        self._endpoints = {}      # public key -> the last endpoint traced

    def endpoint_set(self, public_key: bytes, endpoint) -> None:
        """An endpoint set by configuration (file or UAPI): where a later
        move is traced from."""
        if trace.isEnabledFor(logging.DEBUG):
            self._endpoints[bytes(public_key)] = endpoint
            self._prune()

    def forget(self, public_key: bytes) -> None:
        self._endpoints.pop(bytes(public_key), None)

    def _prune(self) -> None:
        dev = self.device
        if dev is not None and len(self._endpoints) > 2 * len(dev.peers) + 64:
            peers = dev.peers
            self._endpoints = {k: v for k, v in self._endpoints.items() if k in peers}

    def events(self, events) -> None:
        if not trace.isEnabledFor(logging.DEBUG):
            return
        for ev in events:
            line = self._line(ev)
            if line:
                trace.debug("%s", line)
        self._prune()

    def _line(self, ev):
        from ..protocol import events as E
        peer = getattr(ev, "peer", None)
        name = fingerprint(peer.public_key) if peer is not None else ""
        if peer is not None and not isinstance(ev, E.EndpointChanged):
            self._endpoints[peer.public_key] = peer.endpoint    # where the peer is, for "from"
        if isinstance(ev, E.HandshakeInitiated):
            return None if ev.attempt == 1 else f"peer {name}: handshake retry (try {ev.attempt})"
        if isinstance(ev, E.HandshakeResponded):
            return (f"peer {name}: handshake initiation accepted; responder keypair waits "
                    "for confirmation")
        if isinstance(ev, E.HandshakeCompleted):
            if ev.initiator:
                return (f"peer {name}: handshake completed as initiator "
                        f"({peer.counters.handshakes_completed} so far); new keypair in use")
            return (f"peer {name}: handshake completed: keypair confirmed by the initiator's "
                    "first message; it is now current")
        if isinstance(ev, E.EndpointChanged):
            old = ev.previous if ev.previous is not None else self._endpoints.get(peer.public_key)
            self._endpoints[peer.public_key] = ev.endpoint
            return (f"peer {name}: endpoint changed from {format_endpoint(old) or '(none)'} "
                    f"to {format_endpoint(ev.endpoint)}")
        if isinstance(ev, E.HandshakeGaveUp):
            return f"peer {name}: handshake did not complete after {ev.initiations} attempts, giving up"
        if isinstance(ev, E.KeysZeroed):
            return f"peer {name}: all keys zeroed (no new session for 3 x REJECT_AFTER_TIME)"
        if isinstance(ev, E.CookieReceived):
            return f"peer {name}: cookie reply accepted (the peer is under load)"
        if isinstance(ev, E.LoadChanged):
            return "under load: handshake messages need a cookie" if ev.under_load else "no longer under load"
        return None
