"""What the UAPI server (and the SIGHUP reload) needs from the running device.

The daemon implements Control on top of vpncrypt.protocol.Device; tests use
an in-memory fake. All methods but prepare() are called from the event loop
thread and must not block for long. To report a failure with a specific
errno (e.g. the new listen port is in use) raise ControlError(errno.EADDRINUSE,
"...") or an OSError; anything else is answered with -EIO.

Big requests are served in steps, so that the event loop (which carries the
data plane) is never held for long: prepare() checks a whole request before
any of it is applied (off the loop), upsert_peer_steps() applies one peer in
pieces and snapshot_parts() reads the device in pieces.  The defaults do
each at once; a Control over a big device overrides them.
"""

from __future__ import annotations

import abc
import errno as _errno
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from ..config.ops import IPInterface, Operation, PeerUpdate
from ..endpoints import Endpoint


class ControlError(Exception):
    def __init__(self, errno: int, message: str = ""):
        super().__init__(message or _errno.errorcode.get(errno, str(errno)))
        self.errno = errno


@dataclass(slots=True)  # a get of 50,000 peers makes 50,000
class PeerSnapshot:
    public_key: bytes
    preshared_key: Optional[bytes] = None  # None or all-zero: no PSK
    endpoint: Endpoint | tuple[Any, ...] | str | None = (
        None  # None, Endpoint, "host:port" or (host, port[, ...])
    )
    persistent_keepalive: int = 0  # seconds, 0 = off
    allowed_ips: Sequence[Any] = ()  # ip_network objects, or their str() (as the table lists them)
    last_handshake_time_sec: int = 0  # wall clock (Unix time); 0 = never
    last_handshake_time_nsec: int = 0
    rx_bytes: int = 0
    tx_bytes: int = 0
    protocol_version: int = 1


@dataclass
class InterfaceSnapshot:
    private_key: Optional[bytes] = None
    listen_port: int = 0
    fwmark: int = 0
    peers: Sequence[PeerSnapshot] = ()
    # vpncrypt extras (drop counters etc.), reported as vpncrypt_<name>=N
    # only on the `get=vpncrypt` request (or when the server enables them).
    counters: Mapping[str, int] = field(default_factory=dict)
    # vpncrypt extras that are words, not numbers (the crypto kernels), as
    # vpncrypt_info_<name>=<word> on the same requests
    info: Mapping[str, str] = field(default_factory=dict)
    # the peers' Endpoint names that are followed, on the same requests:
    # vpncrypt_endpoint_name=PUBLIC_KEY_HEX STATE RESOLVED NEXT_TRY NAME
    endpoint_names: Sequence[str] = ()
    # the path MTU learned for a peer's endpoint, for the peers that have
    # one, on the same requests: vpncrypt_path_mtu=PUBLIC_KEY_HEX MTU
    path_mtus: Sequence[str] = ()


# what snapshot_parts() yields: the head, then lists of peers
SnapshotPart = Union[InterfaceSnapshot, list[PeerSnapshot]]


class Control(abc.ABC):
    """The device as the UAPI sees it."""

    # True while the UAPI server applies a request in slices: another
    # change (apply_operations: the SIGHUP reload) is refused with EBUSY
    # rather than mixed into it.
    busy = False

    @abc.abstractmethod
    def snapshot(self) -> InterfaceSnapshot: ...

    def snapshot_parts(self, *, counters: bool = True) -> Iterator[SnapshotPart]:
        """The snapshot in parts, with room for other work in between: first
        an InterfaceSnapshot without peers, then lists of PeerSnapshot (as
        many as it takes).  With ``counters``, the first part's counters
        and info are filled in by the time the iteration ends."""
        snap = self.snapshot()
        head = replace(snap, peers=())
        yield head
        yield list(snap.peers)

    def prepare(self, ops: list[Operation]) -> list[Operation]:
        """Check a whole request against the device before any of it is
        applied, and return the operations to apply (the same, or with what
        was looked up resolved: endpoints).  Raise ControlError or OSError
        to refuse the request.  Runs on a worker thread: it may only read
        the device, never change it."""
        return list(ops)

    def upsert_peer_steps(self, update: PeerUpdate) -> Iterator[None]:
        """upsert_peer() in steps: yields between pieces of work, where the
        caller may let the event loop run (no other request is applied in
        between).  The default does it all in one step."""
        self.upsert_peer(update)
        yield

    @abc.abstractmethod
    def set_private_key(self, key: Optional[bytes]) -> None:
        """Set the static private key; None removes it."""

    @abc.abstractmethod
    def set_listen_port(self, port: int) -> None:
        """Rebind the UDP socket(s); 0 = random port."""

    @abc.abstractmethod
    def set_fwmark(self, fwmark: int) -> None:
        """Set SO_MARK on the UDP socket(s); 0 = none."""

    @abc.abstractmethod
    def replace_peers(self) -> None:
        """Remove every peer."""

    @abc.abstractmethod
    def has_peer(self, public_key: bytes) -> bool: ...

    @abc.abstractmethod
    def remove_peer(self, public_key: bytes) -> None:
        """Remove one peer; no error if it does not exist."""

    @abc.abstractmethod
    def upsert_peer(self, update: PeerUpdate) -> None:
        """Create the peer if needed, then apply the non-None fields of
        ``update`` (see PeerUpdate). ``update.update_only`` has already been
        handled by the caller."""

    # Only needed for config reloads (wg-quick extras); not used by the UAPI.
    def set_mtu(self, mtu: int) -> None:
        raise ControlError(_errno.EOPNOTSUPP, "changing the MTU is not supported")

    def set_addresses(self, add: Iterable[IPInterface], remove: Iterable[IPInterface]) -> None:
        raise ControlError(_errno.EOPNOTSUPP, "changing addresses is not supported")
