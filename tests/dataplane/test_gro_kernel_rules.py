"""The daemon's GRO (packets coalesced into super-packets written to the TUN)
against the Linux kernel's own GRO rules and against the order of the wire.

Order (issue 17, F7): a packet whose ports cannot be read (an IPv4 fragment,
IPv6 extension headers, ICMP) passes alone, and no packet of its address pair
that came after it on the wire may be merged into a super-packet that is
written before it; a packet left alone for its checksum likewise keeps its
place in its flow.

Merges (issue 17, F8), each rule from net/ipv4/tcp_offload.c tcp_gro_receive,
net/ipv4/udp_offload.c udp_gro_receive_segment, af_inet.c inet_gro_receive and
include/net/gro.h inet_gro_flush: the TCP flag word from byte 12 on (data
offset, the four reserved bits with AccECN's AE, the flags but CWR/FIN/PSH, the
window) must be equal; IPv4 IDs fixed (with DF) or counting up by one; no UDP
checksum 0; no IPv4 header with the reserved fragment bit.  An IPv6 UDP
datagram with checksum 0 is never merged (a merge would give it a valid
checksum, and the receiving stack drops it: RFC 8200 section 8.1).

Every boundary is a literal from those sources: byte 12 of the TCP header,
the bits 0x8000 (reserved), 0x4000 (DF), 0x2000 (MF) of the IPv4 flags word,
next headers 44 (Fragment) and 60 (Destination Options)."""

import random

import pytest

from tests.dataplane import offload_ref as R
from tests.dataplane.gro_packets import DEST_OPTIONS, FRAGMENT, body, fragments, udp6_ext, udp6_zero_csum
from vpncrypt._native import ffi, lib
from tests.dataplane.offload_helpers import gro_coalesce

V4 = ("10.1.0.1", "10.1.0.2")
V6 = ("fd00:1::1", "fd00:1::2")
OTHER4 = ("10.1.0.3", "10.1.0.2")


def udp4(i, n=1200, ident=None, **ip):
    return R.udp_packet(
        False, *V4, 40001, 5202, body(i, n), ip_kw={"ident": 100 + i if ident is None else ident, **ip}
    )


def udp6(i, n=1200, **ip):
    return R.udp_packet(True, *V6, 40001, 5202, body(i, n), ip_kw=ip)


def tcp4(k, mss=1000, *, seq0=5000, ident=None, flags=R.ACK, byte12=None, **ip):
    p = R.tcp_packet(
        False,
        *V4,
        40000,
        5201,
        seq0 + k * mss,
        1,
        flags,
        body(k, mss),
        ip_kw={"ident": 100 + k if ident is None else ident, **ip},
    )
    if byte12 is not None:  # data offset and reserved bits
        p = bytearray(p)
        p[32] = byte12
        p = R.with_l4_csum(bytes(p))
    return p


def ext6(i, next_header):
    return udp6_ext(*V6, 40001, 5202, i, next_header)


def v4_fragments(i):
    return fragments(*V4, 40001, 5202, i)


def writes(packets, tcp=True, udp=True):
    """gro_coalesce, checked against the independent model."""
    got = gro_coalesce(packets, tcp=tcp, udp=udp)
    assert got == [(h + p, n) for h, p, n in R.coalesce(packets, tcp=tcp, udp=udp)]
    assert sum(n for _, n in got) == len(packets)
    return got


def delivered(got):
    """The packets the kernel takes from these writes, in order (a super-packet
    segmented as its GSO would)."""
    out = []
    for frame, n in got:
        if n == 1:
            assert frame[:10] == b"\0" * 10
            out.append(frame[10:])
        else:
            segs = R.split(R.unvnet(frame), frame[10:], 65535)
            assert len(segs) == n
            out += segs
    return out


def order(out, pkts):
    """Where each delivered packet was in the input (None: changed on the way)."""
    return [pkts.index(p) if p in pkts else None for p in out]


def assert_delivered_as_sent(got, pkts):
    out = delivered(got)
    assert out == pkts, f"input order {list(range(len(pkts)))}, delivered {order(out, pkts)}"


def counts(got):
    return [n for _, n in got]


# ------------------------------------------------------------------ F7: order


