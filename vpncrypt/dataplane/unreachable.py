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
from collections.abc import Iterable
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
    inner.write_packets.  offloaded: the inner side may hand over TSO/USO
    super-packets split into segments (a TUN with a vnet header); a run of
    consecutive TCP or UDP packets of one flow in a round is then answered
    once (and the rest not counted), as the kernel answers the super-packet
    before it segments it.  (Separate packets of one flow that meet in a
    round pass for segments too: the errors are rate-limited to 6 a sender
    at once anyway; a super-packet whose segments fill more than one round
    may be answered once a round.)"""

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
        self, packets: Iterable[Any], inner: Any, now: float, offloaded: bool = False
    ) -> tuple[int, int]:
        errors = []
        limited = 0
        last_flow = None
        fd = getattr(inner, "fd", None)
        ifname = tun_name(fd) if isinstance(fd, int) else None
        with self._lock:
            for pkt in packets:
                if offloaded:
                    flow = _flow(pkt)
                    if flow is not None and flow == last_flow:
                        continue  # another segment of the super-packet answered
                    last_flow = flow
                source = None
                if len(pkt) >= 40 and pkt[0] >> 4 == 6 and ifname is not None:
                    source = choose_source6(bytes(pkt[8:24]), self._ipv6_of(ifname, now))
                error = unreachable(pkt, source)
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


def _error_destination(error: bytes) -> bytes:
    """An error's destination (the original sender): the limit's key."""
    return error[16:20] if error[0] >> 4 == 4 else error[24:40]


def _flow(pkt: Any) -> bytes | None:
    """What the segments of one TSO/USO super-packet share: the version,
    the addresses, TCP or UDP and the ports (None for anything else: only
    TCP and UDP come in super-packets)."""
    v = pkt[0] >> 4 if len(pkt) else 0
    if v == 4 and len(pkt) >= 20:
        proto, l4 = pkt[9], (pkt[0] & 0x0F) * 4
        head = bytes(pkt[12:20])
    elif v == 6 and len(pkt) >= 40:
        proto, l4 = pkt[6], 40
        head = bytes(pkt[8:40])
    else:
        return None
    if proto not in (6, 17) or len(pkt) < l4 + 4:
        return None
    return bytes((v, proto)) + head + bytes(pkt[l4 : l4 + 4])
