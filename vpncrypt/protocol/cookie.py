"""The sending side of WireGuard's DoS defence: mac1 and mac2 on our own
handshake messages, and the cookie a peer sent us.

mac1 = MAC(HASH("mac1----" || receiver static pub), msg[:mac1 offset])
mac2 = MAC(cookie, msg[:mac2 offset]) or zeros when the sender has no cookie.
cookie reply = XChaCha20-Poly1305(HASH("cookie--" || receiver static pub),
               24-byte random nonce, cookie, aad = mac1 of the message replied to)

The receiving side (checking mac1 and mac2, the cookie secret, the cookie
replies, the under-load state and the per-source rate limit) belongs to the
session table: native/wg_admit.c, and vpncrypt.transport.admission for the
reference table.
"""

from vpncrypt.protocol.noise import HASH, LABEL_COOKIE, LABEL_MAC1, MAC, AEADBackend
from vpncrypt.wire import COOKIE_REPLY_LEN

ZERO_MAC = bytes(16)


class CookieState:
    """The sending side, one per peer: adds mac1/mac2 to our handshake
    messages and keeps the cookie the peer last sent us."""

    __slots__ = ("mac1_key", "cookie_key", "cookie", "cookie_time", "last_mac1", "valid_for")

    def __init__(self, peer_public: bytes, valid_for: float = 115.0):
        self.mac1_key = HASH(LABEL_MAC1, peer_public)
        self.cookie_key = HASH(LABEL_COOKIE, peer_public)
        self.cookie: bytes | None = None
        self.cookie_time = 0.0
        self.last_mac1: bytes | None = None  # of the last handshake message sent
        self.valid_for = valid_for

    def __repr__(self) -> str:
        return f"<CookieState has_cookie={self.cookie is not None}>"

    def add_macs(self, body: bytes, now: float) -> bytes:
        mac1 = MAC(self.mac1_key, body)
        self.last_mac1 = mac1
        msg = body + mac1
        if self.cookie is not None and now - self.cookie_time < self.valid_for:
            return msg + MAC(self.cookie, msg)
        return msg + ZERO_MAC

    def consume_reply(self, reply: bytes, now: float, crypto: AEADBackend) -> bool:
        """Decrypt and store a cookie; False if it does not authenticate."""
        if self.last_mac1 is None or len(reply) != COOKIE_REPLY_LEN:
            return False
        try:
            cookie = crypto.xopen(self.cookie_key, reply[8:32], reply[32:64], self.last_mac1)
        except Exception:
            return False
        self.cookie = cookie
        self.cookie_time = now
        self.last_mac1 = None  # one cookie per message sent
        return True
