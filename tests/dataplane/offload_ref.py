"""An independent Python model of TUN offloads, for the tests of native/tun_offload.c.

Packets are built with struct; checksums are summed 16 bits at a time (RFC 1071).
`split` does what the kernel's GSO does to a virtio_net_hdr super-packet;
`coalesce` follows the GRO rules stated in native/vc_offload.h, written
plainly over Python lists.  Nothing here calls the native module.
"""

import ipaddress
import struct

NEEDS_CSUM = 1
GSO_NONE, GSO_TCPV4, GSO_UDP, GSO_TCPV6, GSO_UDP_L4, GSO_ECN = 0, 1, 3, 4, 5, 0x80
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = 1, 2, 4, 8, 16, 32, 64, 128
TCP, UDP = 6, 17
MAX_PACKET = 65535
UDP_MAX_SEGS = 64


class Malformed(Exception):
    pass


class TooBig(Exception):
    pass


# ------------------------------------------------------------------ checksums


def ones_sum(data: bytes, start: int = 0) -> int:
    if len(data) % 2:
        data += b"\0"
    s = start
    for (w,) in struct.iter_unpack("!H", data):
        s += w
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def checksum(data: bytes, start: int = 0) -> int:
    return ~ones_sum(data, start) & 0xFFFF


def addrs(pkt: bytes):
    return (pkt[12:16], pkt[16:20]) if pkt[0] >> 4 == 4 else (pkt[8:24], pkt[24:40])


def pseudo_sum(src: bytes, dst: bytes, proto: int, l4len: int) -> int:
    return ones_sum(src + dst + struct.pack("!HH", proto, l4len))


def l4_ok(pkt: bytes, l3: int) -> bool:
    src, dst = addrs(pkt)
    proto = pkt[9] if pkt[0] >> 4 == 4 else pkt[6]
    if proto == UDP and pkt[0] >> 4 == 4 and pkt[l3 + 6 : l3 + 8] == b"\0\0":
        return True
    return ones_sum(pkt[l3:], pseudo_sum(src, dst, proto, len(pkt) - l3)) == 0xFFFF


def ipv4_hdr_ok(pkt: bytes) -> bool:
    ihl = (pkt[0] & 15) * 4
    return ones_sum(pkt[:ihl]) == 0xFFFF


# ------------------------------------------------------------------ building


def ip4(proto, src, dst, l4: bytes, *, ident=0x1234, ttl=64, tos=0, df=True, options=b"", frag=0):
    ihl = 5 + len(options) // 4
    flags = (0x4000 if df else 0) | frag
    h = (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | ihl,
            tos,
            20 + len(options) + len(l4),
            ident,
            flags,
            ttl,
            proto,
            0,
            ipaddress.IPv4Address(src).packed,
            ipaddress.IPv4Address(dst).packed,
        )
        + options
    )
    h = h[:10] + struct.pack("!H", checksum(h)) + h[12:]
    return h + l4


def ip6(proto, src, dst, l4: bytes, *, hlim=64, tclass=0, flow=0):
    first = (6 << 28) | (tclass << 20) | flow
    return (
        struct.pack(
            "!IHBB16s16s",
            first,
            len(l4),
            proto,
            hlim,
            ipaddress.IPv6Address(src).packed,
            ipaddress.IPv6Address(dst).packed,
        )
        + l4
    )


def tcp_hdr(sport, dport, seq, ack, flags, *, window=502, options=b"", urg=0):
    doff = 5 + len(options) // 4
    return (
        struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack, doff << 4, flags, window, 0, urg)
        + options
    )


def with_l4_csum(pkt: bytes, *, partial=False) -> bytes:
    """Fill the TCP/UDP checksum; partial: the folded pseudo-header sum only
    (what the kernel leaves for NEEDS_CSUM / CHECKSUM_PARTIAL)."""
    v6 = pkt[0] >> 4 == 6
    l3 = 40 if v6 else (pkt[0] & 15) * 4
    proto = pkt[6] if v6 else pkt[9]
    at = l3 + (16 if proto == TCP else 6)
    pkt = bytearray(pkt)
    pkt[at : at + 2] = b"\0\0"
    src, dst = addrs(bytes(pkt))
    ps = pseudo_sum(src, dst, proto, len(pkt) - l3)
    if partial:
        c = ps
    else:
        c = checksum(bytes(pkt[l3:]), ps)
        if proto == UDP and c == 0:
            c = 0xFFFF
    pkt[at : at + 2] = struct.pack("!H", c)
    return bytes(pkt)


