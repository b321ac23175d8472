"""The data plane's ICMP errors for the packets a send round dropped for no
route or no endpoint (vpncrypt.protocol.icmp_errors makes them and limits
their rate): written back into the TUN, toward the packets' senders, as the
Linux module answers them.

Only a round that dropped such packets comes here (the native round counts
them: RoundIO.unroutable, and such a round ends a looped call), so routable
traffic never does; a flood of unroutable packets costs one check of the
global bucket per round once the limit is reached, not a look at each
packet.  One object serves every worker of an engine (the limits are the
device's), so its state is under a lock."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable, Iterable
from typing import Any

from vpncrypt.protocol.icmp_errors import ErrorRateLimiter, choose_source6, unreachable

_TUNGETIFF = 0x800454D2
# The interface's IPv6 addresses are read again after this long (a second):
# an error is at most 1000 a second, and an address added by hand is used
# from the next second on.
ADDRESS_TTL = 1.0


def tun_name(fd: int) -> str | None:
    """The name of the TUN interface behind `fd` (TUNGETIFF), None if it is
    not one."""
    try:
        ifr = fcntl.ioctl(fd, _TUNGETIFF, bytes(40))
    except (OSError, TypeError, ValueError):
        return None
    return ifr[:16].split(b"\0", 1)[0].decode() or None


def ipv6_addresses(ifname: str, path: str = "/proc/net/if_inet6") -> list[bytes]:
    """The interface's IPv6 addresses (16 bytes each), in the kernel's order."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                cols = line.split()
                if len(cols) == 6 and cols[5] == ifname:
                    out.append(bytes.fromhex(cols[0]))
    except OSError:
        return []
    return out


class UnreachableReplies:
    """answer(packets, inner, now) -> (sent, limited): the errors for a
    round's unroutable packets, within the limits, written with
    inner.write_packets.  offloaded: the inner side may hand over TSO
    super-packets split into segments (a TUN with a vnet header); a TCP
    segment that continues the one before it in the round (same addresses
    and ports, its sequence number where the other's data ended) is then
    taken for the next segment of one super-packet and not answered (nor
    counted), as the kernel answers the super-packet once, before it
    segments it.  (A TCP stream to a destination without a peer has no
    handshake, so its data comes in such runs only from a super-packet, or
    from a connection whose peer was removed, where this answers less
    often than the kernel.  A USO super-packet's datagrams are answered one
    by one, within the limits: up to 6 errors where the kernel sends one.)
    """

    def __init__(self, limiter: ErrorRateLimiter | None = None) -> None:
        self.limiter = limiter or ErrorRateLimiter()
        self._lock = threading.Lock()
        self._addresses: tuple[str | None, float, list[bytes]] = (None, 0.0, [])

    def room(self, now: float) -> bool:
        """Whether the global limit lets any error go at `now` (the cheap
        check before a round's packets are looked at)."""
        with self._lock:
            return self.limiter.global_room(now)

    def answer(
        self,
        packets: Iterable[Any],
        inner: Any,
        now: float,
        offloaded: bool = False,
        make: Callable[[Any, bytes | None], bytes | None] | None = None,
    ) -> tuple[int, int]:
        """make(packet, source): the error for one packet (None: unreachable;
        or another of vpncrypt.protocol.icmp_errors with the same rules)."""
        if make is None:
            make = unreachable
        errors = []
        limited = 0
        last: tuple[bytes, int, int] | None = None
        fd = getattr(inner, "fd", None)
        ifname = tun_name(fd) if isinstance(fd, int) else None
        with self._lock:
            for pkt in packets:
                # the limits first, from the packet itself: a flood from one
                # sender past its 6 costs a look-up per packet, no error built
                sender = _sender(pkt)
                if sender is None or not self.limiter.peek(sender, now):
                    limited += sender is not None
                    continue
                if offloaded:
                    seg, prev = _tcp_segment(pkt), last
                    last = seg
                    if seg is not None and prev is not None and seg[0] == prev[0] and seg[1] == prev[2]:
                        continue  # the next segment of the super-packet answered
                source = None
                if len(pkt) >= 40 and pkt[0] >> 4 == 6 and ifname is not None:
                    source = choose_source6(bytes(pkt[8:24]), self._ipv6_of(ifname, now))
                error = make(pkt, source)
                if error is None:
                    continue
                if not self.limiter.allow(_error_destination(error), now):
                    limited += 1
                    continue
                errors.append(error)
        sent = 0
        if errors:
            try:
                sent, _err = inner.write_packets(errors)
            except (OSError, ValueError):  # (ValueError: an inner MTU below the error's size)
                sent = 0
        return sent, limited

    def _ipv6_of(self, ifname: str, now: float) -> list[bytes]:
        name, at, addrs = self._addresses
        if name != ifname or now - at >= ADDRESS_TTL or now < at:
            addrs = ipv6_addresses(ifname)
            self._addresses = (ifname, now, addrs)
        return addrs


def _sender(pkt: Any) -> bytes | None:
    """A packet's source address (its error's destination, the limits'
    key); None for a packet too short to have one."""
    n = len(pkt)
    if n >= 20 and pkt[0] >> 4 == 4:
        return bytes(pkt[12:16])
    if n >= 40 and pkt[0] >> 4 == 6:
        return bytes(pkt[8:24])
    return None


def _error_destination(error: bytes) -> bytes:
    """An error's destination (the original sender): the limit's key."""
    return error[16:20] if error[0] >> 4 == 4 else error[24:40]


def _tcp_segment(pkt: Any) -> tuple[bytes, int, int] | None:
    """A TCP packet's flow (the version, both addresses and ports), its
    sequence number and where its data ends (mod 2^32); None for anything
    else (or a packet too short to say)."""
    n = len(pkt)
    v = pkt[0] >> 4 if n else 0
    if v == 4 and n >= 20 and pkt[9] == 6:
        l4 = (pkt[0] & 0x0F) * 4
        size = int.from_bytes(pkt[2:4], "big")
        head = bytes(pkt[12:20])
    elif v == 6 and n >= 40 and pkt[6] == 6:
        l4 = 40
        size = 40 + int.from_bytes(pkt[4:6], "big")
        head = bytes(pkt[8:40])
    else:
        return None
    if n < l4 + 20 or size > n:
        return None
    seq = int.from_bytes(pkt[l4 + 4 : l4 + 8], "big")
    data = size - l4 - (pkt[l4 + 12] >> 4) * 4
    return bytes((v,)) + head + bytes(pkt[l4 : l4 + 4]), seq, (seq + max(data, 0)) & 0xFFFFFFFF
