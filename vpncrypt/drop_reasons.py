"""DropReason: every reason anything in vpncrypt drops a message or a packet
and counts it, whichever layer counts it (the session table in C, the
protocol core, the data plane's sockets and its fair queue).  It is the only
way a layer names a drop: each member's value is the name `vpncrypt show`
prints under `drops:`, the UAPI's `get=vpncrypt` serves as
`vpncrypt_drop_NAME=N` and the metrics as vpncrypt_drops_total{reason="NAME"}.

To add a reason: one member here (its value is the printed name, so pick it
for good) and one row in docs/metrics.md's "Drop reasons" table
(tests/test_docs.py checks both ways); the counters list it at 0 from the
start.  A reason the session table counts in C also gets a status in
vpncrypt.transport.status (Status and DROP_NAMES, the one table from C's
result codes to these)."""

from enum import Enum, unique


@unique
class DropReason(str, Enum):
    """A member is its name as a str (equal, hashed, printed and formatted as
    it): enum.StrEnum's behaviour, which Python 3.10 does not have."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    # the session table's (vpncrypt.transport.status.DROP_NAMES: one per status that is a drop)
    UNKNOWN_INDEX = "unknown_index"
    MALFORMED = "malformed"
    BAD_TAG = "bad_tag"
    REPLAY = "replay"
    SOURCE_NOT_ALLOWED = "source_not_allowed"
    NO_ROUTE = "no_route"
    STALE_KEYPAIR = "stale_keypair"  # a datagram on a keypair past REJECT_AFTER_TIME
    NO_ENDPOINT = "no_endpoint"
    TOO_BIG = "too_big"
    BAD_MAC1 = "bad_mac1"
    COOKIE_SENT = "cookie_sent"  # served by the metrics as vpncrypt_cookie_replies_sent_total
    RATE_LIMITED = "rate_limited"
    HANDSHAKE_QUEUE_FULL = "handshake_queue_full"
    UNKNOWN_PEER = "unknown_peer"
    ROUTING_LOOP = "routing_loop"  # our own datagram to the peer, read back from the TUN
    PACKET_TOO_BIG = "packet_too_big"  # above the peer's path MTU: the sender told, or the packet cut to fit
    # the protocol core's (vpncrypt.protocol), besides some of the above
    QUEUE_FULL = "queue_full"  # a staged packet over MAX_STAGED_PACKETS
    STAGED_FLUSHED = "staged_flushed"  # staged packets flushed: the handshake gave up, or keys zeroed
    INTERNAL_ERROR = "internal_error"
    # the data plane's UDP sockets (vpncrypt.daemon.data_plane)
    SOCKET_OVERFLOW = "socket_overflow"  # the kernel's count: the receive buffer was full
    TRUNCATED = "truncated"  # a datagram longer than a receive slot
    # the fair queue's, with --fair-queue only (vpncrypt.dataplane.engine.FAIR_QUEUE_DROPS)
    AQM = "aqm"  # CoDel on a receiving socket
    FQ_CODEL = "fq_codel"  # CoDel in the send side's fair queue
    FQ_OVERFLOW = "fq_overflow"  # the fair queue's byte or packet cap
    FQ_TOO_BIG = "fq_too_big"  # longer than the TUN's slot, or no IP packet at all
    FQ_NOMEM = "fq_nomem"  # no memory for the packet's buffer