def tcp_packet(
    v6, src, dst, sport, dport, seq, ack, flags, payload, *, ip_kw=None, tcp_kw=None, partial=False
):
    l4 = tcp_hdr(sport, dport, seq, ack, flags, **(tcp_kw or {})) + payload
    pkt = (ip6 if v6 else ip4)(TCP, src, dst, l4, **(ip_kw or {}))
    return with_l4_csum(pkt, partial=partial)


def udp_packet(v6, src, dst, sport, dport, payload, *, ip_kw=None, partial=False, no_csum=False):
    l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    pkt = (ip6 if v6 else ip4)(UDP, src, dst, l4, **(ip_kw or {}))
    return pkt if no_csum else with_l4_csum(pkt, partial=partial)


def vnet(flags=0, gso_type=0, hdr_len=0, gso_size=0, csum_start=0, csum_offset=0) -> bytes:
    return struct.pack("=BBHHHH", flags, gso_type, hdr_len, gso_size, csum_start, csum_offset)


def unvnet(b: bytes):
    return struct.unpack("=BBHHHH", b[:10])


# ------------------------------------------------------------------ split (kernel GSO)


def split(hdr, pkt: bytes, mtu: int):
    """Segments of one TUN read (hdr = the 6 vnet fields), as the kernel's GSO
    would have sent them.  Raises Malformed / TooBig."""
    flags, gso_type, hdr_len, gso_size, cs, co = hdr
    if gso_type == GSO_NONE:
        if not pkt:
            raise Malformed("empty")
        pkt = bytearray(pkt)
        if flags & NEEDS_CSUM:
            if cs >= len(pkt) or cs + co + 2 > len(pkt):
                raise Malformed("csum out of range")
            initial = struct.unpack("!H", pkt[cs + co : cs + co + 2])[0]
            pkt[cs + co : cs + co + 2] = b"\0\0"
            c = checksum(bytes(pkt[cs:]), initial)
            ver = pkt[0] >> 4
            proto = pkt[9] if ver == 4 else pkt[6] if len(pkt) >= 40 else None
            if c == 0 and co == 6 and proto == UDP:
                c = 0xFFFF
            pkt[cs + co : cs + co + 2] = struct.pack("!H", c)
        if len(pkt) > mtu:
            raise TooBig()
        return [bytes(pkt)]
    base = gso_type & ~GSO_ECN
    if len(pkt) < 20:
        raise Malformed("short")
    ver = pkt[0] >> 4
    if base in (GSO_TCPV4, GSO_TCPV6):
        if (base == GSO_TCPV4) != (ver == 4) or ver not in (4, 6):
            raise Malformed("version")
        proto = TCP
    elif base == GSO_UDP_L4 and not gso_type & GSO_ECN and ver in (4, 6):
        proto = UDP
    else:
        raise Malformed("gso type")
    if ver == 4:
        l3 = (pkt[0] & 15) * 4
        if l3 < 20 or l3 > len(pkt) or pkt[9] != proto:
            raise Malformed("ip4")
        if struct.unpack("!H", pkt[6:8])[0] & 0x3FFF:
            raise Malformed("fragment")
    else:
        if len(pkt) < 40 or pkt[6] != proto:
            raise Malformed("ip6")
        l3 = 40
    if cs != l3 or co != (16 if proto == TCP else 6):
        raise Malformed("csum start/offset")
    if proto == TCP:
        if len(pkt) < l3 + 20:
            raise Malformed("tcp short")
        l4h = (pkt[l3 + 12] >> 4) * 4
        if l4h < 20 or len(pkt) < l3 + l4h:
            raise Malformed("tcp doff")
    else:
        if len(pkt) < l3 + 8:
            raise Malformed("udp short")
        l4h = 8
    h = l3 + l4h
    if hdr_len > len(pkt) or gso_size == 0 or len(pkt) == h:
        raise Malformed("lengths")
    payload = pkt[h:]
    if h + min(gso_size, len(payload)) > mtu:
        raise TooBig()
    chunks = [payload[i : i + gso_size] for i in range(0, len(payload), gso_size)]
    out = []
    src, dst = addrs(pkt)
    for k, chunk in enumerate(chunks):
        seg = bytearray(pkt[:h] + chunk)
        total = len(seg)
        if ver == 4:
            ident = (struct.unpack("!H", pkt[4:6])[0] + k) & 0xFFFF
            seg[2:6] = struct.pack("!HH", total, ident)
            seg[10:12] = b"\0\0"
            seg[10:12] = struct.pack("!H", checksum(bytes(seg[:l3])))
        else:
            seg[4:6] = struct.pack("!H", total - 40)
        if proto == TCP:
            seq = (struct.unpack("!I", pkt[l3 + 4 : l3 + 8])[0] + k * gso_size) & 0xFFFFFFFF
            seg[l3 + 4 : l3 + 8] = struct.pack("!I", seq)
            fl = pkt[l3 + 13]
            if k < len(chunks) - 1:
                fl &= ~(FIN | PSH)
            if k > 0:
                fl &= ~CWR
            seg[l3 + 13] = fl
        else:
            seg[l3 + 4 : l3 + 6] = struct.pack("!H", total - l3)
        seg[l3 + co : l3 + co + 2] = b"\0\0"
        c = checksum(bytes(seg[l3:]), pseudo_sum(src, dst, proto, total - l3))
        if proto == UDP and c == 0:
            c = 0xFFFF
        seg[l3 + co : l3 + co + 2] = struct.pack("!H", c)
        out.append(bytes(seg))
    return out


