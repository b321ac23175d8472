"""ICMP errors for the inner packets the tunnel cannot carry, as the Linux
module sends them (drivers/net/wireguard/device.c, wg_xmit): a packet whose
destination no peer's AllowedIPs cover, or whose peer has no endpoint, is
answered with "destination unreachable" toward its sender, code "host
unreachable" (IPv4, RFC 792) or "address unreachable" (ICMPv6, RFC 4443).

Sans-I/O: ``unreachable(packet, source)`` makes the error's bytes (None where
no error may be sent), ``ErrorRateLimiter`` says whether one may go now
(given the time).  The data plane writes the bytes into the TUN.

Source address.  The kernel's error leaves from an address of the host
(with no route back, the wg interface's own).  We cannot send it from
there: we write it into the TUN, so the kernel receives it as a packet that
arrived on the interface, and it drops an IPv4 packet whose source is one
of its own addresses (fib_validate_source, net.ipv4.conf.*.accept_local = 0
by default; measured: `ping` saw nothing).  So the IPv4 error comes from
the unreachable destination itself (its reverse route is the tunnel, so
even strict rp_filter lets it in).  IPv6 has no such check: the error comes
from the interface's own address (``choose_source6``), as the kernel's,
and from the destination where the interface has none."""

from __future__ import annotations

import struct
from collections.abc import Sequence

