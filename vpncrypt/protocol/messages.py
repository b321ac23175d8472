"""WireGuard wire formats: field offsets, sizes, pack and parse.

All integers are little-endian.  Every message starts with a 1-byte type and
3 reserved zero bytes, which is the same as a 32-bit little-endian type word.

    initiation   (type 1, 148 bytes) type|rsv|sender|ephemeral 32|static 32+16|
                                    timestamp 12+16|mac1 16|mac2 16
    response     (type 2,  92 bytes) type|rsv|sender|receiver|ephemeral 32|
                                    empty 0+16|mac1 16|mac2 16
    cookie reply (type 3,  64 bytes) type|rsv|receiver|nonce 24|cookie 16+16
    transport    (type 4, >=32 bytes) type|rsv|receiver|counter 8|sealed packet
"""

from dataclasses import dataclass

from vpncrypt.wire import COOKIE_REPLY_LEN as COOKIE_REPLY_LEN
from vpncrypt.wire import INITIATION_LEN as INITIATION_LEN
from vpncrypt.wire import KEEPALIVE_LEN as KEEPALIVE_LEN
from vpncrypt.wire import MSG_COOKIE_REPLY as MSG_COOKIE_REPLY
from vpncrypt.wire import MSG_INITIATION as MSG_INITIATION
from vpncrypt.wire import MSG_RESPONSE as MSG_RESPONSE
from vpncrypt.wire import MSG_TRANSPORT as MSG_TRANSPORT
from vpncrypt.wire import RESPONSE_LEN as RESPONSE_LEN
from vpncrypt.wire import TRANSPORT_HEADER_LEN as TRANSPORT_HEADER_LEN

HDR_INITIATION = b"\x01\x00\x00\x00"
HDR_RESPONSE = b"\x02\x00\x00\x00"
HDR_COOKIE_REPLY = b"\x03\x00\x00\x00"
HDR_TRANSPORT = b"\x04\x00\x00\x00"

TRANSPORT_MIN_LEN = KEEPALIVE_LEN  # header + tag (an empty keepalive)

# (start, end) of each field
INIT_SENDER = (4, 8)
INIT_EPHEMERAL = (8, 40)
INIT_STATIC = (40, 88)
INIT_TIMESTAMP = (88, 116)
INIT_MAC1 = (116, 132)
INIT_MAC2 = (132, 148)

RESP_SENDER = (4, 8)
RESP_RECEIVER = (8, 12)
RESP_EPHEMERAL = (12, 44)
RESP_EMPTY = (44, 60)
RESP_MAC1 = (60, 76)
RESP_MAC2 = (76, 92)

COOKIE_RECEIVER = (4, 8)
COOKIE_NONCE = (8, 32)
COOKIE_COOKIE = (32, 64)

DATA_RECEIVER = (4, 8)
DATA_COUNTER = (8, 16)

MAC1_OFFSET = {MSG_INITIATION: INIT_MAC1[0], MSG_RESPONSE: RESP_MAC1[0]}

# What classify() calls a datagram that is no handshake message or keepalive.
MALFORMED = 0
KEEPALIVE = 5  # not a type on the wire: a transport message with an empty payload
DATA = -1  # transport data with a payload (never traced)
_SIZES = {MSG_INITIATION: INITIATION_LEN, MSG_RESPONSE: RESPONSE_LEN, MSG_COOKIE_REPLY: COOKIE_REPLY_LEN}
_ZERO3 = b"\0\0\0"


def classify(data: bytes | memoryview, start: int = 0, size: int | None = None) -> int:
    """What the datagram data[start:start + size] is by its type and size
    alone (nothing is decrypted): a MSG_* handshake type, KEEPALIVE, DATA,
    or MALFORMED.  A message is its type byte, three zero bytes and its
    type's exact size (transport: any size from a keepalive's up)."""
    if size is None:
        size = len(data) - start
    if size < 4 or data[start + 1 : start + 4] != _ZERO3:
        return MALFORMED
    kind = data[start]
    if kind == MSG_TRANSPORT:
        if size == KEEPALIVE_LEN:
            return KEEPALIVE
        return DATA if size > KEEPALIVE_LEN else MALFORMED
    return kind if _SIZES.get(kind) == size else MALFORMED