# ------------------------------------------------------------------ coalesce (GRO)
# The kernel's GRO rules (net/ipv4/tcp_offload.c tcp_gro_receive,
# net/ipv4/udp_offload.c udp_gro_receive_segment, net/ipv4/af_inet.c
# inet_gro_receive, net/ipv6/ip6_offload.c ipv6_gro_receive, include/net/gro.h
# inet_gro_flush), with the order of the wire kept: a packet without readable
# ports closes every open item between its addresses.


def _pair(pkt: bytes):
    """(version, source, destination) if the addresses can be read."""
    if len(pkt) < 20 or len(pkt) > MAX_PACKET:
        return None
    ver = pkt[0] >> 4
    if ver == 4:
        return (4, pkt[12:16], pkt[16:20])
    if ver == 6 and len(pkt) >= 40:
        return (6, pkt[8:24], pkt[24:40])
    return None


def _info(pkt: bytes, tcp_on: bool, udp_on: bool):
    """None if not keyed (no ports); else dict(key, cand, l3, l4h, pay, proto)."""
    if _pair(pkt) is None:
        return None
    ver = pkt[0] >> 4
    if ver == 4:
        l3 = (pkt[0] & 15) * 4
        if l3 < 20 or len(pkt) < l3:
            return None
        flags = struct.unpack("!H", pkt[6:8])[0]
        if flags & 0x1FFF:  # a later fragment
            return None
        proto = pkt[9]
        # only DF may be set of 0x8000 (reserved), 0x4000 (DF), 0x2000 (MF)
        cand_ip = (
            l3 == 20
            and flags in (0, 0x4000)
            and struct.unpack("!H", pkt[2:4])[0] == len(pkt)
            and ipv4_hdr_ok(pkt)
        )
    else:
        l3, proto = 40, pkt[6]
        cand_ip = struct.unpack("!H", pkt[4:6])[0] + 40 == len(pkt)
    if proto == TCP:
        if len(pkt) < l3 + 20:
            return None
        l4h = (pkt[l3 + 12] >> 4) * 4
        if l4h < 20 or len(pkt) < l3 + l4h:
            return None
        fl = pkt[l3 + 13]
        cand = cand_ip and tcp_on and fl & ACK and not fl & (SYN | RST | URG) and len(pkt) > l3 + l4h
    elif proto == UDP:
        if len(pkt) < l3 + 8:
            return None
        l4h = 8
        no_csum = pkt[l3 + 6 : l3 + 8] == b"\0\0"
        cand = (
            cand_ip
            and udp_on
            and not no_csum
            and len(pkt) > l3 + 8
            and struct.unpack("!H", pkt[l3 + 4 : l3 + 6])[0] == len(pkt) - l3
        )
    else:
        return None
    src, dst = addrs(pkt)
    return {
        "key": (ver, proto, src, dst, pkt[l3 : l3 + 4]),
        "cand": bool(cand),
        "l3": l3,
        "l4h": l4h,
        "pay": len(pkt) - l3 - l4h,
        "proto": proto,
        "v6": ver == 6,
    }


class _Item:
    def __init__(self, pkt, info):
        self.pkts, self.infos = [pkt], [info]
        self.pair = _pair(pkt)
        self.open = bool(info and info["cand"])
        self.fixed_id = False
        self.gso = info["pay"] if info else 0
        self.total = len(pkt)
        if self.open and info["proto"] == TCP:
            l3 = info["l3"]
            self.next_seq = (struct.unpack("!I", pkt[l3 + 4 : l3 + 8])[0] + info["pay"]) & 0xFFFFFFFF
            if pkt[l3 + 13] & (PSH | FIN):
                self.open = False


