"""What the session table says about each message, and about each peer a
batch touched.  The numbers are native/vc_wg.h's; both backends use them."""

OK = 0
HANDSHAKE = 1       # a handshake message that passed the cheap checks: queued
KEEPALIVE = 2       # authenticated and empty
UNKNOWN_INDEX = 3
MALFORMED = 4
BAD_TAG = 5
REPLAY = 6
NOT_ALLOWED = 7     # inner source address outside the peer's AllowedIPs
NO_ROUTE = 8        # outgoing: no peer for the destination
NO_KEY = 9          # outgoing: no usable sending key: queue it, start a handshake
EXPIRED = 10        # incoming: the receiving keypair is past REJECT_AFTER_TIME
NO_ENDPOINT = 11    # outgoing: the peer has no endpoint
TOO_BIG = 12        # outgoing: the sealed message would not fit its slot
BAD_MAC1 = 13       # an initiation or response whose mac1 is not for our key
COOKIE_SENT = 14    # under load without a valid mac2: answered with a cookie reply
RATE_LIMITED = 15   # under load, over its source address's rate
QUEUE_FULL = 16     # counts the oldest queued handshake message, dropped for a new one
UNKNOWN_PEER = 17   # an initiation or response while the device has no private key
STATUS_COUNT = 18

# Drop counters by status (the statuses that are drops).
DROP_NAMES = {
    UNKNOWN_INDEX: "unknown_index", MALFORMED: "malformed", BAD_TAG: "bad_tag",
    REPLAY: "replay", NOT_ALLOWED: "source_not_allowed", NO_ROUTE: "no_route",
    EXPIRED: "expired", NO_ENDPOINT: "no_endpoint", TOO_BIG: "too_big",
    BAD_MAC1: "bad_mac1", COOKIE_SENT: "cookie_sent", RATE_LIMITED: "rate_limited",
    QUEUE_FULL: "handshake_queue_full", UNKNOWN_PEER: "unknown_peer",
}
DROP_CODES = {name: code for code, name in DROP_NAMES.items()}

# Per-peer flags of a batch (a touch): what the protocol's timers react to.
EV_AUTH = 0x001         # an authenticated message arrived (data or keepalive)
EV_DATA = 0x002         # a non-empty one arrived
EV_CONFIRMED = 0x004    # the first message on `next` arrived: it is current now
EV_ROAMED = 0x008       # the endpoint moved to the source of authenticated data
EV_REKEY_RX = 0x010     # current is ours and older than rekey_on_receive
EV_SENT = 0x020         # something was sealed (data or keepalive)
EV_DATA_SENT = 0x040    # a non-empty packet was sealed
EV_REKEY_TX = 0x080     # current is past rekey_after_messages, or ours and past rekey_after_time
EV_NEED_KEY = 0x100     # a packet found no usable sending key
# what only restarts timers (data went in or out): the data plane may hand
# these to the Device a little later, merged per peer
EV_ROUTINE = EV_AUTH | EV_DATA | EV_SENT | EV_DATA_SENT

WINDOW = 8128           # replay window: counters this far behind the greatest are still checked
HEADER = 16
OVERHEAD = 32           # header + tag
HANDSHAKE_MAX = 148     # the largest handshake message (an initiation)
COOKIE_REPLY_LEN = 64
LIST_SLOT = 65536 + 64   # the largest sealed message the list-form calls make (any IP packet fits)