class MalformedMessage(ValueError):
    pass


def _u32(b: bytes) -> int:
    return int.from_bytes(b, "little")


def message_type(data: bytes) -> int:
    """The message type, or 0 if the 4-byte type word is not one we know."""
    head = bytes(data[:4])
    if head == HDR_TRANSPORT:
        return MSG_TRANSPORT
    if head == HDR_INITIATION:
        return MSG_INITIATION
    if head == HDR_RESPONSE:
        return MSG_RESPONSE
    if head == HDR_COOKIE_REPLY:
        return MSG_COOKIE_REPLY
    return 0


@dataclass(slots=True)
class Initiation:
    sender: int
    ephemeral: bytes
    static: bytes
    timestamp: bytes
    mac1: bytes
    mac2: bytes


@dataclass(slots=True)
class Response:
    sender: int
    receiver: int
    ephemeral: bytes
    empty: bytes
    mac1: bytes
    mac2: bytes


@dataclass(slots=True)
class CookieReply:
    receiver: int
    nonce: bytes
    cookie: bytes


def pack_initiation_body(sender: int, ephemeral: bytes, static: bytes, timestamp: bytes) -> bytes:
    """The first 116 bytes (everything before mac1)."""
    assert len(ephemeral) == 32 and len(static) == 48 and len(timestamp) == 28
    return HDR_INITIATION + sender.to_bytes(4, "little") + ephemeral + static + timestamp


def pack_response_body(sender: int, receiver: int, ephemeral: bytes, empty: bytes) -> bytes:
    """The first 60 bytes (everything before mac1)."""
    assert len(ephemeral) == 32 and len(empty) == 16
    return HDR_RESPONSE + sender.to_bytes(4, "little") + receiver.to_bytes(4, "little") + ephemeral + empty


def pack_cookie_reply(receiver: int, nonce: bytes, cookie: bytes) -> bytes:
    assert len(nonce) == 24 and len(cookie) == 32
    return HDR_COOKIE_REPLY + receiver.to_bytes(4, "little") + nonce + cookie


def pack_transport_header(receiver: int, counter: int) -> bytes:
    return HDR_TRANSPORT + receiver.to_bytes(4, "little") + counter.to_bytes(8, "little")


def parse_initiation(data: bytes) -> Initiation:
    if len(data) != INITIATION_LEN or bytes(data[:4]) != HDR_INITIATION:
        raise MalformedMessage("not a handshake initiation")
    d = bytes(data)
    return Initiation(_u32(d[4:8]), d[8:40], d[40:88], d[88:116], d[116:132], d[132:148])


def parse_response(data: bytes) -> Response:
    if len(data) != RESPONSE_LEN or bytes(data[:4]) != HDR_RESPONSE:
        raise MalformedMessage("not a handshake response")
    d = bytes(data)
    return Response(_u32(d[4:8]), _u32(d[8:12]), d[12:44], d[44:60], d[60:76], d[76:92])


def parse_cookie_reply(data: bytes) -> CookieReply:
    if len(data) != COOKIE_REPLY_LEN or bytes(data[:4]) != HDR_COOKIE_REPLY:
        raise MalformedMessage("not a cookie reply")
    d = bytes(data)
    return CookieReply(_u32(d[4:8]), d[8:32], d[32:64])


def parse_transport(data: bytes) -> tuple[int, int, bytes]:
    """(receiver index, counter, sealed payload)."""
    if len(data) < TRANSPORT_MIN_LEN or bytes(data[:4]) != HDR_TRANSPORT:
        raise MalformedMessage("not a transport data message")
    return _u32(data[4:8]), int.from_bytes(data[8:16], "little"), bytes(data[16:])