@pytest.mark.parametrize("next_header", [DEST_OPTIONS, FRAGMENT], ids=["dest-options", "fragment"])
def test_ipv6_extension_header_keeps_its_place_in_the_flow(next_header):
    """The review's case: D0 D1 D2 D3 with D1 behind an extension header came
    out as 0 2 3 1 (D2 and D3 merged into D0's super-packet)."""
    pkts = [udp6(0), ext6(1, next_header), udp6(2), udp6(3)]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [1, 1, 2]  # D2 and D3 still merge, after D1


@pytest.mark.parametrize("v6", [False, True])
def test_fragments_keep_their_place_in_the_flow(v6):
    """D1 in two fragments around D2: the kernel completes D1 with its second
    fragment, so D3 must not be merged into D2's write ahead of it."""
    d = udp6 if v6 else udp4
    d1a, d1b = fragments(*(V6 if v6 else V4), 40001, 5202, 1)
    pkts = [d(0), d1a, d(2), d1b, d(3)]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [1, 1, 1, 1, 1]
    # a trailing fragment whose first fragment came in an earlier batch
    pkts = [d(0), d1b, d(2), d(3)]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [1, 1, 2]


def test_tcp_leading_fragment_without_the_whole_tcp_header():
    """A first fragment of 8 bytes carries the ports but not all 20 bytes of
    the TCP header: the flow cannot be told from it, so it is a barrier.  Here
    it is a retransmission of segment 1, cut in two by a router."""
    seg = tcp4(1, ident=0x7777, df=False)
    a = R.ip4(6, *V4, seg[20:28], ident=0x7777, df=False, frag=0x2000)
    b = R.ip4(6, *V4, seg[28:], ident=0x7777, df=False, frag=1)
    pkts = [tcp4(0), tcp4(1), a, b, tcp4(2), tcp4(3)]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [2, 1, 1, 2]


@pytest.mark.parametrize("v6", [False, True])
def test_icmp_between_the_same_addresses_keeps_its_place(v6):
    src, dst = V6 if v6 else V4
    if v6:
        icmp = R.ip6(58, src, dst, b"\x80\x00\x00\x00\x00\x01\x00\x01" + b"p" * 56)
        flow = [R.udp_packet(True, src, dst, 40001, 5202, body(k)) for k in range(4)]
    else:
        icmp = R.ip4(1, src, dst, b"\x08\x00\xf7\xfe\x00\x00\x00\x01")
        flow = [tcp4(k) for k in range(4)]
    pkts = flow[:2] + [icmp] + flow[2:]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [2, 1, 2]


def test_a_barrier_of_another_address_pair_does_not_split_a_flow():
    icmp = R.ip4(1, *OTHER4, b"\x08\x00\xf7\xfe\x00\x00\x00\x01")
    frag = R.ip4(17, *OTHER4, b"x" * 80, ident=9, df=False, frag=0x2000 | 10)
    pkts = [tcp4(0), tcp4(1), icmp, frag, tcp4(2), tcp4(3)]
    got = writes(pkts)
    assert counts(got) == [4, 1, 1]


def test_a_datagram_with_a_bad_checksum_keeps_its_place():
    pkts = [udp4(k) for k in range(4)]
    bad = bytearray(pkts[1])
    bad[-1] ^= 0x40
    pkts[1] = bytes(bad)
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [1, 1, 2]


def test_a_tcp_segment_with_a_bad_checksum_keeps_its_place():
    """A damaged copy of segment 1 (a retransmission) between 1 and 2."""
    bad = bytearray(tcp4(1))
    bad[-1] ^= 0x40
    pkts = [tcp4(0), tcp4(1), bytes(bad), tcp4(2), tcp4(3)]
    got = writes(pkts)
    assert_delivered_as_sent(got, pkts)
    assert counts(got) == [2, 1, 2]


def order_holds(packets, out):
    """Within every flow (addresses, protocol, ports) the order of the wire; and
    a packet without readable ports neither overtakes nor is overtaken by any
    packet between the same addresses."""

    def pair(p):
        return p[8:40] if p[0] >> 4 == 6 else p[12:20]

    def flow(p):
        info = R._info(p, True, True)
        return info["key"] if info else None

    pos = {}
    for k, p in enumerate(out):
        pos.setdefault(p, k)
    assert sorted(pos) == sorted(set(packets))
    for i, a in enumerate(packets):
        for b in packets[i + 1 :]:
            fa, fb = flow(a), flow(b)
            if pair(a) == pair(b) and (fa is None or fb is None or fa == fb):
                assert pos[a] < pos[b], (packets.index(a), packets.index(b))


