"""The ICMP errors for packets no peer takes (vpncrypt.protocol.icmp_errors):
the bytes checked by scapy (an independent parser that recomputes the
checksums), the numbers literal from the RFCs; and the rate limiter's two
buckets at given times, with the kernel's documented defaults."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_Redirect,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
)
from scapy.packet import Raw

from vpncrypt.protocol.icmp_errors import ErrorRateLimiter, choose_source6, unreachable
from vpncrypt.dataplane.unreachable import UnreachableReplies, ipv6_addresses

ME6 = bytes.fromhex("fd740000000000000000000000000001")


def _checksums_right(pkt, layer) -> None:
    """The same error built by scapy from its fields and the quoted bytes
    (scapy computes the checksums, ICMPv6's over the pseudo-header) must be
    byte for byte the one we made."""
    if layer is ICMP:
        quoted = bytes(pkt)[28:]
        again = IP(src=pkt.src, dst=pkt.dst, tos=pkt.tos, ttl=pkt.ttl, id=pkt.id, flags=pkt.flags)
        again = again / ICMP(type=3, code=1) / Raw(quoted)
    else:
        quoted = bytes(pkt)[48:]
        again = IPv6(src=pkt.src, dst=pkt.dst, hlim=pkt.hlim) / ICMPv6DestUnreach(code=3) / Raw(quoted)
    assert bytes(again) == bytes(pkt)


def test_ipv4_host_unreachable_quotes_the_datagram():
    orig = IP(src="10.74.0.1", dst="10.74.0.9", tos=0x10, id=7) / ICMP(type=8, id=3, seq=1) / Raw(b"x" * 56)
    raw = bytes(orig)
    err = unreachable(raw)
    pkt = IP(err)
    assert pkt.version == 4 and pkt.proto == 1 and pkt.ttl == 64
    assert pkt.src == "10.74.0.9" and pkt.dst == "10.74.0.1"  # from the destination (see the module)
    assert pkt.tos == 0xC0 | 0x10
    assert pkt[ICMP].type == 3 and pkt[ICMP].code == 1
    assert err[28:] == raw  # 84 bytes: all of it
    assert pkt.len == len(err) == 20 + 8 + 84
    _checksums_right(pkt, ICMP)


def test_ipv4_quotes_at_most_576_bytes_in_all():
    raw = bytes(IP(src="10.74.0.1", dst="10.74.0.9") / UDP(sport=5, dport=6) / Raw(b"y" * 1400))
    err = unreachable(raw, bytes([10, 74, 0, 254]))
    assert len(err) == 576
    pkt = IP(err)
    assert pkt.src == "10.74.0.254"
    assert err[28:] == raw[:548]
    assert isinstance(pkt[ICMP].payload, IPerror)
    _checksums_right(pkt, ICMP)


def test_ipv6_address_unreachable_with_the_pseudo_header():
    orig = IPv6(src="fd74::1", dst="fd74::9") / ICMPv6EchoRequest(id=1, seq=2, data=b"z" * 56)
    raw = bytes(orig)
    err = unreachable(raw, ME6)
    pkt = IPv6(err)
    assert pkt.nh == 58 and pkt.hlim == 64 and pkt.src == "fd74::1" and pkt.dst == "fd74::1"
    assert pkt[ICMPv6DestUnreach].type == 1 and pkt[ICMPv6DestUnreach].code == 3
    assert err[48:] == raw
    assert pkt.plen == 8 + len(raw)
    _checksums_right(pkt, ICMPv6DestUnreach)


def test_ipv6_error_at_most_1280_bytes():
    raw = bytes(IPv6(src="2001:db8::5", dst="fd74::9") / UDP(sport=1, dport=2) / Raw(b"q" * 1400))
    err = unreachable(raw)
    assert len(err) == 1280
    pkt = IPv6(err)
    assert pkt.src == "fd74::9" and pkt.dst == "2001:db8::5"  # no address given: the destination's
    assert err[48:] == raw[:1232]
    _checksums_right(pkt, ICMPv6DestUnreach)


@pytest.mark.parametrize(
    "why, packet",
    [
        ("an ICMP error", IP(src="10.74.0.1", dst="10.74.0.9") / ICMP(type=3, code=1) / Raw(b"a" * 28)),
        ("time exceeded", IP(src="10.74.0.1", dst="10.74.0.9") / ICMP(type=11) / Raw(b"a" * 28)),
        ("an unknown ICMP type", IP(src="10.74.0.1", dst="10.74.0.9") / ICMP(type=42)),
        ("a non-first fragment", IP(src="10.74.0.1", dst="10.74.0.9", frag=185) / Raw(b"f" * 64)),
        ("a multicast destination", IP(src="10.74.0.1", dst="224.0.0.251") / UDP()),
        ("the broadcast destination", IP(src="10.74.0.1", dst="255.255.255.255") / UDP()),
        ("a class E destination", IP(src="10.74.0.1", dst="240.0.0.1") / UDP()),
        ("an unspecified source", IP(src="0.0.0.0", dst="10.74.0.9") / UDP()),
        ("a loopback source", IP(src="127.0.0.1", dst="10.74.0.9") / UDP()),
        ("a multicast source", IP(src="224.0.0.1", dst="10.74.0.9") / UDP()),
        ("a broadcast source", IP(src="255.255.255.255", dst="10.74.0.9") / UDP()),
        ("an ICMPv6 error", IPv6(src="fd74::1", dst="fd74::9") / ICMPv6TimeExceeded() / Raw(b"b" * 40)),
        (
            "an ICMPv6 error after a hop-by-hop header",
            IPv6(src="fd74::1", dst="fd74::9") / IPv6ExtHdrHopByHop() / ICMPv6DestUnreach() / Raw(b"c" * 40),
        ),
        ("a redirect", IPv6(src="fe80::1", dst="fd74::9") / ICMPv6ND_Redirect()),
        ("an IPv6 multicast destination", IPv6(src="fd74::1", dst="ff02::1") / UDP()),
        ("an IPv6 unspecified source", IPv6(src="::", dst="fd74::9") / UDP()),
        ("an IPv6 loopback source", IPv6(src="::1", dst="fd74::9") / UDP()),
        ("an IPv6 multicast source", IPv6(src="ff02::1", dst="fd74::9") / UDP()),
    ],
)
def test_never_for(why, packet):
    assert unreachable(bytes(packet)) is None, why


@pytest.mark.parametrize(
    "why, raw",
    [
        ("empty", b""),
        ("not IP", b"\x20" + bytes(39)),
        ("IPv4 cut inside the header", bytes(IP(src="10.74.0.1", dst="10.74.0.9") / UDP())[:16]),
        (
            "IPv4 shorter than its length",
            bytes(IP(src="10.74.0.1", dst="10.74.0.9") / UDP() / Raw(b"d" * 20))[:40],
        ),
        ("IPv4 header length 4 words", b"\x44" + bytes(IP(src="10.74.0.1", dst="10.74.0.9") / UDP())[1:]),
        ("IPv4 ICMP without its type", bytes(IP(src="10.74.0.1", dst="10.74.0.9", proto=1))),
        ("IPv6 cut inside the header", bytes(IPv6(src="fd74::1", dst="fd74::9") / UDP())[:39]),
        (
            "IPv6 shorter than its payload",
            bytes(IPv6(src="fd74::1", dst="fd74::9") / UDP() / Raw(b"e" * 20))[:60],
        ),
        ("IPv6 ICMPv6 without its type", bytes(IPv6(src="fd74::1", dst="fd74::9", nh=58, plen=0)) + b""),
        (
            "IPv6 cut inside an extension header",
            bytes(IPv6(src="fd74::1", dst="fd74::9", nh=0, plen=1)) + b"\x3a",
        ),
    ],
)
def test_never_for_malformed(why, raw):
    assert unreachable(raw) is None, why


def test_first_fragments_and_ipv6_fragments_are_answered():
    first = IP(src="10.74.0.1", dst="10.74.0.9", flags="MF") / UDP() / Raw(b"g" * 64)
    assert IP(unreachable(bytes(first)))[ICMP].type == 3
    # RFC 4443 forbids no fragment; the kernel answers a later one too
    later = IPv6(src="fd74::1", dst="fd74::9") / IPv6ExtHdrFragment(offset=100, nh=58) / Raw(b"\x01" * 24)
    assert IPv6(unreachable(bytes(later)))[ICMPv6DestUnreach].code == 3
    echo = IPv6(src="fd74::1", dst="fd74::9") / IPv6ExtHdrFragment(offset=0) / ICMPv6EchoReply()
    assert unreachable(bytes(echo)) is not None


def test_choose_source6():
    ll = bytes.fromhex("fe800000000000000000000000000001")
    other = bytes.fromhex("fd740000000000000000000000000002")
    assert choose_source6(other, [ll, ME6, other]) == other  # the sender is this host: its address
    assert choose_source6(bytes(15) + b"\x05", [ll, ME6]) == ME6  # not link-local first
    assert choose_source6(bytes(16), [ll]) == ll
    assert choose_source6(bytes(16), []) is None


def test_global_limit_1000_a_second_bursts_of_50():
    lim = ErrorRateLimiter()
    dests = [bytes([10, 0, i // 256, i % 256]) for i in range(200)]
    assert sum(lim.allow(d, 100.0) for d in dests) == 50  # the burst, at one instant
    assert not lim.allow(dests[199], 100.0)
    # 1000 a second: 1/128 s brings 7.8125 tokens, 1/1024 s more 0.9765625
    assert sum(lim.allow(d, 100.0078125) for d in dests[50:100]) == 7
    assert lim.global_room(100.0087890625) and lim.allow(dests[150], 100.0087890625)
    assert not lim.global_room(100.0087890625)
    assert sum(lim.allow(d, 200.0) for d in dests[:100]) == 50  # never more than the burst


def test_per_destination_one_a_second_six_saved_up():
    lim = ErrorRateLimiter()
    a, b = b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02"
    got = [lim.allow(a, 10.0 + 0.001 * i) for i in range(10)]
    assert got == [True] * 6 + [False] * 4  # a new destination starts with 6
    assert lim.allow(b, 10.01)  # another destination has its own
    assert not lim.allow(a, 10.5)
    assert lim.allow(a, 11.0) and not lim.allow(a, 11.1)  # 1000 ms per error
    assert [lim.allow(a, 30.0 + 0.001 * i) for i in range(7)] == [True] * 6 + [False]  # 6 saved at most


def test_destinations_remembered_are_bounded():
    lim = ErrorRateLimiter(max_destinations=4)
    for i in range(4):
        assert all(lim.allow(bytes([10, 0, 0, i]), 1.0) for _ in range(6))
    assert not lim.allow(b"\x0a\x00\x00\x09", 2.0)  # all four busy: refused, not remembered
    assert lim.allow(b"\x0a\x00\x00\x09", 7.0)  # 6 s on, their buckets are full: forgotten
    assert len(lim._dest) == 1


class _Inner:
    def __init__(self):
        self.written = []

    def write_packets(self, packets):
        self.written.extend(packets)
        return len(packets), 0


def test_replies_answer_a_super_packet_once_and_count_the_limited():
    # a TSO super-packet split: 4 segments, each where the one before ended
    seg = [
        bytes(
            IP(src="10.74.0.1", dst="10.74.0.9") / TCP(sport=4, dport=5, seq=1 + 1000 * i) / Raw(b"h" * 1000)
        )
        for i in range(4)
    ]
    other = bytes(IP(src="10.74.0.1", dst="10.74.0.8") / UDP())
    inner = _Inner()
    replies = UnreachableReplies(ErrorRateLimiter())
    assert replies.answer(seg + [other], inner, 5.0, offloaded=True) == (2, 0)
    assert inner.written[0][28:] == seg[0][:548]  # the first segment quoted
    # not a continuation (a retransmission of the first, UDP datagrams of one
    # flow): each answered, within the limits
    inner = _Inner()
    replies = UnreachableReplies(ErrorRateLimiter())
    assert replies.answer([seg[0], seg[0], other, other], inner, 5.0, offloaded=True) == (4, 0)
    # without a vnet header each packet is one: 6 for the sender, then the limit
    inner = _Inner()
    replies = UnreachableReplies(ErrorRateLimiter())
    assert replies.answer(seg + seg + [other], inner, 5.0) == (6, 3)
    assert len(inner.written) == 6


def test_ipv6_addresses_from_proc(tmp_path):
    f = tmp_path / "if_inet6"
    f.write_text(
        "fd740000000000000000000000000001 05 40 00 80     wg0\n"
        "fe800000000000000000000000000001 05 40 20 80     wg0\n"
        "00000000000000000000000000000001 01 80 10 80       lo\n"
    )
    assert ipv6_addresses("wg0", str(f)) == [ME6, bytes.fromhex("fe800000000000000000000000000001")]
    assert ipv6_addresses("wg1", str(f)) == []


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=1600), st.integers(0, 39), st.binary(min_size=1, max_size=1))
def test_any_bytes_give_an_error_or_none_never_an_exception(tail, at, byte):
    """Random bytes, and valid packets with one byte changed: None or one
    error within the RFCs' sizes, never an exception."""
    valid = [
        bytes(IP(src="10.74.0.1", dst="10.74.0.9") / UDP() / Raw(tail)),
        bytes(IPv6(src="fd74::1", dst="fd74::9") / IPv6ExtHdrHopByHop() / UDP() / Raw(tail)),
    ]
    for raw in [tail, *[v[:at] + byte + v[at + 1 :] for v in valid]]:
        err = unreachable(raw)
        assert err is None or len(err) <= (576 if err[0] >> 4 == 4 else 1280)
