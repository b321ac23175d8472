"""SessionTable: the interface the protocol core (vpncrypt.protocol.device's
Device.table) and the daemon call on a session table, typed.  Both backends
implement it: transport.new_table() returns one, so mypy checks NativeTable
and ReferenceTable against it there.  The native table adds the data
plane's zero-copy form (NativeTable.batch, transport.native.Batch), which
Device.batch_path asks for by that type."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol, overload

from vpncrypt.drop_reasons import DropReason
from vpncrypt.transport.model import Addr, Datagram, OpenResult, PeerStats, SealResult, Session, TableConfig
from vpncrypt.transport.routing import Network


class SessionTable(Protocol):
    backend: str  # "native" or "pynacl"
    config: TableConfig

    # ------------------------------------------------------------ config, clock

    def configure(self, config: TableConfig) -> None: ...

    def clock(self, now: float) -> float:
        """The device's clock (never runs backwards) at monotonic `now`;
        every other call takes `now` on this clock."""
        ...

    def clock_offset(self) -> float: ...

    # ------------------------------------------------------------ handshake messages

    def set_public_key(self, public_key: bytes | None) -> None:
        """mac1 and cookie replies are keyed by it."""
        ...

    def seed(self, seed: bytes) -> None:
        """The cookie generator's 32 bytes (seeded from the system otherwise)."""
        ...

    def take_handshakes(self, limit: int) -> list[Datagram]:
        """Up to `limit` queued handshake messages, newest first."""
        ...

    def handshakes_waiting(self, now: float) -> tuple[int, bool]:
        """(how many wait, under load)."""
        ...

    # ------------------------------------------------------------ peers, endpoints, indices

    def add_peer(self) -> int:
        """A new peer's id."""
        ...

    def remove_peer(self, pid: int) -> None: ...

    def peer_count(self) -> int: ...

    def set_endpoint(self, pid: int, addr: Addr | None) -> None: ...

    def endpoint(self, pid: int) -> Addr | None: ...

    def reserve_index(self, index: int, pid: int) -> bool: ...

    def release_index(self, index: int) -> bool: ...

    def index_peer(self, index: int) -> int | None: ...

    def index_count(self) -> int: ...

    # ------------------------------------------------------------ sessions

    def install(self, pid: int, session: Session, now: float) -> None:
        """Rotation as WireGuard's; a responder's keypair waits in `next`
        until the first message on it confirms it."""
        ...

    def zero(self, pid: int) -> None:
        """Every keypair and reservation of the peer, wiped."""
        ...

    def maintain(self) -> None:
        """Frees keypairs a batch retired."""
        ...

    # ------------------------------------------------------------ AllowedIPs

    def route_add(self, pid: int, cidr: Any) -> None: ...

    def route_remove(self, pid: int, cidr: Any) -> bool: ...

    def routes_clear(self, pid: int) -> None: ...

    @overload
    def routes(self, pid: int, *, text: Literal[False] = False) -> list[Network]: ...

    @overload
    def routes(self, pid: int, *, text: Literal[True]) -> list[str]: ...

    def routes(self, pid: int, *, text: bool = False) -> list[Network] | list[str]:
        """The peer's AllowedIPs, as networks or as text."""
        ...

    def lookup(self, addr: str | bytes) -> int | None: ...

    # ------------------------------------------------------------ reading

    def stats(self, pid: int, now: float) -> PeerStats: ...

    def drops(self) -> dict[DropReason, int]:
        """The table's own drops (not a peer's), the reasons above 0."""
        ...

    # ------------------------------------------------------------ routing loops

    def set_listen_port(self, port: int) -> None:
        """The device's UDP port (0: no check): a packet from it to the
        endpoint of the peer it is routed to is refused as a routing loop."""
        ...

    @property
    def routing_loops(self) -> tuple[int, int]:
        """(packets refused as routing loops; the last peer one was refused
        for, or -1)."""
        ...

    # ------------------------------------------------------------ list form

    def open(self, datagrams: Iterable[tuple[bytes, Addr]], now: float) -> OpenResult:
        """Transport data opened; every other datagram gets a handshake
        message's cheap checks (sizes, mac1, under load mac2 with a cookie
        reply in OpenResult.replies and the per-source rate limit) and what
        passes waits in the handshake queue (OpenResult.queued)."""
        ...

    def seal(self, packets: Iterable[bytes], now: float, peer: int | None = None) -> SealResult: ...
