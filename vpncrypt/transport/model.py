"""The values that cross the session table's interface, the same for both
backends: its configuration, what a batch call returns, and a peer's stats."""

from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeAlias

from vpncrypt import wire
from vpncrypt.drop_reasons import DropReason


Addr: TypeAlias = tuple[Any, ...]  # (host, port[, flowinfo, scope_id]), as the socket layer has it
Datagram: TypeAlias = tuple[bytes, Addr]


@dataclass(frozen=True)
class TableConfig:
    """WireGuard's session limits (vpncrypt.wire: the whitepaper's section 6
    and wireguard-go's queue sizes); tests pass shorter times."""

    reject_after_time: float = wire.REJECT_AFTER_TIME
    rekey_after_time: float = wire.REKEY_AFTER_TIME
    # the initiator rekeys on receive from this age, before the keypair expires
    rekey_on_receive_age: float = wire.REJECT_AFTER_TIME - wire.KEEPALIVE_TIMEOUT - wire.REKEY_TIMEOUT
    reject_after_messages: int = wire.REJECT_AFTER_MESSAGES
    rekey_after_messages: int = wire.REKEY_AFTER_MESSAGES
    mtu: int = wire.DEFAULT_MTU  # the padding cap (0: none)
    # handshake messages (wireguard-go's values; see native/vc_wg.h)
    handshake_queue: int = wire.HANDSHAKE_QUEUE_SIZE  # messages waiting for the protocol core at most
    # the table's own (wireguard-go's device/constants.go and ratelimiter.go; wire.py has no home
    # for them yet)
    under_load_depth: int = 128  # this many waiting put the device under load
    under_load_hold: float = wire.UNDER_LOAD_AFTER_TIME  # ... until this long after the last time it was so
    cookie_secret_age: float = wire.COOKIE_SECRET_MAX_AGE  # the cookie secret is replaced at this age
    ratelimit_rate: float = 20.0  # under load: messages per second per source address
    ratelimit_burst: int = 5
    ratelimit_sources: int = 65536  # source addresses the limiter tracks at most

    def __post_init__(self) -> None:
        for name in ("reject_after_time", "rekey_after_time", "rekey_on_receive_age"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        if not 0 < self.reject_after_messages < 2**64 or not 0 < self.rekey_after_messages < 2**64:
            raise ValueError("message limits must be in (0, 2^64)")
        if not 0 <= self.mtu <= 65535:
            raise ValueError("mtu must be in 0..65535")
        if not 1 <= self.handshake_queue <= 65536 or self.under_load_depth < 1:
            raise ValueError("handshake_queue must be in 1..65536 and under_load_depth >= 1")
        if not 1 <= self.ratelimit_sources <= 1 << 24:
            raise ValueError("ratelimit_sources must be in 1..2^24")
        for name in ("under_load_hold", "cookie_secret_age", "ratelimit_rate"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be > 0")
        if not 1 <= self.ratelimit_burst < float("inf"):
            raise ValueError("ratelimit_burst must be >= 1")


class Session(NamedTuple):
    """What a completed handshake gives the session table (table.install):
    the keypair's indices, its keys and our role."""

    local_index: int
    remote_index: int
    send_key: bytes
    recv_key: bytes
    initiator: bool


class Touch(NamedTuple):
    """What one batch call did to one peer: EV_* flags, and how many messages
    (authenticated when opening, sealed when sealing) with their wire bytes."""

    peer: int
    flags: int
    packets: int
    bytes: int

    def __repr__(self) -> str:
        from vpncrypt.transport.status import TouchFlag

        flags = TouchFlag(self.flags)
        return f"Touch(peer={self.peer}, flags={flags!r}, packets={self.packets}, bytes={self.bytes})"


@dataclass
class OpenResult:
    status: list[int]  # per datagram
    packets: list[bytes]  # inner packets to deliver, in order
    replies: list[Datagram]  # [(cookie reply bytes, endpoint)] made under load
    queued: int  # handshake messages that went into the handshake queue
    touched: list[Touch]


@dataclass
class SealResult:
    status: list[int]  # per packet
    peers: list[int]  # per packet: the peer it routed to, or -1
    datagrams: list[Datagram]  # [(message bytes, endpoint)] in the order sealed
    touched: list[Touch]


@dataclass(frozen=True)
class KeypairInfo:
    local_index: int
    remote_index: int
    initiator: bool
    age: float
    send_counter: int
    greatest_received: int
    usable: bool  # current only: it would seal now


@dataclass
class PeerStats:
    rx_bytes: int = 0  # inner bytes delivered
    rx_packets: int = 0
    tx_bytes: int = 0  # inner bytes sealed
    tx_packets: int = 0
    rx_wire_bytes: int = 0  # whole transport datagrams (what `wg show` counts)
    tx_wire_bytes: int = 0
    drops: dict[DropReason, int] = field(default_factory=dict)
    last_rx: float = 0.0  # table time
    last_tx: float = 0.0
    endpoint: Addr | None = None
    current: KeypairInfo | None = None
    previous: KeypairInfo | None = None
    next: KeypairInfo | None = None
    path_mtu: int = 0  # the outer path MTU learned for the endpoint (0: none known; native table)
    inner_mtu: int = 0  # the largest inner packet that fits it (0: none known)
