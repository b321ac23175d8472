"""What the session table says about each message, and about each peer a
batch touched: native/vc_wg.h's VC_WG_* statuses (the Status IntEnum),
VC_WG_EV_* flags (plain int bits) and sizes (tests/transport/test_status_header.py
parses the header and checks every name and value here against it); both
backends use them.  DropReason names the table's drop reasons (DROP_NAMES,
by status) and those of the protocol core's counters
(vpncrypt.protocol.counters.DROP_REASONS, plain strings there) that the table
does not count; the daemon adds its own (socket_overflow, truncated, and the
fair queue's), which are in neither: docs/metrics.md lists them all."""

from enum import Enum, IntEnum, unique

from vpncrypt import wire


@unique
class Status(IntEnum):
    """VC_WG_*: what became of one datagram (open) or packet (seal)."""

    OK = 0
    HANDSHAKE = 1  # a handshake message that passed the cheap checks: queued
    KEEPALIVE = 2  # authenticated and empty
    UNKNOWN_INDEX = 3
    MALFORMED = 4
    BAD_TAG = 5
    REPLAY = 6
    NOT_ALLOWED = 7  # inner source address outside the peer's AllowedIPs
    NO_ROUTE = 8  # outgoing: no peer for the destination
    NO_KEY = 9  # outgoing: no usable sending key: queue it, start a handshake
    STALE_KEYPAIR = 10  # incoming: the receiving keypair is past REJECT_AFTER_TIME
    NO_ENDPOINT = 11  # outgoing: the peer has no endpoint
    TOO_BIG = 12  # outgoing: the sealed message would not fit its slot
    BAD_MAC1 = 13  # an initiation or response whose mac1 is not for our key
    COOKIE_SENT = 14  # under load without a valid mac2: answered with a cookie reply
    RATE_LIMITED = 15  # under load, over its source address's rate
    QUEUE_FULL = 16  # counts the oldest queued handshake message, dropped for a new one
    UNKNOWN_PEER = 17  # an initiation or response while the device has no private key
    PATH_MTU = 18  # outgoing: the sealed message exceeds the peer's path MTU


STATUS_COUNT = len(Status)  # VC_WG_STATUS_COUNT: the per-status drop arrays' length

OK = Status.OK
HANDSHAKE = Status.HANDSHAKE
KEEPALIVE = Status.KEEPALIVE
UNKNOWN_INDEX = Status.UNKNOWN_INDEX
MALFORMED = Status.MALFORMED
BAD_TAG = Status.BAD_TAG
REPLAY = Status.REPLAY
NOT_ALLOWED = Status.NOT_ALLOWED
NO_ROUTE = Status.NO_ROUTE
NO_KEY = Status.NO_KEY
STALE_KEYPAIR = Status.STALE_KEYPAIR
NO_ENDPOINT = Status.NO_ENDPOINT
TOO_BIG = Status.TOO_BIG
BAD_MAC1 = Status.BAD_MAC1
COOKIE_SENT = Status.COOKIE_SENT
RATE_LIMITED = Status.RATE_LIMITED
QUEUE_FULL = Status.QUEUE_FULL
UNKNOWN_PEER = Status.UNKNOWN_PEER
PATH_MTU = Status.PATH_MTU


@unique
class DropReason(str, Enum):
    """Every reason a message or packet is dropped and counted, by the name
    `vpncrypt show`, the UAPI's drops and the metrics'
    vpncrypt_drops_total{reason} print.  A member is its name as a str
    (equal, hashed, printed and formatted as it; Python 3.10 has no StrEnum)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    # the session table's, one per status that is a drop (DROP_NAMES)
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
    COOKIE_SENT = "cookie_sent"
    RATE_LIMITED = "rate_limited"
    HANDSHAKE_QUEUE_FULL = "handshake_queue_full"
    UNKNOWN_PEER = "unknown_peer"
    PACKET_TOO_BIG = "packet_too_big"  # larger than the peer's path MTU: answered with "packet too big"
    # the protocol core's (vpncrypt.protocol)
    QUEUE_FULL = "queue_full"  # a staged packet over MAX_STAGED_PACKETS
    STAGED_FLUSHED = "staged_flushed"  # staged packets flushed: the handshake gave up, or keys zeroed
    INTERNAL_ERROR = "internal_error"


# Drop counters by status (the statuses that are drops), as plain strings.
DROP_NAMES: dict[Status, str] = {
    Status.UNKNOWN_INDEX: DropReason.UNKNOWN_INDEX.value,
    Status.MALFORMED: DropReason.MALFORMED.value,
    Status.BAD_TAG: DropReason.BAD_TAG.value,
    Status.REPLAY: DropReason.REPLAY.value,
    Status.NOT_ALLOWED: DropReason.SOURCE_NOT_ALLOWED.value,
    Status.NO_ROUTE: DropReason.NO_ROUTE.value,
    Status.STALE_KEYPAIR: DropReason.STALE_KEYPAIR.value,
    Status.NO_ENDPOINT: DropReason.NO_ENDPOINT.value,
    Status.TOO_BIG: DropReason.TOO_BIG.value,
    Status.BAD_MAC1: DropReason.BAD_MAC1.value,
    Status.COOKIE_SENT: DropReason.COOKIE_SENT.value,
    Status.RATE_LIMITED: DropReason.RATE_LIMITED.value,
    Status.QUEUE_FULL: DropReason.HANDSHAKE_QUEUE_FULL.value,
    Status.UNKNOWN_PEER: DropReason.UNKNOWN_PEER.value,
    Status.PATH_MTU: DropReason.PACKET_TOO_BIG.value,
}
DROP_CODES: dict[str, Status] = {name: code for code, name in DROP_NAMES.items()}

# Per-peer flags of a batch (a touch): what the protocol's timers react to (VC_WG_EV_*).
EV_AUTH = 0x001  # an authenticated message arrived (data or keepalive)
EV_DATA = 0x002  # a non-empty one arrived
EV_CONFIRMED = 0x004  # the first message on `next` arrived: it is current now
EV_ROAMED = 0x008  # the endpoint moved to the source of authenticated data
EV_REKEY_RX = 0x010  # current is ours and older than rekey_on_receive
EV_SENT = 0x020  # something was sealed (data or keepalive)
EV_DATA_SENT = 0x040  # a non-empty packet was sealed
EV_REKEY_TX = 0x080  # current is past rekey_after_messages, or ours and past rekey_after_time
EV_NEED_KEY = 0x100  # a packet found no usable sending key
# what only restarts timers (data went in or out): the data plane may hand
# these to the Device a little later, merged per peer
EV_ROUTINE = EV_AUTH | EV_DATA | EV_SENT | EV_DATA_SENT

WINDOW = 8128  # VC_WG_WINDOW, the replay window: counters this far behind the greatest are still checked
HEADER = wire.TRANSPORT_HEADER_LEN  # VC_WG_HEADER
OVERHEAD = wire.TRANSPORT_OVERHEAD  # VC_WG_OVERHEAD: header + tag
HANDSHAKE_MAX = wire.HANDSHAKE_MAX  # VC_WG_HANDSHAKE_MAX: the largest handshake message (an initiation)
COOKIE_REPLY_LEN = wire.COOKIE_REPLY_LEN  # VC_WG_COOKIE_REPLY
LIST_SLOT = 65536 + 64  # the largest sealed message the list-form calls make (any IP packet fits)
