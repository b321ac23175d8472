"""What the session table says about each message, and about each peer a
batch touched: native/vc_wg.h's VC_WG_* statuses (the Status IntEnum),
VC_WG_EV_* flags (the TouchFlag IntFlag; EV_*, its values as plain ints)
and sizes (tests/transport/test_status_header.py parses the header and
checks every name and value here against it); both backends use them.
DROP_NAMES maps each status that is a drop to its
vpncrypt.drop_reasons.DropReason, the enum every layer names its drops by."""

from enum import IntEnum, IntFlag, unique

from vpncrypt import wire
from vpncrypt.drop_reasons import DropReason


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
    ROUTING_LOOP = 19  # outgoing: the device's own datagram to the peer's endpoint, routed back in


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
ROUTING_LOOP = Status.ROUTING_LOOP
PATH_MTU = Status.PATH_MTU


# The one table from C's result codes to drop reasons: the statuses that are drops.
DROP_NAMES: dict[Status, DropReason] = {
    Status.UNKNOWN_INDEX: DropReason.UNKNOWN_INDEX,
    Status.MALFORMED: DropReason.MALFORMED,
    Status.BAD_TAG: DropReason.BAD_TAG,
    Status.REPLAY: DropReason.REPLAY,
    Status.NOT_ALLOWED: DropReason.SOURCE_NOT_ALLOWED,
    Status.NO_ROUTE: DropReason.NO_ROUTE,
    Status.STALE_KEYPAIR: DropReason.STALE_KEYPAIR,
    Status.NO_ENDPOINT: DropReason.NO_ENDPOINT,
    Status.TOO_BIG: DropReason.TOO_BIG,
    Status.BAD_MAC1: DropReason.BAD_MAC1,
    Status.COOKIE_SENT: DropReason.COOKIE_SENT,
    Status.RATE_LIMITED: DropReason.RATE_LIMITED,
    Status.QUEUE_FULL: DropReason.HANDSHAKE_QUEUE_FULL,
    Status.UNKNOWN_PEER: DropReason.UNKNOWN_PEER,
    Status.ROUTING_LOOP: DropReason.ROUTING_LOOP,
    Status.PATH_MTU: DropReason.PACKET_TOO_BIG,
}
DROP_CODES: dict[DropReason, Status] = {name: code for code, name in DROP_NAMES.items()}


@unique
class TouchFlag(IntFlag):
    """VC_WG_EV_*: per-peer flags of a batch (a touch), what the protocol's
    timers react to.  A touch's flags arrive from C as a plain int, and the
    data path tests them against the EV_* names below, this enum's values as
    plain ints: an operation between an int and an IntFlag member is a
    Python-level call (15 us against 0.16 us for two ints, Python 3.11),
    and the data path makes several per peer per batch.  TouchFlag(flags)
    reads one as names (Touch's repr)."""

    AUTH = 0x001  # an authenticated message arrived (data or keepalive)
    DATA = 0x002  # a non-empty one arrived
    CONFIRMED = 0x004  # the first message on `next` arrived: it is current now
    ROAMED = 0x008  # the endpoint moved to the source of authenticated data
    REKEY_RX = 0x010  # current is ours and older than rekey_on_receive
    SENT = 0x020  # something was sealed (data or keepalive)
    DATA_SENT = 0x040  # a non-empty packet was sealed
    REKEY_TX = 0x080  # current is past rekey_after_messages, or ours and past rekey_after_time
    NEED_KEY = 0x100  # a packet found no usable sending key


EV_AUTH = TouchFlag.AUTH.value
EV_DATA = TouchFlag.DATA.value
EV_CONFIRMED = TouchFlag.CONFIRMED.value
EV_ROAMED = TouchFlag.ROAMED.value
EV_REKEY_RX = TouchFlag.REKEY_RX.value
EV_SENT = TouchFlag.SENT.value
EV_DATA_SENT = TouchFlag.DATA_SENT.value
EV_REKEY_TX = TouchFlag.REKEY_TX.value
EV_NEED_KEY = TouchFlag.NEED_KEY.value
# what only restarts timers (data went in or out): the data plane may hand
# these to the Device a little later, merged per peer
EV_ROUTINE = EV_AUTH | EV_DATA | EV_SENT | EV_DATA_SENT

WINDOW = 8128  # VC_WG_WINDOW, the replay window: counters this far behind the greatest are still checked
HEADER = wire.TRANSPORT_HEADER_LEN  # VC_WG_HEADER
OVERHEAD = wire.TRANSPORT_OVERHEAD  # VC_WG_OVERHEAD: header + tag
HANDSHAKE_MAX = wire.HANDSHAKE_MAX  # VC_WG_HANDSHAKE_MAX: the largest handshake message (an initiation)
COOKIE_REPLY_LEN = wire.COOKIE_REPLY_LEN  # VC_WG_COOKIE_REPLY
LIST_SLOT = 65536 + 64  # the largest sealed message the list-form calls make (any IP packet fits)