def test_random_batches_with_barriers_keep_order():
    rnd = random.Random(17)
    for trial in range(40):
        flows = {
            "tcp": [tcp4(k, 700, seq0=9000) for k in range(12)],
            "udp": [udp4(k, 900) for k in range(12)],
        }
        extras = []
        for k in range(rnd.randint(1, 4)):
            kind = rnd.choice(["icmp", "frag", "ext", "other-pair"])
            if kind == "icmp":
                extras.append(R.ip4(1, *V4, bytes([8, 0, 0, 0, 0, 0, 0, k + 1])))
            elif kind == "frag":
                extras.append(v4_fragments(50 + k)[rnd.randrange(2)])
            elif kind == "ext":
                extras.append(ext6(60 + k, DEST_OPTIONS))
            else:
                extras.append(R.ip4(1, *OTHER4, bytes([8, 0, 0, 0, 0, 0, 0, k + 1])))
        streams = [list(flows["tcp"]), list(flows["udp"]), extras]
        mixed = []
        while any(streams):
            s = rnd.choice([s for s in streams if s])
            mixed.append(s.pop(0))
        got = writes(mixed)
        order_holds(mixed, delivered(got))


# ------------------------------------------------------------------ F8: merges


@pytest.mark.parametrize("bit", [0x01, 0x02, 0x04, 0x08], ids=["AE", "res1", "res2", "res3"])
def test_tcp_reserved_bits_are_compared_and_kept(bit):
    """Byte 12 is the data offset (high nibble, 5 here) and four reserved bits;
    RFC 9768 (AccECN) gives the lowest one, 0x01, to AE."""
    pkts = [tcp4(0), tcp4(1, byte12=0x50 | bit), tcp4(2, byte12=0x50 | bit), tcp4(3)]
    got = writes(pkts)
    assert counts(got) == [1, 2, 1]
    assert_delivered_as_sent(got, pkts)  # nothing lost in the merge
    assert [p[32] & 0x0F for p in delivered(got)] == [0, bit, bit, 0]
    # a stream that carries the bit on every segment merges and keeps it
    same = [tcp4(k, byte12=0x50 | bit) for k in range(5)]
    got = writes(same)
    assert counts(got) == [5] and got[0][0][10 + 32] == 0x50 | bit
    assert_delivered_as_sent(got, same)


@pytest.mark.parametrize(
    "ids,want",
    [
        ([7, 7, 7, 7], [4]),  # fixed, with DF
        ([7, 8, 9, 10], [4]),  # counting up by one
        ([0xFFFF, 0, 1], [3]),  # counting up across the wrap at 65536
        ([7, 9, 11, 13], [1, 1, 1, 1]),  # neither
        ([7, 7, 8], [2, 1]),  # fixed from the second on, then a step
        ([7, 8, 8], [2, 1]),  # counting, then a repeat
        ([7, 6, 5], [1, 1, 1]),  # counting down
        ([7, 8, 10, 11], [2, 2]),  # a gap starts a new super-packet
    ],
)
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_ipv4_ids_with_df_fixed_or_counting_up(ids, want, proto):
    if proto == "tcp":
        pkts = [tcp4(k, ident=i) for k, i in enumerate(ids)]
    else:
        pkts = [udp4(k, ident=i) for k, i in enumerate(ids)]
    got = writes(pkts)
    assert counts(got) == want


def test_ipv4_ids_without_df_must_count_up():
    assert counts(writes([tcp4(k, ident=7, df=False) for k in range(3)])) == [1, 1, 1]
    assert counts(writes([tcp4(k, ident=7 + k, df=False) for k in range(3)])) == [3]


