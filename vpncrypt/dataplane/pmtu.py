"""The data plane's answer to inner packets too big for their peer's path
MTU (the session table refuses them: status PATH_MTU, RoundIO.too_big; see
native/vc_wg.h "path MTU" for how the table learns it).

Only a send round that refused such packets comes here (a round with any is
not routine), so traffic that fits never does.  For each packet:

- its sender is told, within the ICMP errors' limits (the engine's
  UnreachableReplies, shared with "destination unreachable"): IPv4 with DF
  gets "fragmentation needed" with the inner MTU, IPv6 "packet too big"
  (never below 1280); a TSO super-packet's segments (a TUN with a vnet
  header) get one error for the run, as the kernel answers the super-packet
  once before it segments it;
- what a router may do with it, the data plane does, so the bytes in flight
  still arrive: a TCP segment is cut into segments that fit (its payload in
  pieces of the inner MTU less its headers, native vc_vnet_split, which
  makes every header and checksum as GSO does), and an IPv4 packet without
  DF is fragmented (RFC 791: the Linux module's device would be handed the
  fragments by the kernel, since its MTU would be the smaller one).  The
  pieces are sealed to the same peer (refit()).

An IPv6 packet above 1280 bytes that is not TCP, and an IPv4 one with DF
that is not TCP, is dropped once told (counted as the drop reason
packet_too_big), as a router drops it.  (An IPv6 packet of at most 1280
bytes is never refused: the table lets it go, in outer fragments.)"""

from __future__ import annotations

import struct
from typing import Any

from vpncrypt._native import ffi, lib
from vpncrypt.dataplane.unreachable import UnreachableReplies
from vpncrypt.protocol.icmp_errors import checksum, packet_too_big

_TCP = 6
_IP_DF = 0x4000
_IP_MF = 0x2000
_GSO_TCPV4, _GSO_TCPV6 = 1, 4  # virtio_net_hdr gso_type (include/uapi/linux/virtio_net.h)
_TCP_CSUM_OFFSET = 16


def answer(
    replies: UnreachableReplies, packets: list[tuple[Any, int]], inner: Any, now: float, offloaded: bool
) -> tuple[int, int]:
    """The "packet too big" errors for (packet, inner MTU) pairs, within the
    limits, written to `inner`; returns (sent, limited).  A pair whose MTU
    is 0 (the peer's path MTU expired or changed since) gets none."""
    by_mtu: dict[int, list[Any]] = {}
    for pkt, mtu in packets:
        if mtu > 0:
            by_mtu.setdefault(mtu, []).append(pkt)
    sent = limited = 0
    for mtu, pkts in by_mtu.items():

        def make(pkt: Any, source: bytes | None, mtu: int = mtu) -> bytes | None:
            return packet_too_big(pkt, mtu, source)

        s, lim = replies.answer(pkts, inner, now, offloaded, make)
        sent += s
        limited += lim
    return sent, limited


def refit(pkt: Any, mtu: int) -> list[bytes]:
    """`pkt` in pieces of at most `mtu` bytes that carry all of it, as a
    router may cut it: a TCP segment into segments, an IPv4 packet without DF
    into fragments; [] for anything else (or a malformed packet, or an MTU
    too small for a piece)."""
    p = bytes(pkt)
    if len(p) <= mtu or mtu < 68:
        return []
    version = p[0] >> 4
    if version == 4 and len(p) >= 20:
        ihl = (p[0] & 0x0F) * 4
        flags = struct.unpack_from("!H", p, 6)[0]
        if p[9] == _TCP and not flags & (_IP_MF | 0x1FFF):
            return _resegment(p, ihl, 4, mtu)
        if not flags & _IP_DF:
            return _fragment4(p, mtu)
        return []
    if version == 6 and len(p) >= 40 and p[6] == _TCP:
        return _resegment(p, 40, 6, mtu)
    return []


def _resegment(p: bytes, l3: int, version: int, mtu: int) -> list[bytes]:
    """A TCP segment cut into segments of at most `mtu` bytes by the native
    GSO splitter (sequence numbers, flags, IP IDs, lengths and checksums as
    the kernel's TSO makes them)."""
    if len(p) < l3 + 20:
        return []
    hdr = l3 + (p[l3 + 12] >> 4) * 4
    if mtu <= hdr or len(p) <= hdr:
        return []
    h = ffi.new("vc_vnet_hdr *")
    h.gso_type = _GSO_TCPV4 if version == 4 else _GSO_TCPV6
    h.hdr_len, h.gso_size = hdr, mtu - hdr
    h.csum_start, h.csum_offset = l3, _TCP_CSUM_OFFSET
    buf = ffi.new("uint8_t[]", p)
    count = -(-(len(p) - hdr) // (mtu - hdr))
    slot = (mtu + 15) & ~15
    slab = ffi.new("uint8_t[]", slot * count)
    off, lens, seg = ffi.new("uint32_t[]", count), ffi.new("uint32_t[]", count), ffi.new("uint32_t *")
    n = lib.vc_vnet_split(buf, len(p), h, mtu, slab, slot * count, off, lens, count, seg)
    if n != count:
        return []  # malformed (or IPv6 extension headers, which it refuses): dropped, told
    data = ffi.buffer(slab)
    return [bytes(data[off[i] : off[i] + lens[i]]) for i in range(n)]


def _fragment4(p: bytes, mtu: int) -> list[bytes]:
    """An IPv4 packet without DF in fragments of at most `mtu` bytes (RFC
    791: each carries a multiple of 8 data bytes but the last, MF on all but
    the last).  A packet with options is left alone ([]): only some options
    are copied into every fragment, which this does not sort out."""
    ihl = (p[0] & 0x0F) * 4
    total = struct.unpack_from("!H", p, 2)[0]
    if ihl != 20 or total != len(p):
        return []
    flags_off = struct.unpack_from("!H", p, 6)[0]
    first, more = flags_off & 0x1FFF, flags_off & _IP_MF
    step = (mtu - ihl) & ~7
    out = []
    data = p[ihl:]
    for at in range(0, len(data), step):
        piece = data[at : at + step]
        last = at + step >= len(data)
        head = bytearray(p[:ihl])
        struct.pack_into("!H", head, 2, ihl + len(piece))
        fo = first + at // 8
        struct.pack_into("!H", head, 6, fo | (more if last else _IP_MF))
        head[10:12] = b"\0\0"
        struct.pack_into("!H", head, 10, checksum(head))
        out.append(bytes(head) + piece)
    return out
