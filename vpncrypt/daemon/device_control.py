"""DeviceControl: the Control interface (vpncrypt.daemon.control) that the
UAPI server and the SIGHUP reload drive, on top of the daemon's Device."""

from __future__ import annotations

import dataclasses
import errno
import heapq
import ipaddress
import logging
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from ..config.keytypes import fingerprint
from ..config.ops import IPInterface, Operation, PeerUpdate, SetListenPort
from ..endpoints import Endpoint, format_endpoint, pack_endpoint, resolve_endpoint
from .control import Control, ControlError, InterfaceSnapshot, PeerSnapshot, SnapshotPart
from .data_plane import kernels
from .get_reader import ROUTE_STEP, GetReader

if TYPE_CHECKING:
    from ..protocol.device import Device

log = logging.getLogger("vpncrypt.daemon")

# Pieces of work a big request is cut into (see vpncrypt.daemon.control):
# a few milliseconds each.
PART_WORK = 4096  # peers and allowed IPs read per part of a snapshot (a big peer aside)


def _trace_networks(nets: Iterable[Any]) -> list[str]:
    """The networks as the table lists them (text, host bits cleared)."""
    return [
        str(n)
        if isinstance(n, (ipaddress.IPv4Network, ipaddress.IPv6Network))
        else str(ipaddress.ip_network(n, strict=False))
        for n in nets
    ]


def _shown(nets: Iterable[str], total: int) -> str:
    """The first 20 (in order) and the count: one line, however many."""
    first = heapq.nsmallest(20, nets)
    return (", ".join(first) or "(none)") + (f", ... ({total} in all)" if total > 20 else "")


