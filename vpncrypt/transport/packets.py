"""Inner IP headers and WireGuard's padding rule, for the reference table
(native/wg_data.c has the same two), and the routing loop's own datagram
(native/wg_loop.c)."""

import ipaddress
from typing import Any


def inner_address(pkt: bytes | bytearray | memoryview, destination: bool) -> tuple[int, bytes | None, int]:
    """(family, address bytes, IP length) of a whole IPv4/IPv6 packet, its
    source or destination; (0, None, 0) if it is not one."""
    n = len(pkt)
    if n >= 20 and pkt[0] >> 4 == 4:
        total = (pkt[2] << 8) | pkt[3]
        if total < 20 or total > n:
            return 0, None, 0
        at = 16 if destination else 12
        return 4, bytes(pkt[at : at + 4]), total
    if n >= 40 and pkt[0] >> 4 == 6:
        total = 40 + ((pkt[4] << 8) | pkt[5])
        if total > n:
            return 0, None, 0
        at = 24 if destination else 8
        return 6, bytes(pkt[at : at + 16]), total
    return 0, None, 0


def padded_length(length: int, mtu: int) -> int:
    """The plaintext length after padding: a multiple of 16, never past the
    MTU (a packet longer than the MTU is padded as its last MTU-sized unit
    would be), as wireguard-go's calculatePaddingSize."""
    if not mtu:
        return (length + 15) & ~15
    last = length % mtu if length > mtu else length
    padded = min((last + 15) & ~15, mtu)
    return length + padded - last


def own_datagram(pkt: bytes | bytearray | memoryview, port: int, endpoint: tuple[Any, ...]) -> bool:
    """Whether an inner packet is the device's own datagram to `endpoint`
    ((host, port, ...)): UDP from its listen `port` (0: never) to the
    endpoint's address and port, the first fragment or none (native/wg_loop.c
    has the same rule)."""
    if not port or not endpoint[1]:
        return False
    n = len(pkt)
    if n >= 28 and pkt[0] >> 4 == 4:
        at = (pkt[0] & 15) * 4
        later_fragment = ((pkt[6] & 0x1F) << 8) | pkt[7]
        if at < 20 or pkt[9] != 17 or later_fragment or n < at + 8:
            return False
        dst = bytes(pkt[16:20])
    elif n >= 48 and pkt[0] >> 4 == 6 and pkt[6] == 17:
        at, dst = 40, bytes(pkt[24:40])
    else:
        return False
    if (pkt[at] << 8 | pkt[at + 1]) != port or (pkt[at + 2] << 8 | pkt[at + 3]) != endpoint[1]:
        return False  # (the usual case: the address is not parsed)
    addr = ipaddress.ip_address(endpoint[0].split("%")[0])
    if len(dst) == 4 and isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return dst == addr.packed
