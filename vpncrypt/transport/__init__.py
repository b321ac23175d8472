"""vpncrypt.transport: WireGuard's transport data and the session table that
owns it.

The session table is the one place that holds each session's keys, sending
counter, replay window and birth time, the padding rule and message limits,
each peer's endpoint and the AllowedIPs routing table, and for handshake
messages the cookie secret, the under-load state, the per-source rate
limiter and the bounded handshake queue.  The protocol core
(vpncrypt.protocol) drives it through this interface (typed as the Protocol
table_contract.SessionTable, which both backends satisfy) and keeps no copy:

    table = new_table("native" | "pynacl", TableConfig(...))
    table.configure(config); table.config
    table.clock(now) -> the device's clock (never runs backwards); clock_offset()
        every other call takes `now` on this clock
    table.add_peer() -> peer id; remove_peer(id); peer_count()
    table.set_endpoint(id, addr | None); endpoint(id)
    table.reserve_index(index, id) -> bool; release_index(index); index_peer(index);
        index_count()
    table.install(id, Session(local_index, remote_index, send_key, recv_key, initiator), now)
        (rotation as WireGuard; a responder's keypair waits in `next` until the
        first message on it confirms it)
    table.zero(id)          every keypair and reservation of the peer, wiped
    table.maintain()        frees keypairs a batch retired
    table.route_add(id, cidr); route_remove(id, cidr) -> bool; routes_clear(id);
        routes(id, text=False) -> [ip_network] (or [str]); lookup(address) -> id | None
    table.stats(id, now) -> PeerStats; drops() -> {reason: n}
    table.open([(datagram, addr)], now) -> OpenResult
        transport data opened; every other datagram gets the cheap checks of
        a handshake message (sizes, mac1, under load mac2 with a cookie reply
        in OpenResult.replies and the per-source rate limit) and what passes
        waits in the handshake queue (OpenResult.queued)
    table.seal([packet], now, peer=None) -> SealResult
    table.set_public_key(public | None)    mac1 and cookie replies are keyed by it
    table.seed(32 bytes)    the cookie generator (seeded from the system otherwise)
    table.take_handshakes(limit) -> [(message, addr)], newest first
    table.handshakes_waiting(now) -> (how many wait, under load)

A sending counter only ever moves forward: nothing can set it.  Two backends
make the same decisions on the same input: "native" (native/wg_*.c; also a
zero-copy Batch form for the data plane) and "pynacl" (pure Python over
libsodium, the reference).
"""

from vpncrypt.transport import status
from vpncrypt.transport.model import KeypairInfo, OpenResult, PeerStats, SealResult, Session, TableConfig
from vpncrypt.transport.model import Touch
from vpncrypt.transport.table_contract import SessionTable

__all__ = [
    "new_table",
    "backends",
    "SessionTable",
    "TableConfig",
    "Touch",
    "Session",
    "OpenResult",
    "SealResult",
    "PeerStats",
    "KeypairInfo",
    "status",
]


def backends() -> list[str]:
    return ["native", "pynacl"]


def new_table(backend: str = "native", config: TableConfig | None = None) -> SessionTable:
    """A session table on `backend`: "native" or "pynacl" (mypy checks each
    against SessionTable here)."""
    if backend == "native":
        from vpncrypt.transport.native import NativeTable

        return NativeTable(config)
    if backend == "pynacl":
        from vpncrypt.transport.reference import ReferenceTable

        return ReferenceTable(config)
    raise ValueError(f"unknown session table backend {backend!r}; choose from {backends()}")
