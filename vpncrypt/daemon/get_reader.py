"""What a UAPI ``get`` (and a metrics scrape) lists of each peer, read from
the session table in as few calls as it takes (GetReader)."""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any, Iterator

from ..drop_reasons import DropReason
from ..endpoints import format_endpoint, format_packed_endpoint
from ..transport import SessionTable

ROUTE_STEP = 1024  # allowed IPs added (or listed) per step of one peer
_ROUTE_ENTRY = 18  # vc_wg_route_list (native/vc_wg.h): family, prefix length, 16 address bytes


def _route_text(e: bytes) -> str:
    """One vc_wg_route_list entry as the table's routes(text=True) writes it."""
    if e[0] == 4:
        return f"{socket.inet_ntop(socket.AF_INET, e[2:6])}/{e[1]}"
    return str(ipaddress.IPv6Network((e[2:18], e[1])))


class GetReader:
    """What a ``get`` lists of each peer, read from the session table: the
    wire counters, the endpoint as text and the allowed IPs as text.  On
    the native table with one reused struct and one reused buffer, one call
    each: a get of 50,000 peers otherwise spends most of its time building
    what it does not list (full PeerStats with drops and keypairs, endpoint
    tuples, a buffer per peer).  A peer with more than ROUTE_STEP allowed IPs
    is listed by big_routes(), in steps.

    With drops, wire() and counts() also add each peer's drops up as they
    read it (add_drops() gives the totals): `vpncrypt show` and a scrape get
    them from the pass over the peers they make anyway, where a second pass
    (Device.drops()) cost 1.2 s of the daemon's CPU at 100,000 peers."""

    def __init__(self, table: SessionTable, drops: bool = False) -> None:
        from ..transport import status as S

        self.table = table
        # the native table's, for its one-call reads (duck-typed: tests wrap tables)
        self._ptr: Any = getattr(table, "ptr", None)
        self.drops = drops
        self._codes = tuple(S.DROP_NAMES)
        self.drop_names = tuple(S.DROP_NAMES.values())
        self._totals = [0] * len(self._codes)  # by drop_names, over the peers read
        self.native = getattr(table, "backend", None) == "native"
        if self.native:
            from .._native import ffi, lib

            self._ffi, self._lib = ffi, lib
            self._st = ffi.new("vc_wg_peer_stats *")
            self._ep = ffi.buffer(ffi.addressof(self._st, "endpoint"), ffi.sizeof("vc_endpoint"))
            # the peer's drop array as bytes: nearly every peer's is all zero,
            # and one comparison of it is cheaper than reading each element
            self._drop_bytes = ffi.buffer(ffi.addressof(self._st, "drops"), ffi.sizeof(self._st.drops))
            self._no_drops = bytes(len(self._drop_bytes))
            self._buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * ROUTE_STEP)
            self._raw = ffi.buffer(self._buf)

    def path_mtu(self) -> int:
        """The path MTU of the peer counts() or wire() read last (0: none
        learned, or not the native table)."""
        return int(self._st.path_mtu) if self.native else 0

    def wire(self, pid: int, now: float) -> tuple[int, int, str | None]:
        """(rx wire bytes, tx wire bytes, endpoint text or None)."""
        rx, tx, _, _, endpoint = self.counts(pid, now)
        return rx, tx, endpoint

    def counts(self, pid: int, now: float) -> tuple[int, int, int, int, str | None]:
        """(rx wire bytes, tx wire bytes, rx messages, tx messages, endpoint
        text or None), one call into the table."""
        if not self.native:
            st = self.table.stats(pid, now)
            if self.drops:
                self._add_peer_drops(st.drops)
            return (
                st.rx_wire_bytes,
                st.tx_wire_bytes,
                st.rx_packets,
                st.tx_packets,
                format_endpoint(st.endpoint),
            )
        st = self._st
        if self._lib.vc_wg_peer_get(self._ptr, pid, st, now):
            raise KeyError(f"no peer {pid}")
        if self.drops and self._drop_bytes[:] != self._no_drops:
            self._add_native_drops()
        return (
            st.rx_wire_bytes,
            st.tx_wire_bytes,
            st.rx_packets,
            st.tx_packets,
            format_packed_endpoint(self._ep[:]) if st.endpoint_set else None,
        )

    def _add_native_drops(self) -> None:
        arr = self._st.drops
        self._totals = [n + arr[code] for n, code in zip(self._totals, self._codes)]

    def _add_peer_drops(self, drops: dict[DropReason, int]) -> None:
        self._totals = [n + drops.get(name, 0) for n, name in zip(self._totals, self.drop_names)]

    def add_drops(self, out: dict[DropReason, int]) -> None:
        """The drops of the peers read so far added into ``out`` (a reason
        none of them had is left as it is)."""
        for reason, n in zip(self.drop_names, self._totals):
            if n:
                out[reason] = out.get(reason, 0) + n

    def routes(self, pid: int) -> list[str] | None:
        """The allowed IPs as text, or None if there are more than
        ROUTE_STEP (then big_routes())."""
        if not self.native:
            return self.table.routes(pid, text=True)
        n = self._lib.vc_wg_route_list(self._ptr, pid, self._buf, ROUTE_STEP)
        if n <= 1:  # the usual peer: one network (or none)
            return [_route_text(self._raw[:_ROUTE_ENTRY])] if n else []
        if n > ROUTE_STEP:
            return None
        raw = self._raw[: _ROUTE_ENTRY * n]
        return [_route_text(raw[k : k + _ROUTE_ENTRY]) for k in range(0, _ROUTE_ENTRY * n, _ROUTE_ENTRY)]

    def big_routes(self, pid: int, out: list[str]) -> Iterator[list[Any]]:
        """All of them listed at once, written into ``out`` as text
        ROUTE_STEP at a time, an empty snapshot part yielded before each
        (room for the loop).  The listing itself (one call into the table,
        which sorts them: 80 ms for 600,000) runs on a thread of its own,
        outside the interpreter lock; empty parts are yielded meanwhile."""
        ffi, lib = self._ffi, self._lib
        n = lib.vc_wg_route_list(self._ptr, pid, ffi.NULL, 0)
        buf = ffi.new("uint8_t[]", _ROUTE_ENTRY * n)
        listed = []
        lister = threading.Thread(
            target=lambda b=buf: listed.append(lib.vc_wg_route_list(self._ptr, pid, b, n)),
            name="uapi-routes",
            daemon=True,
        )
        lister.start()
        while lister.is_alive():
            yield []
        lister.join()
        n = min(n, listed[0]) if listed else 0
        raw = ffi.buffer(buf, _ROUTE_ENTRY * n)[:]
        del buf
        for start in range(0, n, ROUTE_STEP):
            yield []
            out.extend(
                [
                    _route_text(raw[k : k + _ROUTE_ENTRY])
                    for k in range(
                        _ROUTE_ENTRY * start, _ROUTE_ENTRY * min(n, start + ROUTE_STEP), _ROUTE_ENTRY
                    )
                ]
            )
