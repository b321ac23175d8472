"""WireGuard's constants, in one place for every layer: the message types
and sizes (the whitepaper, section 5.4), the transport overhead, the
interface MTU WireGuard uses by default, and the protocol's limits and times
(section 6.1, with wireguard-go's queue sizes).  Field offsets, packing and
parsing are vpncrypt.protocol.messages'; the timers that use the times,
vpncrypt.protocol.timers'."""

MSG_INITIATION = 1
MSG_RESPONSE = 2
MSG_COOKIE_REPLY = 3
MSG_TRANSPORT = 4

INITIATION_LEN = 148
RESPONSE_LEN = 92
COOKIE_REPLY_LEN = 64
HANDSHAKE_MAX = INITIATION_LEN  # the largest handshake message
TRANSPORT_HEADER_LEN = 16  # type, reserved, receiver index, counter
TAG_LEN = 16  # Poly1305
TRANSPORT_OVERHEAD = TRANSPORT_HEADER_LEN + TAG_LEN
KEEPALIVE_LEN = TRANSPORT_OVERHEAD  # a transport message with an empty payload

DEFAULT_MTU = 1420  # wg-quick's and the kernel module's default interface MTU

# The protocol's limits and times (whitepaper section 6.1)
REKEY_AFTER_MESSAGES = 2**60
REJECT_AFTER_MESSAGES = 2**64 - 2**13 - 1
REKEY_AFTER_TIME = 120.0
REJECT_AFTER_TIME = 180.0
REKEY_ATTEMPT_TIME = 90.0
REKEY_TIMEOUT = 5.0
REKEY_TIMEOUT_JITTER = 0.333  # at most this much is added to REKEY_TIMEOUT
KEEPALIVE_TIMEOUT = 10.0
COOKIE_SECRET_MAX_AGE = 120.0
COOKIE_SECRET_LATENCY = 5.0
INITIATIONS_PER_SECOND = 50  # from one peer, at most
# wireguard-go's sizes
MAX_STAGED_PACKETS = 128  # per peer, waiting for a handshake
HANDSHAKE_QUEUE_SIZE = 1024  # handshake messages waiting for the protocol core
UNDER_LOAD_AFTER_TIME = 1.0  # under load until this long after the queue was last deep
