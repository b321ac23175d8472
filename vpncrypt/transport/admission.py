"""Handshake messages in the reference table: the checks that need no Noise
state, the cookie defence under load, the per-source rate limiter and the
bounded handshake queue, in pure Python (hashlib's BLAKE2s, libsodium's
XChaCha20-Poly1305 through the crypto backend).  The same rules, in the same
order, as native/wg_admit.c (see native/vc_wg.h); the differential tests hold
the two against each other.

    mac1   = MAC(HASH("mac1----" || public key), message up to mac1)
    cookie = MAC(secret, source address || port big-endian), the secret
             replaced every cookie_secret_age (120 s)
    mac2   = MAC(cookie, message up to mac2)
    reply  = type 3 | sender index | nonce 24 | XChaCha20-Poly1305(
             HASH("cookie--" || public key), nonce, cookie, aad = mac1)
"""

import hashlib
import hmac
import ipaddress
import os
from collections import deque
from typing import Any, Callable

from vpncrypt.transport import status as S
from vpncrypt.transport.model import Addr, Datagram, TableConfig

_MAC1_OFFSET = {(1, 148): 116, (2, 92): 60}
_TYPE3 = b"\x03\x00\x00\x00"
_equal = hmac.compare_digest


def _blake2s(data: bytes, key: bytes = b"", size: int = 32) -> bytes:
    return hashlib.blake2s(data, key=key, digest_size=size).digest()


def source_bytes(addr: Addr) -> tuple[bytes, bytes]:
    """(address bytes, address || port big-endian) of an endpoint (host, port, ...)."""
    ip = ipaddress.ip_address(addr[0]).packed
    return ip, ip + (addr[1] & 0xFFFF).to_bytes(2, "big")


class RateLimiter:
    """A token bucket per source address: a new source starts with `burst`
    tokens, each earns `rate` per second up to `burst`, a message takes one.
    Sources whose bucket has refilled are forgotten once a second, and when
    the table of `max_entries` is full."""

    def __init__(self, rate: float, burst: float, max_entries: int):
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_entries = max_entries
        self.table: dict[bytes, list[float]] = {}  # address bytes -> [tokens, last]
        self.last_prune = 0.0

    def prune(self, now: float) -> None:
        full = self.burst / self.rate
        self.table = {k: e for k, e in self.table.items() if now - e[1] < full}
        self.last_prune = now

    def allow(self, key: bytes, now: float) -> bool:
        if now - self.last_prune >= 1.0:
            self.prune(now)
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


class Admission:
    """The handshake side of a reference table.  `index_kind(index)` says
    what the table holds under one of its indices: None, "reserved" or
    "keypair"."""

    def __init__(
        self,
        config: TableConfig,
        crypto: Any,
        index_kind: Callable[[int], str | None],
        drop: Callable[[int], None],
    ) -> None:
        self.crypto = crypto
        self.index_kind = index_kind
        self.drop = drop
        self.mac1_key: bytes | None = None
        self.cookie_key: bytes | None = None
        self.drbg_key = os.urandom(32)  # as the native table's getrandom
        self.drbg_counter = 0
        self.secret: bytes | None = None
        self.secret_born = 0.0
        self.load_until = float("-inf")
        self.config = config
        self.limiter = RateLimiter(config.ratelimit_rate, config.ratelimit_burst, config.ratelimit_sources)
        self.queue: deque[Datagram] = deque()

    def configure(self, config: TableConfig) -> None:
        """As the native table: a new queue size empties the queue, a new
        number of sources empties the limiter."""
        old, self.config = self.config, config
        if config.handshake_queue != old.handshake_queue:
            self.queue = deque()
        if config.ratelimit_sources != old.ratelimit_sources:
            self.limiter = RateLimiter(
                config.ratelimit_rate, config.ratelimit_burst, config.ratelimit_sources
            )
        self.limiter.rate = float(config.ratelimit_rate)
        self.limiter.burst = float(config.ratelimit_burst)

    def set_public_key(self, public_key: bytes | None) -> None:
        if public_key is None:
            self.mac1_key = self.cookie_key = None
        else:
            self.mac1_key = _blake2s(b"mac1----" + bytes(public_key))
            self.cookie_key = _blake2s(b"cookie--" + bytes(public_key))

    def seed(self, seed: bytes) -> None:
        self.drbg_key = bytes(seed)
        self.drbg_counter = 0
        self.secret = None

    def _random(self) -> bytes:
        out = _blake2s(self.drbg_counter.to_bytes(8, "little"), key=self.drbg_key)
        self.drbg_counter += 1
        return out

    def _cookie(self, src: bytes, now: float) -> bytes:
        if self.secret is None or now - self.secret_born >= self.config.cookie_secret_age:
            self.secret = self._random()
            self.secret_born = now
        return _blake2s(src, key=self.secret, size=16)

    def admit(self, data: bytes, addr: Addr, now: float, replies: list[Datagram]) -> int:
        """The status of one datagram that is not transport data."""
        n = len(data)
        mtype = int.from_bytes(data[:4], "little") if n >= 4 else 0
        mac1_off = _MAC1_OFFSET.get((mtype, n))
        if mac1_off is None and not (mtype == 3 and n == 64):
            return S.MALFORMED
        cfg = self.config
        if mac1_off is not None:
            if self.mac1_key is None:
                return S.UNKNOWN_PEER
            mac1 = data[mac1_off : mac1_off + 16]
            if not _equal(_blake2s(data[:mac1_off], key=self.mac1_key, size=16), mac1):
                return S.BAD_MAC1
            under_load = len(self.queue) + 1 >= cfg.under_load_depth
            if under_load:
                self.load_until = now + cfg.under_load_hold
            else:
                under_load = now < self.load_until
            if under_load:
                ip, src = source_bytes(addr)
                cookie = self._cookie(src, now)
                if not _equal(
                    _blake2s(data[: mac1_off + 16], key=cookie, size=16), data[mac1_off + 16 : mac1_off + 32]
                ):
                    nonce = self._random()[:24]
                    sealed = self.crypto.xseal(self.cookie_key, nonce, cookie, mac1)
                    replies.append((_TYPE3 + data[4:8] + nonce + sealed, addr))
                    return S.COOKIE_SENT
                if not self.limiter.allow(bytes([len(ip)]) + ip, now):
                    return S.RATE_LIMITED
        if mtype != 1:
            kind = self.index_kind(int.from_bytes(data[8:12] if mtype == 2 else data[4:8], "little"))
            if (kind != "reserved") if mtype == 2 else kind is None:
                return S.UNKNOWN_INDEX
        if len(self.queue) >= cfg.handshake_queue:
            self.queue.popleft()
            self.drop(S.QUEUE_FULL)
        self.queue.append((data, addr))
        return S.HANDSHAKE

    def take(self, limit: int) -> list[Datagram]:
        q = self.queue
        return [q.pop() for _ in range(min(limit, len(q)))]

    def waiting(self, now: float) -> tuple[int, bool]:
        n = len(self.queue)
        return n, n >= self.config.under_load_depth or now < self.load_until
