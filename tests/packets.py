"""The tests' one IP packet builder: IPv4 (RFC 791) and IPv6 (RFC 8200) packets,
with a UDP (RFC 768) or TCP (RFC 9293) header when asked.

``ipv4``/``ipv6`` put ``payload`` behind a bare header (protocol 17 unless told,
TTL/hop limit 64, identification 0, DF clear); the IPv4 header checksum is 0 unless
``header_checksum`` is set, which is what the session table and the devices under
test need (they route on the addresses and never look at it).  ``udp`` and ``tcp``
build a whole datagram/segment with its transport checksum over the pseudo-header,
IPv4 or IPv6 from the addresses' family, for the places where a kernel reads the
packet (a TUN device, a real socket).
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

__all__ = ["checksum", "ipv4", "ipv6", "ip", "udp", "tcp", "TCP_ACK", "TCP_PSH", "TCP_SYN", "TCP_FIN"]

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): the ones' complement of the ones' complement sum."""
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(
    src: str,
    dst: str,
    payload: bytes = b"x" * 20,
    proto: int = 17,
    *,
    ttl: int = 64,
    ident: int = 0,
    df: bool = False,
    header_checksum: bool = False,
) -> bytes:
    """An IPv4 packet: a 20-byte header (no options; `df`: Don't Fragment) and ``payload``."""
    s = ipaddress.IPv4Address(src).packed
    d = ipaddress.IPv4Address(dst).packed
    frag = 0x4000 if df else 0
    hdr = struct.pack(">BBHHHBBH", 0x45, 0, 20 + len(payload), ident, frag, ttl, proto, 0) + s + d
    if header_checksum:
        hdr = hdr[:10] + struct.pack(">H", checksum(hdr)) + hdr[12:]
    return hdr + payload


def ipv6(
    src: str, dst: str, payload: bytes = b"y" * 8, next_header: int = 17, *, hop_limit: int = 64
) -> bytes:
    """An IPv6 packet: the 40-byte fixed header and ``payload``."""
    return (
        struct.pack(">IHBB", 6 << 28, len(payload), next_header, hop_limit)
        + ipaddress.IPv6Address(src).packed
        + ipaddress.IPv6Address(dst).packed
        + payload
    )


def ip(src: str, dst: str, payload: bytes, proto: int = 17, **v4: Any) -> bytes:
    """IPv4 or IPv6 by the addresses' family (IPv4 with its header checksum and
    the ipv4() options `v4`: ttl, ident, df; ignored for IPv6)."""
    if ipaddress.ip_address(src).version == 4:
        return ipv4(src, dst, payload, proto, header_checksum=True, **v4)
    return ipv6(src, dst, payload, proto)


def _pseudo_header(src: str, dst: str, proto: int, length: int) -> bytes:
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version == 4:
        return s.packed + d.packed + struct.pack(">BBH", 0, proto, length)
    return s.packed + d.packed + struct.pack(">IxxxB", length, proto)


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes, **v4: Any) -> bytes:
    """A whole UDP datagram in IP, with its checksum (0 is sent as 0xffff); `v4` as for ip()."""
    length = 8 + len(payload)
    hdr = struct.pack(">HHHH", sport, dport, length, 0)
    csum = checksum(_pseudo_header(src, dst, 17, length) + hdr + payload) or 0xFFFF
    return ip(src, dst, hdr[:6] + struct.pack(">H", csum) + payload, 17, **v4)


def tcp(
    src: str,
    dst: str,
    sport: int,
    dport: int,
    payload: bytes = b"",
    *,
    seq: int = 0,
    ack: int = 0,
    flags: int = TCP_ACK,
    window: int = 65535,
    **v4: Any,
) -> bytes:
    """A whole TCP segment in IP (20-byte header, no options), with its checksum; `v4` as for ip()."""
    hdr = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, window, 0, 0)
    csum = checksum(_pseudo_header(src, dst, 6, len(hdr) + len(payload)) + hdr + payload)
    return ip(src, dst, hdr[:16] + struct.pack(">H", csum) + hdr[18:] + payload, 6, **v4)
