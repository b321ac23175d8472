"""tests/packets.py, the tests' packet builder, against known answers."""

import ipaddress
import struct

from tests import packets


def test_checksum_rfc1071_example():
    # RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2; the checksum is its complement
    assert packets.checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0xFFFF - 0xDDF2


def test_checksum_of_a_known_ipv4_header():
    # a textbook header (192.168.0.1 -> 192.168.0.199, UDP, TTL 64, DF, length 115): checksum b861
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert packets.checksum(hdr) == 0xB861
    assert packets.checksum(hdr[:10] + bytes.fromhex("b861") + hdr[12:]) == 0


def test_ipv4_layout():
    p = packets.ipv4("10.0.0.1", "10.0.0.2", b"abc", proto=6, ttl=9, ident=0x1234, header_checksum=True)
    assert len(p) == 23 and p[0] == 0x45 and p[9] == 6 and p[8] == 9
    assert struct.unpack(">HH", p[2:6]) == (23, 0x1234)
    assert p[12:16] == bytes([10, 0, 0, 1]) and p[16:20] == bytes([10, 0, 0, 2]) and p[20:] == b"abc"
    assert packets.checksum(p[:20]) == 0
    assert packets.ipv4("10.0.0.1", "10.0.0.2", b"abc")[10:12] == b"\x00\x00"


def test_ipv6_layout():
    p = packets.ipv6("fd00::1", "fd00::2", b"hello")
    assert len(p) == 45 and p[0] >> 4 == 6
    assert struct.unpack(">HBB", p[4:8]) == (5, 17, 64)
    assert p[8:24] == ipaddress.IPv6Address("fd00::1").packed
    assert p[24:40] == ipaddress.IPv6Address("fd00::2").packed and p[40:] == b"hello"


def _pseudo_sum_ok(p, hdr_len, proto):
    # a receiver's check: the checksum over pseudo-header + transport bytes is 0
    v4 = p[0] >> 4 == 4
    src, dst = (p[12:16], p[16:20]) if v4 else (p[8:24], p[24:40])
    seg = p[hdr_len:]
    pseudo = (
        src
        + dst
        + (struct.pack(">BBH", 0, proto, len(seg)) if v4 else struct.pack(">IxxxB", len(seg), proto))
    )
    return packets.checksum(pseudo + seg) == 0


def test_udp_checksums_verify_on_both_families():
    for src, dst, hl in (("10.1.0.1", "10.1.0.2", 20), ("fd00::1", "fd00::2", 40)):
        p = packets.udp(src, dst, 40000, 53, b"query")
        assert struct.unpack(">HHH", p[hl : hl + 6]) == (40000, 53, 13)
        assert _pseudo_sum_ok(p, hl, 17)


def test_tcp_checksums_verify_on_both_families():
    for src, dst, hl in (("10.1.0.1", "10.1.0.2", 20), ("fd00::1", "fd00::2", 40)):
        p = packets.tcp(src, dst, 1234, 80, b"GET /", seq=7, ack=9, flags=packets.TCP_PSH | packets.TCP_ACK)
        assert struct.unpack(">HHII", p[hl : hl + 12]) == (1234, 80, 7, 9)
        assert p[hl + 12] == 0x50 and p[hl + 13] == 0x18
        assert _pseudo_sum_ok(p, hl, 6)


def test_ipv4_options_through_udp():
    p = packets.udp("10.1.0.1", "10.1.0.2", 9999, 12345, b"reply", ident=7, df=True, ttl=3)
    assert struct.unpack(">HHH", p[2:8]) == (33, 7, 0x4000) and p[8] == 3
    assert packets.checksum(p[:20]) == 0 and _pseudo_sum_ok(p, 20, 17)


def test_udp_known_answer():
    # 10.1.0.1:9999 -> 10.1.0.2:12345 "reply", ident 7, DF, TTL 64, as an independent
    # hand-written builder (tests/dataplane/tun_child.py on 2026-12-01) made it
    want = bytes.fromhex("4500002100074000401126c10a0100010a010002270f3039000d38b57265706c79")
    assert packets.udp("10.1.0.1", "10.1.0.2", 9999, 12345, b"reply", ident=7, df=True) == want