# RFC 792: type 3 (destination unreachable), code 1 (host unreachable).
ICMP_DEST_UNREACH = 3
ICMP_HOST_UNREACH = 1
# RFC 792 / RFC 1191: type 3 code 4 (fragmentation needed and DF set), the
# next-hop MTU in the low 16 bits of the header's second word.
ICMP_FRAG_NEEDED = 4
# RFC 4443 3.1: type 1 (destination unreachable), code 3 (address unreachable).
ICMPV6_DEST_UNREACH = 1
ICMPV6_ADDR_UNREACH = 3
# RFC 4443 3.2: type 2 (packet too big), code 0, the MTU in the second word;
# RFC 8200 5: never below 1280.
ICMPV6_PACKET_TOO_BIG = 2
IPV6_MIN_MTU = 1280
# The IPv4 header's "don't fragment" flag (RFC 791).
_IP_DF = 0x4000
# RFC 1812 4.3.2.3: the error quotes as much of the datagram as fits in 576
# bytes (what the kernel quotes: 576 - 20 - 8 = 548 bytes).
IPV4_ERROR_MAX = 576
# RFC 4443 2.4(c): as much as fits without the error exceeding the minimum
# IPv6 MTU, 1280 bytes (1232 bytes quoted).
IPV6_ERROR_MAX = 1280
# The hop limit the kernel gives its own packets (net.ipv4.ip_default_ttl,
# net.ipv6.conf.*.hop_limit).
HOP_LIMIT = 64
_PROTO_ICMP = 1
_PROTO_ICMPV6 = 58
# ICMP types that are errors (RFC 792, 950, 1812): never answered (RFC 1122
# 3.2.2).  Types past 18 (the kernel's NR_ICMP_TYPES) are unknown: the kernel
# treats them as errors, so do we.
_ICMP_ERRORS = frozenset({3, 4, 5, 11, 12})
_ICMP_LAST_TYPE = 18
# IPv6 extension headers walked to find an ICMPv6 header (RFC 8200 4):
# hop-by-hop, routing, destination options (length in 8-octet units after
# the first 8), and the fragment header (8 bytes).
_EXT_HEADERS = frozenset({0, 43, 60})
_FRAGMENT = 44
_ND_REDIRECT = 137


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The Internet checksum (RFC 1071): the ones' complement of the ones'
    complement sum of the 16-bit words."""
    b = bytes(data)
    if len(b) % 2:
        b += b"\0"
    s: int = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def unreachable(packet: bytes | bytearray | memoryview, source: bytes | None = None) -> bytes | None:
    """The destination-unreachable error for `packet` (an inner IP packet),
    from `source` (4 or 16 bytes, of the packet's family; None: from the
    packet's destination), or None where none may be sent: a truncated or
    malformed packet, an ICMP error, a non-first IPv4 fragment, a multicast
    or broadcast destination, a source that is no single host."""
    p = bytes(packet[:IPV6_ERROR_MAX])
    if not p:
        return None
    version = p[0] >> 4
    if version == 4:
        return _error4(p, len(packet), source, ICMP_DEST_UNREACH, ICMP_HOST_UNREACH, 0)
    if version == 6:
        return _error6(p, len(packet), source, ICMPV6_DEST_UNREACH, ICMPV6_ADDR_UNREACH, 0)
    return None


def packet_too_big(
    packet: bytes | bytearray | memoryview, mtu: int, source: bytes | None = None
) -> bytes | None:
    """The error that tells the sender of `packet` (an inner IP packet) that
    it exceeds the path's MTU, and the size that fits, `mtu`: "fragmentation
    needed and DF set" (IPv4, RFC 792, the next-hop MTU of RFC 1191), only
    for a packet with DF set (one without may be fragmented on the way:
    the caller does that); "packet too big" (ICMPv6, RFC 4443 3.2), with an
    MTU of at least 1280 (RFC 8200 5).  None where no error may be sent
    (as unreachable()); source as unreachable()'s."""
    p = bytes(packet[:IPV6_ERROR_MAX])
    if not p:
        return None
    version = p[0] >> 4
    if version == 4:
        if len(p) < 20 or not struct.unpack_from("!H", p, 6)[0] & _IP_DF:
            return None
        return _error4(p, len(packet), source, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, min(max(mtu, 68), 0xFFFF))
    if version == 6:
        return _error6(p, len(packet), source, ICMPV6_PACKET_TOO_BIG, 0, max(mtu, IPV6_MIN_MTU))
    return None


def _error4(p: bytes, size: int, source: bytes | None, kind: int, code: int, word: int) -> bytes | None:
    ihl = (p[0] & 0x0F) * 4
    if ihl < 20 or size < ihl:
        return None
    total, frag, proto = struct.unpack_from("!H2xHxB", p, 2)
    if total < ihl or total > size:
        return None
    if frag & 0x1FFF:  # RFC 1812 4.3.2.7: not for a non-first fragment
        return None
    src, dst = p[12:16], p[16:20]
    if not _single_host4(src) or dst[0] >= 224 or dst[0] == 0:  # (224/4 multicast, 240/4, broadcast)
        return None
    if proto == _PROTO_ICMP:
        if total <= ihl:
            return None  # no type to look at: malformed
        if p[ihl] in _ICMP_ERRORS or p[ihl] > _ICMP_LAST_TYPE:
            return None
    quoted = p[: min(total, IPV4_ERROR_MAX - 28)]
    body = bytearray(struct.pack("!BBHI", kind, code, 0, word) + quoted)
    struct.pack_into("!H", body, 2, checksum(body))
    tos = (p[1] & 0x1E) | 0xC0  # the kernel's: the original's TOS bits, precedence internetwork control
    # DF with ID 0: an atomic datagram (RFC 6864 4.1), at most 576 bytes
    head = bytearray(
        struct.pack("!BBHHHBBH", 0x45, tos, 20 + len(body), 0, 0x4000, HOP_LIMIT, _PROTO_ICMP, 0)
    )
    head += (source or dst) + src
    struct.pack_into("!H", head, 10, checksum(head))
    return bytes(head + body)


def _single_host4(a: bytes) -> bool:
    """RFC 1812 4.3.2.7: not 0/8 ("this network"), 127/8 (loopback),
    224/4 (multicast), 240/4 (class E) nor 255.255.255.255 (broadcast)."""
    return a[0] not in (0, 127) and a[0] < 224


def _error6(p: bytes, size: int, source: bytes | None, kind: int, code: int, word: int) -> bytes | None:
    if size < 40:
        return None
    (payload,) = struct.unpack_from("!H", p, 4)
    if payload == 0 or 40 + payload > size:  # (0: a jumbogram, not for a tunnel of at most 64 KiB)
        return None
    src, dst = p[8:24], p[24:40]
    # RFC 4443 2.4(e.3) and (e.5): not to a multicast destination, nor from an
    # unspecified, loopback or multicast source
    if dst[0] == 0xFF or src[0] == 0xFF or src[:15] == bytes(15) and src[15] <= 1:
        return None
    inner = _icmpv6_type(p, 40 + payload)
    if inner is not None and (inner < 128 or inner == _ND_REDIRECT):  # (e.1), (e.2); -1: malformed
        return None
    frm = source or dst
    quoted = p[: min(40 + payload, IPV6_ERROR_MAX - 48)]
    body = bytearray(struct.pack("!BBHI", kind, code, 0, word) + quoted)
    pseudo = frm + src + struct.pack("!I3xB", len(body), _PROTO_ICMPV6)  # RFC 8200 8.1
    struct.pack_into("!H", body, 2, checksum(pseudo + body))
    head = struct.pack("!IHBB", 6 << 28, len(body), _PROTO_ICMPV6, HOP_LIMIT) + frm + src
    return head + bytes(body)


def _icmpv6_type(p: bytes, end: int) -> int | None:
    """The ICMPv6 type of the packet (p: its first bytes, end: its length),
    after its extension headers; None if it carries no ICMPv6 message (or
    is a non-first fragment: what it carries is not in it), -1 if the
    header chain or the ICMPv6 header is cut short (malformed)."""
    nxt, pos = p[6], 40
    while True:
        if nxt == _PROTO_ICMPV6:
            return p[pos] if pos < min(end, len(p)) else -1
        if nxt == _FRAGMENT:
            if pos + 8 > min(end, len(p)):
                return -1
            if struct.unpack_from("!H", p, pos + 2)[0] & 0xFFF8:
                return None
            nxt, pos = p[pos], pos + 8
        elif nxt in _EXT_HEADERS:
            if pos + 2 > min(end, len(p)):
                return -1
            nxt, pos = p[pos], pos + 8 + 8 * p[pos + 1]
        else:
            return None


def choose_source6(sender: bytes, addresses: Sequence[bytes]) -> bytes | None:
    """The interface's address an ICMPv6 error to `sender` leaves from, as
    the kernel's route lookup picks it for a local sender: the sender's own
    address if it is one of the interface's (a program on this host), else
    the first that is not link-local (fe80::/10), else the first; None if
    the interface has none."""
    if sender in addresses:
        return sender
    for a in addresses:
        if not (a[0] == 0xFE and a[1] & 0xC0 == 0x80):
            return a
    return addresses[0] if addresses else None


class ErrorRateLimiter:
    """The kernel's two limits on ICMP errors (Documentation/networking/
    ip-sysctl.rst), both token buckets:

    - global: icmp_msgs_per_sec (1000) a second, in bursts of up to
      icmp_msgs_burst (50);
    - per destination (the error's, i.e. the original sender):
      icmp_ratelimit / icmpv6 ratelimit (1000 ms) per error, with up to 6
      saved up (the kernel's XRLIM_BURST_FACTOR; a new destination starts
      with all 6).

    Not followed: the kernel does not apply the per-destination limit to a
    sender on this host (the error's route is the loopback device), and
    shortens the IPv6 one for routes shorter than /128; here every
    destination has the same limit.  At most `max_destinations` are
    remembered (4096; past that the idle ones, whose buckets are full again,
    go, and while none is idle a new destination is refused).  Times are
    seconds (monotonic)."""

    BURST_FACTOR = 6

    def __init__(
        self,
        per_second: float = 1000.0,
        burst: float = 50.0,
        interval: float = 1.0,
        max_destinations: int = 4096,
    ) -> None:
        self.per_second = per_second
        self.burst = burst
        self.interval = interval
        self.max_destinations = max_destinations
        self._tokens = burst
        self._last: float | None = None
        self._dest: dict[bytes, list[float]] = {}  # destination -> [tokens (seconds), last]

    def global_room(self, now: float) -> bool:
        """Whether the global bucket has a token at `now` (refilled; none taken)."""
        last, self._last = self._last, now
        if last is not None and now > last:
            self._tokens = min(self.burst, self._tokens + (now - last) * self.per_second)
        return self._tokens >= 1.0

    def peek(self, destination: bytes, now: float) -> bool:
        """Whether an error to `destination` could go at `now`, nothing
        taken: the cheap check before an error is built (a sender whose own
        bucket is empty costs no error built and thrown away)."""
        if not self.global_room(now):
            return False
        d = self._dest.get(destination)
        if d is None:
            return True  # a new destination starts with its bucket full
        return min(self.BURST_FACTOR * self.interval, d[0] + max(0.0, now - d[1])) >= self.interval

    def allow(self, destination: bytes, now: float) -> bool:
        """Whether an error to `destination` may go at `now`; if so, it is
        taken from both buckets."""
        if not self.global_room(now):
            return False
        cap = self.BURST_FACTOR * self.interval
        d = self._dest.get(destination)
        if d is None:
            if len(self._dest) >= self.max_destinations and not self._forget_idle(now, cap):
                return False
            d = self._dest[destination] = [cap, now]
        else:
            d[0] = min(cap, d[0] + max(0.0, now - d[1]))
            d[1] = now
        if d[0] < self.interval:
            return False
        d[0] -= self.interval
        self._tokens -= 1.0
        return True

    def _forget_idle(self, now: float, cap: float) -> bool:
        """Forget the destinations idle long enough to be full again (as
        good as new); whether any went."""
        idle = [k for k, (tokens, last) in self._dest.items() if tokens + (now - last) >= cap]
        for k in idle:
            del self._dest[k]
        return bool(idle)
