"""Packets for the GRO rule tests (test_gro_kernel_rules.py) and their run
through a real TUN (tun_gro_rules_child.py): UDP datagrams tagged with their
index, behind IPv6 extension headers, cut into IPv4/IPv6 fragments, or with a
checksum of 0 that would otherwise verify.  Built with offload_ref."""

import ipaddress
import random
import struct

from tests.dataplane import offload_ref as R

DEST_OPTIONS, FRAGMENT = 60, 44  # IPv6 next header values (RFC 8200)


def body(i, n=1200):
    """n bytes: the index i, then bytes fixed by i."""
    return struct.pack("!I", i) + random.Random(i).randbytes(n - 4)


def index_of(data):
    return struct.unpack("!I", data[:4])[0]


def _packed(a):
    return ipaddress.ip_address(a).packed


def _udp(src, dst, sport, dport, payload):
    """A UDP header and payload with its checksum (0 sent as 0xFFFF)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    c = R.checksum(udp, R.pseudo_sum(_packed(src), _packed(dst), R.UDP, len(udp))) or 0xFFFF
    return udp[:6] + struct.pack("!H", c) + udp[8:]


def udp6_ext(src, dst, sport, dport, i, next_header, n=1200):
    """Datagram i behind one IPv6 extension header: DEST_OPTIONS (a PadN
    option, 8 bytes) or FRAGMENT (offset 0, M 0: an atomic fragment, RFC
    6946, which the receiver takes as a whole datagram)."""
    udp = _udp(src, dst, sport, dport, body(i, n))
    if next_header == DEST_OPTIONS:
        ext = bytes([R.UDP, 0, 1, 4, 0, 0, 0, 0])
    else:
        ext = struct.pack("!BBHI", R.UDP, 0, 0, 0x5EED0000 + i)
    return R.ip6(next_header, src, dst, ext + udp)


def fragments(src, dst, sport, dport, i, n=2000, first_len=1200):
    """Datagram i cut into two fragments as a router with a smaller MTU
    would: IPv4 (MF, then offset first_len / 8) or IPv6 (a Fragment header)."""
    udp = _udp(src, dst, sport, dport, body(i, n))
    if ipaddress.ip_address(src).version == 4:
        a = R.ip4(R.UDP, src, dst, udp[:first_len], ident=0x7000 + i, df=False, frag=0x2000)
        b = R.ip4(R.UDP, src, dst, udp[first_len:], ident=0x7000 + i, df=False, frag=first_len // 8)
        return a, b
    ident = 0x5EED0000 + i
    a = R.ip6(FRAGMENT, src, dst, struct.pack("!BBHI", R.UDP, 0, 1, ident) + udp[:first_len])
    b = R.ip6(
        FRAGMENT, src, dst, struct.pack("!BBHI", R.UDP, 0, (first_len // 8) << 3, ident) + udp[first_len:]
    )
    return a, b


def udp6_zero_csum(src, dst, sport, dport, i, n=1200):
    """Datagram i with checksum field 0 although its sum verifies (its true
    checksum is 0, which RFC 768 sends as 0xFFFF): a peer can craft it.  The
    receiving stack drops it (RFC 8200 section 8.1: Udp6InCsumErrors) unless
    the socket set UDP_NO_CHECK6_RX; a merge into a super-packet would give it
    a checksum and deliver it."""
    payload = bytearray(body(i, n))
    payload[-2:] = b"\0\0"
    udp = struct.pack("!HHHH", sport, dport, 8 + n, 0) + bytes(payload)
    pseudo = R.pseudo_sum(_packed(src), _packed(dst), R.UDP, len(udp))
    payload[-2:] = struct.pack("!H", 0xFFFF - R.ones_sum(udp, pseudo))
    udp = udp[:8] + bytes(payload)
    assert R.ones_sum(udp, pseudo) == 0xFFFF and udp[6:8] == b"\0\0"
    return R.ip6(R.UDP, src, dst, udp)
