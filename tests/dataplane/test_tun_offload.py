"""TUN offloads without a TUN: the native split (GSO super-packet -> packets)
and coalesce (packets -> GRO super-packets) against the independent Python
model in offload_ref.py, plus the boundaries of the virtio_net_hdr contract
with literal numbers (10-byte header, 65535-byte packets, gso_type values
1/4/5, csum_offset 16/6)."""

import random
import struct

import pytest

from tests.dataplane import offload_ref as R
from vpncrypt._native import ffi, lib
from tests.dataplane.offload_helpers import gro_coalesce, vnet_split

V4 = ("10.1.0.1", "10.1.0.2")
V6 = ("fd00:1::1", "fd00:1::2")
TS_OPT = b"\x01\x01\x08\x0a" + struct.pack("!II", 123456, 654321)  # NOP NOP timestamps


def payload(n, seed=0):
    rnd = random.Random(seed)
    return bytes(rnd.getrandbits(8) for _ in range(n))


def tcp_super(
    v6, data, mss, *, seq=1000, flags=R.ACK | R.PSH, options=b"", ident=0x1234, ecn=False, ip_kw=None
):
    src, dst = V6 if v6 else V4
    kw = dict(ip_kw or {})
    if not v6:
        kw.setdefault("ident", ident)
    pkt = R.tcp_packet(
        v6, src, dst, 40000, 5201, seq, 777, flags, data, ip_kw=kw, tcp_kw={"options": options}, partial=True
    )
    l3 = 40 if v6 else 20
    gt = (R.GSO_TCPV6 if v6 else R.GSO_TCPV4) | (R.GSO_ECN if ecn else 0)
    # hdr_len as the kernel reports it: often the whole linear part, not trusted
    return R.vnet(R.NEEDS_CSUM, gt, len(pkt), mss, l3, 16), pkt


def udp_super(v6, data, gso):
    src, dst = V6 if v6 else V4
    pkt = R.udp_packet(v6, src, dst, 40001, 5202, data, partial=True)
    return R.vnet(R.NEEDS_CSUM, R.GSO_UDP_L4, (40 if v6 else 20) + 8, gso, 40 if v6 else 20, 6), pkt


