"""DoS defence: mac1/mac2, cookie replies, the rotating cookie secret, the
under-load detector and the per-source token-bucket rate limiter.

mac1 = MAC(HASH("mac1----" || receiver static pub), msg[:mac1 offset])
cookie = MAC(secret, source address bytes); the secret rotates every 2 min.
mac2 = MAC(cookie, msg[:mac2 offset]) or zeros when the sender has no cookie.
cookie reply = XChaCha20-Poly1305(HASH("cookie--" || receiver static pub),
               24-byte random nonce, cookie, aad = mac1 of the message replied to)
"""
import hmac
import ipaddress
import os

from vpncrypt.protocol.messages import COOKIE_REPLY_LEN, pack_cookie_reply
from vpncrypt.protocol.noise import HASH, LABEL_COOKIE, LABEL_MAC1, MAC

_compare = hmac.compare_digest
ZERO_MAC = bytes(16)


def addr_bytes(addr) -> bytes:
    """Bytes that identify a source for the cookie: IP bytes + big-endian port
    for (host, port, ...) tuples, else the repr of the opaque endpoint."""
    if isinstance(addr, tuple) and len(addr) >= 2 and isinstance(addr[1], int):
        try:
            return ipaddress.ip_address(addr[0]).packed + (addr[1] & 0xFFFF).to_bytes(2, "big")
        except ValueError:
            pass
    return repr(addr).encode()


def addr_host(addr):
    """The rate-limiter key of a source: the host part of a (host, port) tuple."""
    if isinstance(addr, tuple) and addr:
        return addr[0]
    return addr


class CookieChecker:
    """The receiving side: verifies mac1/mac2 and makes cookie replies."""

    def __init__(self, public_key: bytes, crypto, rng=os.urandom,
                 max_age: float = 120.0):
        self.crypto = crypto
        self.rng = rng
        self.max_age = max_age
        self._secret = None
        self._secret_time = 0.0
        self.set_public_key(public_key)

    def __repr__(self):
        return "<CookieChecker>"

    def set_public_key(self, public_key: bytes) -> None:
        self.mac1_key = HASH(LABEL_MAC1, public_key)
        self.cookie_key = HASH(LABEL_COOKIE, public_key)

    def secret(self, now: float) -> bytes:
        if self._secret is None or now - self._secret_time >= self.max_age:
            self._secret = self.rng(32)
            self._secret_time = now
        return self._secret

    def check_mac1(self, msg: bytes, mac1_off: int) -> bool:
        return _compare(MAC(self.mac1_key, msg[:mac1_off]), msg[mac1_off:mac1_off + 16])

    def cookie(self, src: bytes, now: float) -> bytes:
        return MAC(self.secret(now), src)

    def check_mac2(self, msg: bytes, mac1_off: int, src: bytes, now: float) -> bool:
        mac2_off = mac1_off + 16
        expect = MAC(self.cookie(src, now), msg[:mac2_off])
        return _compare(expect, msg[mac2_off:mac2_off + 16])

    def make_reply(self, msg: bytes, mac1_off: int, sender_index: int, src: bytes, now: float) -> bytes:
        nonce = self.rng(24)
        mac1 = msg[mac1_off:mac1_off + 16]
        sealed = self.crypto.xseal(self.cookie_key, nonce, self.cookie(src, now), mac1)
        return pack_cookie_reply(sender_index, nonce, sealed)


class CookieState:
    """The sending side, one per peer: adds mac1/mac2 to our handshake
    messages and keeps the cookie the peer last sent us."""

    __slots__ = ("mac1_key", "cookie_key", "cookie", "cookie_time", "last_mac1", "valid_for")

    def __init__(self, peer_public: bytes, valid_for: float = 115.0):
        self.mac1_key = HASH(LABEL_MAC1, peer_public)
        self.cookie_key = HASH(LABEL_COOKIE, peer_public)
        self.cookie = None
        self.cookie_time = 0.0
        self.last_mac1 = None
        self.valid_for = valid_for

    def __repr__(self):
        return f"<CookieState has_cookie={self.cookie is not None}>"

    def add_macs(self, body: bytes, now: float) -> bytes:
        mac1 = MAC(self.mac1_key, body)
        self.last_mac1 = mac1
        msg = body + mac1
        if self.cookie is not None and now - self.cookie_time < self.valid_for:
            return msg + MAC(self.cookie, msg)
        return msg + ZERO_MAC

    def consume_reply(self, reply: bytes, now: float, crypto) -> bool:
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


class RateLimiter:
    """Token bucket per source: `rate` handshakes per second, burst `burst`.
    The table holds at most `max_entries` sources; idle sources are pruned."""

    def __init__(self, rate: float = 20.0, burst: int = 5, max_entries: int = 65536):
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_entries = max_entries
        self.table = {}  # key -> [tokens, last time]
        self._last_prune = 0.0

    def allow(self, key, now: float) -> bool:
        entry = self.table.get(key)
        if entry is None:
            if len(self.table) >= self.max_entries:
                self.prune(now)
                if len(self.table) >= self.max_entries:
                    return False
            self.table[key] = [self.burst - 1.0, now]
            return True
        tokens = min(self.burst, entry[0] + (now - entry[1]) * self.rate)
        entry[1] = now
        if tokens >= 1.0:
            entry[0] = tokens - 1.0
            return True
        entry[0] = tokens
        return False

    def prune(self, now: float) -> None:
        """Forget sources whose bucket has refilled (idle long enough)."""
        full = self.burst / self.rate
        self.table = {k: e for k, e in self.table.items() if now - e[1] < full}
        self._last_prune = now

    def maybe_prune(self, now: float, every: float = 1.0) -> None:
        if now - self._last_prune >= every:
            self.prune(now)


class LoadDetector:
    """Under load, as wireguard-go decides it: at least `depth` handshake
    messages are waiting to be processed (an eighth of its handshake queue),
    and for `hold` seconds after the last time that was so.  Unlike a rate,
    the queue depth follows what this machine can process: a slow CPU falls
    behind at a lower rate and so turns the cookie defence on sooner."""

    def __init__(self, depth: int = 128, hold: float = 1.0):
        self.depth = depth
        self.hold = hold
        self.until = float("-inf")

    def check(self, waiting: int, now: float) -> bool:
        if waiting >= self.depth:
            self.until = now + self.hold
            return True
        return now < self.until