def _ipv4_id_ok(item, pkt):
    """IDs count up by one from the head's; with DF they may instead all be the
    head's (the choice made by the second packet)."""
    head = item.pkts[0]
    step = (struct.unpack("!H", pkt[4:6])[0] - struct.unpack("!H", head[4:6])[0]) & 0xFFFF
    df = bool(pkt[6] & 0x40)
    if len(item.pkts) == 1:
        return step == 1 or (df and step == 0)
    if item.fixed_id:
        return step == 0
    return step == len(item.pkts)


def _can_append(item, pkt, info):
    head, hi = item.pkts[0], item.infos[0]
    if not hi["v6"]:
        if head[1] != pkt[1] or head[8] != pkt[8] or head[6] != pkt[6]:
            return False
        if not _ipv4_id_ok(item, pkt):
            return False
    elif head[:4] != pkt[:4] or head[7] != pkt[7]:
        return False
    if info["pay"] > item.gso or item.total + info["pay"] > MAX_PACKET:
        return False
    if info["proto"] == UDP:
        return len(item.pkts) < UDP_MAX_SEGS
    l3 = info["l3"]
    ht, pt = head[l3:], pkt[l3:]
    if pt[13] & CWR or ht[12] != pt[12] or (ht[13] ^ pt[13]) & ~(CWR | FIN | PSH):
        return False
    if (
        hi["l4h"] != info["l4h"]
        or ht[8:12] != pt[8:12]
        or ht[14:16] != pt[14:16]
        or ht[20 : hi["l4h"]] != pt[20 : info["l4h"]]
    ):
        return False
    return struct.unpack("!I", pt[4:8])[0] == item.next_seq


def _emit(item):
    """(vnet header bytes, packet bytes, packet count)"""
    if len(item.pkts) == 1:
        return vnet(), item.pkts[0], 1
    head, hi = item.pkts[0], item.infos[0]
    l3, h = hi["l3"], hi["l3"] + hi["l4h"]
    pkt = bytearray(head + b"".join(p[h:] for p in item.pkts[1:]))
    total = len(pkt)
    if hi["v6"]:
        pkt[4:6] = struct.pack("!H", total - 40)
    else:
        pkt[2:4] = struct.pack("!H", total)
        pkt[10:12] = b"\0\0"
        pkt[10:12] = struct.pack("!H", checksum(bytes(pkt[:l3])))
    src, dst = addrs(bytes(pkt))
    if hi["proto"] == TCP:
        pkt[l3 + 13] |= item.pkts[-1][l3 + 13] & (PSH | FIN)
        gso_type = GSO_TCPV6 if hi["v6"] else GSO_TCPV4
        if pkt[l3 + 13] & CWR:
            gso_type |= GSO_ECN
        co = 16
    else:
        pkt[l3 + 4 : l3 + 6] = struct.pack("!H", total - l3)
        gso_type, co = GSO_UDP_L4, 6
    pkt[l3 + co : l3 + co + 2] = struct.pack("!H", pseudo_sum(src, dst, hi["proto"], total - l3))
    return vnet(NEEDS_CSUM, gso_type, h, item.gso, l3, co), bytes(pkt), len(item.pkts)


def coalesce(packets, tcp=True, udp=True):
    """[(vnet header, packet, count)] for a batch of IP packets."""
    items, flows = [], {}
    for pkt in packets:
        info = _info(pkt, tcp, udp)
        flow = flows.get(info["key"]) if info else None
        if flow is not None and info["cand"] and flow.open and _can_append(flow, pkt, info):
            head_ok = True
            if len(flow.pkts) == 1:  # the head is checked once, now
                head_ok = l4_ok(flow.pkts[0], flow.infos[0]["l3"])
            if head_ok and l4_ok(pkt, info["l3"]):
                if len(flow.pkts) == 1 and not info["v6"]:
                    flow.fixed_id = pkt[4:6] == flow.pkts[0][4:6]
                flow.pkts.append(pkt)
                flow.infos.append(info)
                flow.total += info["pay"]
                if info["proto"] == TCP:
                    flow.next_seq = (flow.next_seq + info["pay"]) & 0xFFFFFFFF
                    if pkt[info["l3"] + 13] & (PSH | FIN):
                        flow.open = False
                if info["pay"] < flow.gso:
                    flow.open = False
                continue
            if head_ok:  # this one is bad: alone, in its place
                info = dict(info, cand=False)
        if flow is not None:
            flow.open = False  # whatever comes next comes after it
        elif info is None and _pair(pkt) is not None:
            for it in items:  # no ports: a barrier for its addresses
                if it.pair == _pair(pkt):
                    it.open = False
        item = _Item(pkt, info)
        items.append(item)
        if info and (info["cand"] or flow is None):
            flows[info["key"]] = item
    return [_emit(it) for it in items]