# ------------------------------------------------------------------ split


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize(
    "mss,size",
    [
        (1448, 1448 * 3),  # exact multiple
        (1448, 1448 * 3 + 1),  # one byte into a last segment
        (1448, 1448 * 3 - 1),  # last segment one short
        (1199, None),  # odd MSS, the largest super-packet (65535 bytes)
        (536, 5000),
        (1, 7),
        (7, 100),
        (1380, 100),  # tiny MSS; less than one segment
    ],
)
def test_tcp_split_matches_reference(v6, mss, size):
    options = TS_OPT if mss % 2 else b""
    hlen = (40 if v6 else 20) + 20 + len(options)
    if size is None:
        size = 65535 - hlen
    hdr, pkt = tcp_super(v6, payload(size, mss), mss, options=options)
    assert len(pkt) <= 65535
    mtu = max(1500, hlen + mss)
    got = vnet_split(hdr + pkt, mtu)
    assert got == R.split(R.unvnet(hdr), pkt, mtu)
    assert len(got) == -(-size // mss)
    assert all(len(s) <= mtu for s in got)


@pytest.mark.parametrize("v6", [False, True])
def test_tcp_split_fields(v6):
    """Sequence numbers, IPv4 IDs (wrapping at 65536), lengths, checksums and
    flags of each segment, with literal expectations."""
    data = payload(3000, 1)
    hdr, pkt = tcp_super(
        v6, data, 1000, seq=0xFFFFFE00, ident=0xFFFF, flags=R.ACK | R.PSH | R.FIN | R.CWR | R.ECE, ecn=True
    )
    segs = vnet_split(hdr + pkt, 1500)
    assert len(segs) == 3
    l3 = 40 if v6 else 20
    for k, s in enumerate(segs):
        assert len(s) == l3 + 20 + 1000
        if v6:
            assert struct.unpack("!H", s[4:6])[0] == 1020
        else:
            assert struct.unpack("!HH", s[2:6]) == (1040, (0xFFFF + k) & 0xFFFF)
            assert R.ipv4_hdr_ok(s)
        assert struct.unpack("!I", s[l3 + 4 : l3 + 8])[0] == (0xFFFFFE00 + 1000 * k) & 0xFFFFFFFF
        assert R.l4_ok(s, l3)
        assert s[l3 + 20 :] == data[1000 * k : 1000 * (k + 1)]
    fl = [s[l3 + 13] for s in segs]
    assert fl[0] == R.ACK | R.CWR | R.ECE
    assert fl[1] == R.ACK | R.ECE
    assert fl[2] == R.ACK | R.ECE | R.PSH | R.FIN


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("gso,size", [(1400, 1400 * 5), (1200, 4001), (9, 100), (1472, 1472)])
def test_udp_split(v6, gso, size):
    data = payload(size, gso)
    hdr, pkt = udp_super(v6, data, gso)
    l3 = 40 if v6 else 20
    mtu = max(1500, l3 + 8 + gso)
    got = vnet_split(hdr + pkt, mtu)
    assert got == R.split(R.unvnet(hdr), pkt, mtu)
    assert b"".join(s[l3 + 8 :] for s in got) == data
    for s in got:
        assert struct.unpack("!H", s[l3 + 4 : l3 + 6])[0] == len(s) - l3
        assert R.l4_ok(s, l3) and s[l3 + 6 : l3 + 8] != b"\0\0"


def test_udp_zero_checksum_is_sent_as_ffff():
    """RFC 768: a computed UDP checksum of 0 goes out as 0xFFFF."""
    # find a one-byte payload whose checksum comes out 0
    for b in range(256):
        for port in range(1, 2000):
            pkt = R.udp_packet(False, *V4, port, 53, bytes([b]), no_csum=True)
            src, dst = R.addrs(pkt)
            if R.checksum(pkt[20:], R.pseudo_sum(src, dst, 17, len(pkt) - 20)) == 0:
                break
        else:
            continue
        break
    else:
        pytest.fail("no zero-checksum datagram found")
    part = R.with_l4_csum(pkt, partial=True)
    got = vnet_split(R.vnet(R.NEEDS_CSUM, 0, 0, 0, 20, 6) + part, 1500)
    assert got[0][26:28] == b"\xff\xff"


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_needs_csum_completed_and_plain_passes(v6, proto):
    src, dst = V6 if v6 else V4
    l3 = 40 if v6 else 20
    data = payload(999, 3)
    if proto == "tcp":
        full = R.tcp_packet(v6, src, dst, 1, 2, 3, 4, R.ACK, data)
        part = R.tcp_packet(v6, src, dst, 1, 2, 3, 4, R.ACK, data, partial=True)
        co = 16
    else:
        full = R.udp_packet(v6, src, dst, 1, 2, data)
        part = R.udp_packet(v6, src, dst, 1, 2, data, partial=True)
        co = 6
    assert part != full
    assert vnet_split(R.vnet(R.NEEDS_CSUM, 0, 0, 0, l3, co) + part, 1500) == [full]
    assert vnet_split(R.vnet() + full, 1500) == [full]  # no offload: as it is
    assert vnet_split(R.vnet() + b"\x60" + b"\0" * 10, 1500) == [b"\x60" + b"\0" * 10]


MALFORMED = {
    "gso_size 0": lambda: _mut(tcp_super(False, payload(3000), 1000), gso_size=0),
    "hdr_len beyond packet": lambda: _mut(tcp_super(False, payload(3000), 1000), hdr_len=3041),
    "csum_start out of range": lambda: _mut(tcp_super(False, payload(3000), 1000), csum_start=60000),
    "csum_start not the L4 header": lambda: _mut(tcp_super(False, payload(3000), 1000), csum_start=24),
    "csum_offset wrong": lambda: _mut(tcp_super(False, payload(3000), 1000), csum_offset=6),
    "needs_csum beyond end": lambda: (R.vnet(R.NEEDS_CSUM, 0, 0, 0, 20, 16), b"\x45" + b"\0" * 30),
    "needs_csum start at end": lambda: (R.vnet(R.NEEDS_CSUM, 0, 0, 0, 31, 0), b"\x45" + b"\0" * 30),
    "truncated tcp header": lambda: (tcp_super(False, b"", 1000)[0], tcp_super(False, b"x", 100)[1][:30]),
    "truncated ip header": lambda: (tcp_super(False, b"x", 100)[0], tcp_super(False, b"x", 100)[1][:12]),
    "tcp doff beyond packet": lambda: _doff(15),
    "tcp doff below 5": lambda: _doff(4),
    "no payload": lambda: tcp_super(False, b"", 1000),
    "v6 gso on v4 packet": lambda: _mut(tcp_super(False, payload(3000), 1000), gso_type=4),
    "v4 gso on v6 packet": lambda: _mut(tcp_super(True, payload(3000), 1000), gso_type=1),
    "tcp gso on udp packet": lambda: _mut(udp_super(False, payload(3000), 1000), gso_type=1, csum_offset=16),
    "ufo (gso_type 3)": lambda: _mut(udp_super(False, payload(3000), 1000), gso_type=3),
    "ecn on udp": lambda: _mut(udp_super(False, payload(3000), 1000), gso_type=5 | 0x80),
    "unknown gso_type": lambda: _mut(tcp_super(False, payload(3000), 1000), gso_type=9),
    "ecn without gso": lambda: _mut(tcp_super(False, payload(300), 1000), gso_type=0x80),
    "fragment": lambda: tcp_super(False, payload(3000), 1000, ip_kw={"df": False, "frag": 0x2000}),
    "v6 extension header": lambda: _v6ext(),
    "empty": lambda: (R.vnet(), b""),
}


def _mut(hp, **kw):
    hdr, pkt = hp
    f = dict(zip(("flags", "gso_type", "hdr_len", "gso_size", "csum_start", "csum_offset"), R.unvnet(hdr)))
    f.update(kw)
    return R.vnet(**f), pkt


def _doff(doff):
    hdr, pkt = tcp_super(False, payload(40), 10)
    pkt = bytearray(pkt)
    pkt[32] = doff << 4
    return hdr, bytes(pkt)


def _v6ext():
    hdr, pkt = tcp_super(True, payload(3000), 1000)
    return hdr, pkt[:6] + b"\x00" + pkt[7:]  # next header: hop-by-hop


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frames_are_dropped(case):
    hdr, pkt = MALFORMED[case]()
    with pytest.raises(R.Malformed):
        R.split(R.unvnet(hdr), pkt, 1500)
    with pytest.raises(ValueError, match="malformed"):
        vnet_split(hdr + pkt, 1500)


def test_segment_above_mtu_is_refused():
    hdr, pkt = tcp_super(False, payload(5000), 1461)  # 20 + 20 + 1461 > 1500
    with pytest.raises(ValueError, match="mtu"):
        vnet_split(hdr + pkt, 1500)
    assert len(vnet_split(hdr + pkt, 1501)) == 4


def test_split_writes_nothing_outside_its_slots_and_resumes():
    hdr, pkt = tcp_super(False, payload(10000, 9), 1000)
    slot, mtu = 1056, 1050
    canary = 0xA5
    slab = ffi.new("uint8_t[]", [canary] * (slot * 3 + 64))
    off, lens = ffi.new("uint32_t[]", 5), ffi.new("uint32_t[]", 5)
    h = ffi.new("vc_vnet_hdr *")
    ffi.memmove(h, hdr, 10)
    src = ffi.new("uint8_t[]", pkt)
    seg = ffi.new("uint32_t *")
    out = []
    for expect_seg in (3, 6, 9, 0):
        r = lib.vc_vnet_split(src, len(pkt), h, mtu, slab, slot * 3, off, lens, 5, seg)
        assert r == (3 if expect_seg else 1)
        assert seg[0] == expect_seg
        assert bytes(ffi.buffer(slab)[slot * 3 :]) == bytes([canary]) * 64
        out += [bytes(ffi.buffer(slab)[off[i] : off[i] + lens[i]]) for i in range(r)]
        assert [off[i] for i in range(r)] == [0, slot, 2 * slot][:r]
    assert out == R.split(R.unvnet(hdr), pkt, mtu)


# ------------------------------------------------------------------ coalesce


def stream(
    v6, data, mss, *, seq=5000, ack=1, options=b"", last_flags=R.ACK | R.PSH, ident=100, df=True, sport=40000
):
    """A TCP stream cut into mss-sized segments (as a sender's TSO would)."""
    src, dst = V6 if v6 else V4
    out = []
    chunks = [data[i : i + mss] for i in range(0, len(data), mss)]
    for k, c in enumerate(chunks):
        fl = last_flags if k == len(chunks) - 1 else R.ACK
        ip_kw = {} if v6 else {"ident": (ident + k) & 0xFFFF, "df": df}
        out.append(
            R.tcp_packet(
                v6, src, dst, sport, 5201, seq + k * mss, ack, fl, c, ip_kw=ip_kw, tcp_kw={"options": options}
            )
        )
    return out


def udp_flow(v6, sizes, sport=40001, seed=0):
    src, dst = V6 if v6 else V4
    return [
        R.udp_packet(v6, src, dst, sport, 5202, payload(n, seed + i), ip_kw={} if v6 else {"ident": 7 + i})
        for i, n in enumerate(sizes)
    ]


def check_coalesce(packets, tcp=True, udp=True, out_size=None):
    got = gro_coalesce(packets, tcp=tcp, udp=udp, out_size=out_size)
    if out_size is None:
        want = [(h + p, n) for h, p, n in R.coalesce(packets, tcp=tcp, udp=udp)]
        assert got == want
    assert sum(n for _, n in got) == len(packets)
    # each write, split the way the kernel will, gives back its packets
    back = []
    for frame, _ in got:
        assert len(frame) <= 10 + 65535
        back += R.split(R.unvnet(frame), frame[10:], 65535)
    assert sorted(back) == sorted(packets)
    return got


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("mss", [1448, 1199, 536, 1])
def test_tcp_stream_coalesces_to_one_superpacket(v6, mss):
    data = payload(min(mss * 40, 60000), mss)
    pkts = stream(v6, data, mss, options=TS_OPT)
    got = check_coalesce(pkts)
    assert len(got) == 1 and got[0][1] == len(pkts)
    h = R.unvnet(got[0][0])
    assert h == (1, 4 if v6 else 1, (40 if v6 else 20) + 32, mss, 40 if v6 else 20, 16)


@pytest.mark.parametrize("v6", [False, True])
def test_64k_limit(v6):
    data = payload(1448 * 100, 5)
    pkts = stream(v6, data, 1448)
    got = check_coalesce(pkts)
    l3 = 40 if v6 else 20
    per = (65535 - l3 - 20) // 1448  # 45 segments of 1448 fit one packet
    assert [n for _, n in got] == [per, per, 100 - 2 * per]
    assert all(len(f) - 10 <= 65535 for f, _ in got)


def test_what_stops_coalescing():
    """Each of these starts a new super-packet, or passes alone."""
    base = stream(False, payload(1000 * 6, 2), 1000, last_flags=R.ACK)
    cases = {}

    def variant(name, k, **kw):
        p = list(base)
        src, dst = V4
        seq = 5000 + k * 1000
        fl = kw.pop("flags", R.ACK)
        ack = kw.pop("ack", 1)
        tcp_kw = {"window": kw.pop("window", 502), "options": kw.pop("options", b"")}
        ip_kw = {"ident": 100 + k, **kw.pop("ip_kw", {})}
        data = kw.pop("data", payload(1000, 2)[:1000])
        p[k] = R.tcp_packet(False, src, dst, 40000, 5201, seq, ack, fl, data, ip_kw=ip_kw, tcp_kw=tcp_kw)
        cases[name] = p

    variant("psh in the middle", 2, flags=R.ACK | R.PSH)
    variant("cwr in the middle", 2, flags=R.ACK | R.CWR)
    variant("ece differs", 2, flags=R.ACK | R.ECE)
    variant("syn", 2, flags=R.SYN | R.ACK)
    variant("urg", 2, flags=R.ACK | R.URG)
    variant("other ack", 2, ack=2)
    variant("other window", 2, window=1000)
    variant("other options", 2, options=TS_OPT)
    variant("other ttl", 2, ip_kw={"ttl": 63})
    variant("other tos", 2, ip_kw={"tos": 4})
    variant("ip options", 2, ip_kw={"options": b"\x01\x01\x01\x00"})
    variant("short in the middle", 2, data=payload(999, 4))
    variant("longer later", 2, data=payload(1001, 4))
    p = list(base)
    p[3] = R.tcp_packet(
        False, *V4, 40000, 5201, 5000 + 3 * 1000 + 1, 1, R.ACK, payload(1000, 2)[:1000], ip_kw={"ident": 103}
    )
    cases["seq gap"] = p
    bad = bytearray(base[2])
    bad[-1] ^= 0xFF  # corrupted payload: bad checksum
    cases["bad checksum"] = base[:2] + [bytes(bad)] + base[3:]
    cases["pure ack between"] = (
        base[:2]
        + [R.tcp_packet(False, *V4, 40000, 5201, 7000, 1, R.ACK, b"", ip_kw={"ident": 500})]
        + base[2:]
    )
    cases["no df, ids not counting up"] = stream(False, payload(6000, 2), 1000, df=False)[:3] + [
        R.tcp_packet(
            False,
            *V4,
            40000,
            5201,
            8000,
            1,
            R.ACK,
            payload(6000, 2)[3000:4000],
            ip_kw={"ident": 999, "df": False},
        )
    ]
    for name, pkts in cases.items():
        got = check_coalesce(pkts)
        assert len(got) >= 2, name
    assert len(check_coalesce(base)) == 1


def test_cwr_may_start_a_superpacket():
    pkts = stream(False, payload(4000, 8), 1000)
    src, dst = V4
    pkts[0] = R.tcp_packet(
        False, src, dst, 40000, 5201, 5000, 1, R.ACK | R.CWR, payload(4000, 8)[:1000], ip_kw={"ident": 100}
    )
    got = check_coalesce(pkts)
    assert len(got) == 1 and R.unvnet(got[0][0])[1] == 1 | 0x80  # GSO_TCPV4 | GSO_ECN


def test_flows_interleaved_keep_their_order():
    a = stream(False, payload(8000, 1), 1000, sport=1111)
    b = stream(True, payload(8000, 2), 1000, sport=2222)
    u = udp_flow(False, [1200] * 8)
    mixed = [x for trio in zip(a, b, u) for x in trio]
    got = check_coalesce(mixed)
    assert [n for _, n in got] == [8, 8, 8]
    # an ICMP packet and a non-first fragment pass alone, in place: between
    # the flow's addresses they end its super-packet (the fragment may belong
    # to it), between others they do not
    icmp = R.ip4(1, *V4, b"\x08\x00\xf7\xff\x00\x00\x00\x00")
    frag = R.ip4(17, *V4, b"x" * 100, df=False, frag=0x2000 | 20)
    got = check_coalesce(a[:4] + [icmp, frag] + a[4:])
    assert [n for _, n in got] == [4, 1, 1, 4]
    other = ("10.1.0.9", V4[1])
    icmp = R.ip4(1, *other, b"\x08\x00\xf7\xff\x00\x00\x00\x00")
    frag = R.ip4(17, *other, b"x" * 100, df=False, frag=0x2000 | 20)
    got = check_coalesce(a[:4] + [icmp, frag] + a[4:])
    assert [n for _, n in got] == [8, 1, 1]


@pytest.mark.parametrize("v6", [False, True])
def test_udp_coalescing(v6):
    got = check_coalesce(udp_flow(v6, [1200] * 10 + [100] + [1200] * 3))
    assert [n for _, n in got] == [11, 3]
    h = R.unvnet(got[0][0])
    assert h == (1, 5, (40 if v6 else 20) + 8, 1200, 40 if v6 else 20, 6)
    assert [n for _, n in check_coalesce(udp_flow(v6, [500] * 70))] == [64, 6]  # 64 segments
    # 65535 bytes: (65535 - 28) // 1200 = (65535 - 48) // 1200 = 54 datagrams
    assert [n for _, n in check_coalesce(udp_flow(v6, [1200] * 70))] == [54, 16]
    assert [n for _, n in check_coalesce(udp_flow(v6, [100, 1200, 1200]))] == [1, 2]


def test_offloads_off_frames_every_packet_alone():
    pkts = stream(False, payload(5000, 1), 1000) + udp_flow(True, [500] * 3)
    got = check_coalesce(pkts, tcp=False, udp=False)
    assert [n for _, n in got] == [1] * 8
    assert all(f[:10] == b"\0" * 10 for f, _ in got)
    assert [n for _, n in check_coalesce(pkts, tcp=True, udp=False)] == [5, 1, 1, 1]


def test_small_output_buffer_resumes():
    pkts = stream(False, payload(20000, 1), 1000)
    got = check_coalesce(pkts, out_size=5000)
    assert [n for _, n in got] == [4, 4, 4, 4, 4]


def test_random_batches_match_reference():
    rnd = random.Random(12)
    for trial in range(60):
        flows = []
        for f in range(rnd.randint(1, 4)):
            v6 = rnd.random() < 0.5
            if rnd.random() < 0.6:
                mss = rnd.choice([1, 100, 536, 1199, 1448])
                n = rnd.randint(1, 30)
                pk = stream(
                    v6,
                    payload(mss * n - rnd.randint(0, mss - 1), trial * 10 + f),
                    mss,
                    sport=1000 + f,
                    options=TS_OPT if rnd.random() < 0.5 else b"",
                    last_flags=rnd.choice([R.ACK, R.ACK | R.PSH, R.ACK | R.FIN]),
                )
            else:
                size = rnd.choice([64, 1200, 1472])
                pk = udp_flow(
                    v6, [size] * rnd.randint(1, 20) + [rnd.randint(1, size)], sport=3000 + f, seed=trial
                )
            if rnd.random() < 0.3 and len(pk) > 2:  # damage one
                i = rnd.randrange(len(pk))
                b = bytearray(pk[i])
                b[-1] ^= 1 << rnd.randrange(8)
                pk[i] = bytes(b)
            if rnd.random() < 0.2 and len(pk) > 2:  # lose one
                del pk[rnd.randrange(len(pk))]
            flows.append(pk)
        mixed = []
        while any(flows):
            f = rnd.choice([f for f in flows if f])
            mixed.append(f.pop(0))
        got = gro_coalesce(mixed)
        want = [(h + p, n) for h, p, n in R.coalesce(mixed)]
        assert got == want, trial


def test_bad_arguments():
    consumed = ffi.new("int *")
    arr = ffi.new("uint32_t[]", 1)
    out = ffi.new("uint8_t[]", 100)
    assert lib.vc_gro_coalesce(ffi.NULL, arr, arr, 1, out, 100, arr, arr, arr, 1, 3, consumed, ffi.NULL) < 0
    assert lib.vc_gro_coalesce(ffi.NULL, arr, arr, -1, out, 100, arr, arr, arr, 1, 3, consumed, ffi.NULL) < 0
    h = ffi.new("vc_vnet_hdr *")
    seg = ffi.new("uint32_t *")
    assert lib.vc_vnet_split(out, 10, h, 0, out, 100, arr, arr, 1, seg) < 0  # mtu 0
    assert lib.vc_vnet_split(out, 10, h, 1500, out, 100, arr, arr, 1, seg) < 0  # slab < mtu
    assert lib.vc_vnet_split(out, 10, h, 65536, out, 100, arr, arr, 1, seg) < 0  # mtu too big