class DeviceControl(Control):
    """Control on top of a host (the Daemon) that has: device, listen_port,
    fwmark, v6, changed(), counters(), rebind(port), set_fwmark(mark), and
    for the wg-quick extras tun and check_mtu()."""

    def __init__(self, daemon: Any) -> None:
        self.d = daemon  # the Daemon, or a test's host with what the docstring lists

    @property
    def device(self) -> Device:
        device: Device = self.d.device
        return device

    def _changed(self) -> None:
        self.d.changed()

    def _forget(self, public_key: bytes) -> None:
        """A peer is gone: nothing of it is kept (the debug trace's endpoint)."""
        dataplane = getattr(self.d, "dataplane", None)
        if dataplane is not None:
            dataplane.trace.forget(public_key)
            dataplane.stats.forget(public_key)
        names = getattr(self.d, "names", None)  # its Endpoint name, if followed
        if names is not None:
            names.forget(bytes(public_key))

    # ------------------------------------------------------------ reading

    def snapshot(self) -> InterfaceSnapshot:
        head = self._head()
        peers = [p for part in self._peer_parts(head, counters=True) for p in part]
        return dataclasses.replace(head, peers=peers)

    def snapshot_parts(self, *, counters: bool = True) -> Iterator[SnapshotPart]:
        head = self._head()
        yield head
        yield from self._peer_parts(head, counters=counters)

    def _head(self) -> InterfaceSnapshot:
        return InterfaceSnapshot(
            private_key=self.device.private_key,
            listen_port=self.d.listen_port,
            fwmark=self.d.fwmark,
            peers=(),
        )

    def _peer_parts(self, head: InterfaceSnapshot, *, counters: bool) -> Iterator[list[PeerSnapshot]]:
        """The peers, a list per part; with counters, the head's counters
        and info filled in by the time the iteration ends."""
        dev = self.device
        peers = list(dev.peers.values())
        # with the counters, the peers' drops are added up as they are read
        # (1.2 s of CPU less at 100,000 peers than DataPlane.counters walking
        # them all again)
        reader = GetReader(dev.table, drops=counters)
        part: list[PeerSnapshot] = []
        work = 0
        # the names of this loop bound once: it runs once per peer
        current, list_routes, wire, add = dev.peers.get, reader.routes, reader.wire, part.append
        path_mtus: list[str] = []  # "PUBLIC_KEY_HEX MTU" of the peers with one
        # the loop's clock (asyncio and uvloop); read again for each part, as
        # the loop may have run in between
        now = dev.table.clock(time.monotonic())
        for p in peers:
            pk, pid = p.public_key, p.pid
            if current(pk) is not p:
                continue  # removed in between: not listed
            routes = list_routes(pid)
            if routes is None:
                routes = []
                yield from reader.big_routes(pid, routes)
                if current(pk) is not p:
                    continue
                now = dev.table.clock(time.monotonic())
            rx_wire, tx_wire, endpoint = wire(pid, now)  # the session table's counters
            mtu = reader.path_mtu()
            if mtu:
                path_mtus.append(f"{bytes(pk).hex()} {mtu}")
            c = p.counters
            lh = c.last_handshake or 0.0
            sec = int(lh)
            # positional, in PeerSnapshot's field order
            add(
                PeerSnapshot(
                    pk,
                    p.preshared_key,
                    endpoint,
                    p.persistent_keepalive,
                    routes,
                    sec,
                    int((lh - sec) * 1e9) if lh else 0,
                    c.rx_bytes + rx_wire,
                    c.tx_bytes + tx_wire,
                )
            )
            work += 1 + len(routes)
            if work >= PART_WORK:
                yield part
                part, work = [], 0
                add, current = part.append, dev.peers.get
                now = dev.table.clock(time.monotonic())
        if part:
            yield part
        if counters:
            counts = self.d.counters(peer_drops=False)
            reader.add_drops(counts.drops)
            head.counters = counts.served()
            head.info = kernels(getattr(self.d, "engine", None))
            names = getattr(self.d, "endpoint_name_lines", None)
            head.endpoint_names = names() if names is not None else ()
            head.path_mtus = path_mtus

    # ------------------------------------------------------------ checking

    def _resolve(self, ep: Endpoint) -> tuple[Any, ...]:
        try:
            addr = resolve_endpoint(ep, self.d.v6)
            pack_endpoint(addr)  # what the table is given: it must take it
        except OSError as e:
            raise ControlError(e.errno or errno.EADDRNOTAVAIL, e.strerror or str(e)) from None
        except ValueError as e:
            raise ControlError(errno.EINVAL, f"endpoint {ep}: {e}") from None
        return addr

    def _check_port(self, port: int) -> None:
        """A new listen port is free now (the request is refused before any
        of it is applied if not; the socket itself is opened when applied)."""
        if not port or port == self.d.listen_port:
            return  # any port, or no change: rebinding cannot fail for it
        from .udpsocket import open_udp_socket

        try:
            open_udp_socket(port).close()
        except OSError as e:
            raise ControlError(e.errno or errno.EADDRINUSE, e.strerror or str(e)) from None

    def prepare(self, ops: list[Operation]) -> list[Operation]:
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

    def set_private_key(self, key: Optional[bytes]) -> None:
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

    def has_peer(self, public_key: bytes) -> bool:
        return bytes(public_key) in self.device.peers

    def remove_peer(self, public_key: bytes) -> None:
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
            endpoint = self._resolve(update.endpoint)  # prepared: numbers only
        allowed = update.allowed_ips  # networks already; the table normalizes any form
        first, rest = allowed[:ROUTE_STEP], allowed[ROUTE_STEP:]
        psk = bytes(update.preshared_key) if update.preshared_key is not None else None
        name = fingerprint(pk)
        traced = log.isEnabledFor(logging.DEBUG) and bool(allowed or update.replace_allowed_ips)
        before = None
        if pk not in dev.peers:
            try:
                dev.add_peer(
                    pk,
                    preshared_key=psk,
                    allowed_ips=first,
                    endpoint=endpoint,
                    persistent_keepalive=update.persistent_keepalive or 0,
                )
            except ValueError as e:
                raise ControlError(errno.EINVAL, str(e)) from None
            log.info("peer %s added", name)
            traced = False  # "added" says it; its networks are the update's
        else:
            peer = dev.peers[pk]
            kw: dict[str, Any] = {}
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
                    log.debug(
                        "peer %s: persistent keepalive %s",
                        name,
                        f"every {update.persistent_keepalive} s" if update.persistent_keepalive else "off",
                    )
                kw["persistent_keepalive"] = update.persistent_keepalive
            if traced and update.replace_allowed_ips:
                before = set(peer.allowed_ips)  # what is replaced: read once, for this update
            dev.update_peer(pk, allowed_ips=first, replace_allowed_ips=update.replace_allowed_ips, **kw)
        for i in range(0, len(rest), ROUTE_STEP):
            yield
            if pk not in dev.peers:
                return
            dev.update_peer(pk, allowed_ips=rest[i : i + ROUTE_STEP])
        if traced:
            nets = set(_trace_networks(allowed))
            if before is None:
                log.debug("peer %s: allowed IPs added: %s", name, _shown(nets, len(nets)))
            elif nets != before:  # replaced: the update's networks are all it has
                log.debug("peer %s: allowed IPs %s", name, _shown(nets, len(nets)))
        if endpoint is not None:
            self.d.endpoint_set(pk, dev.peers[pk].endpoint)
        self._changed()
        yield

    def set_mtu(self, mtu: int) -> None:
        self.d.tun.set_mtu(mtu)
        self.d.check_mtu()

    def set_addresses(self, add: Iterable[IPInterface], remove: Iterable[IPInterface]) -> None:
        self.d.tun.set_addresses(add=add, remove=remove)