def test_ipv4_udp_checksum_zero_is_not_merged():
    """RFC 768: 0 means no checksum; udp_gro_receive_segment flushes it."""
    pkts = [
        R.udp_packet(False, *V4, 40001, 5202, body(k), ip_kw={"ident": 100 + k}, no_csum=True)
        for k in range(4)
    ]
    got = writes(pkts)
    assert counts(got) == [1, 1, 1, 1]
    assert_delivered_as_sent(got, pkts)  # unchanged: still no checksum
    # and it keeps its place in a flow with checksums
    mixed = [udp4(0), pkts[1], udp4(2), udp4(3)]
    assert_delivered_as_sent(writes(mixed), mixed)


def test_ipv6_udp_checksum_zero_is_never_merged_and_is_counted():
    pkts = [udp6_zero_csum(*V6, 40001, 5202, k) for k in range(4)]
    assert all(p[46:48] == b"\0\0" for p in pkts)
    got = writes(pkts)
    assert counts(got) == [1, 1, 1, 1]
    assert_delivered_as_sent(got, pkts)  # written as they came: the stack judges them
    # counted as left alone for their checksum
    n = len(pkts)
    buf = ffi.new("uint8_t[]", b"".join(pkts))
    off = ffi.new("uint32_t[]", [len(pkts[0]) * k for k in range(n)])
    lens = ffi.new("uint32_t[]", [len(p) for p in pkts])
    out = ffi.new("uint8_t[]", 10 * n + len(pkts[0]) * n)
    woff, wlen, wpk = (ffi.new("uint32_t[]", n) for _ in range(3))
    consumed = ffi.new("int *")
    st = ffi.new("vc_gro_stats *")
    w = lib.vc_gro_coalesce(
        buf, off, lens, n, out, len(out), woff, wlen, wpk, n, lib.VC_GRO_TCP | lib.VC_GRO_UDP, consumed, st
    )
    assert w == 4 and consumed[0] == 4 and st.coalesced == 0 and st.bad_csum == 4
    # in a flow of good datagrams it keeps its place
    mixed = [udp6(0), pkts[1], udp6(2), udp6(3)]
    got = writes(mixed)
    assert_delivered_as_sent(got, mixed)
    assert counts(got) == [1, 1, 2]


def test_ipv4_reserved_fragment_bit_is_not_merged():
    """inet_gro_receive flushes any bit of the flags word but DF (0x4000):
    the reserved bit 0x8000 (RFC 791)."""
    pkts = [tcp4(k, df=False, frag=0x8000) for k in range(3)]  # 0x8000 alone
    assert counts(writes(pkts)) == [1, 1, 1]
    pkts = [tcp4(k, frag=0x8000) for k in range(3)]  # 0x8000 | DF
    assert counts(writes(pkts)) == [1, 1, 1]


def test_more_that_the_kernel_refuses_to_merge():
    """The rest of the kernel's list, each a break between two super-packets."""
    src, dst = V6
    cases = {
        "ipv6 hop limit": {"hlim": 63},
        "ipv6 traffic class": {"tclass": 4},
        "ipv6 flow label": {"flow": 0x12345},
        "ipv6 ecn bits": {"tclass": 1},
    }
    for name, kw in cases.items():
        pkts = [
            R.tcp_packet(
                True,
                src,
                dst,
                40000,
                5201,
                5000 + k * 1000,
                1,
                R.ACK,
                body(k, 1000),
                ip_kw=kw if k == 2 else {},
            )
            for k in range(4)
        ]
        assert counts(writes(pkts)) == [2, 1, 1], name
    v4 = {
        "df differs": [tcp4(k, df=(k != 2), ident=100 + k) for k in range(4)],
        "ecn bits of tos": [tcp4(k, tos=1 if k == 2 else 0) for k in range(4)],
        "rst": [tcp4(k, flags=R.ACK | R.RST if k == 2 else R.ACK) for k in range(4)],
        "fin ends it": [tcp4(k, flags=R.ACK | R.FIN if k == 1 else R.ACK) for k in range(4)],
        "syn": [tcp4(k, flags=R.SYN | R.ACK if k == 2 else R.ACK) for k in range(4)],
    }
    want = {
        "df differs": [2, 1, 1],
        "ecn bits of tos": [2, 1, 1],
        "rst": [2, 1, 1],
        "fin ends it": [2, 2],
        "syn": [2, 1, 1],
    }
    for name, pkts in v4.items():
        assert counts(writes(pkts)) == want[name], name
