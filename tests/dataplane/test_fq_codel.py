"""The sending data path's fair queue (native/fq_codel.c), sans-I/O with a
fake clock: CoDel (RFC 8289) verdicts, the fq_codel scheduler (RFC 8290:
deficit round robin, new flows first), the memory caps and the counters.

Every figure is a literal from the RFCs (target 5 ms, interval 100 ms,
quantum 1514 bytes, the control law interval/sqrt(count)) or worked out by
hand from their pseudocode, not taken from the module."""

import struct

import pytest

from vpncrypt._native import ffi, lib

MS = 1_000_000  # ns
TARGET = 5 * MS  # RFC 8289's default target
INTERVAL = 100 * MS  # ... and interval
QUANTUM = 1514  # RFC 8290's default quantum


# ------------------------------------------------------------------ CoDel


def codel(target=TARGET, interval=INTERVAL, mtu=1514):
    c = ffi.new("vc_codel *")
    lib.vc_codel_init(c, target, interval, mtu)
    return c


def test_codel_first_drop_comes_after_interval_above_target():
    c = codel()
    t0 = 1_000 * MS
    # a packet every ms whose sojourn is 6 ms (> 5 ms), the queue deep
    verdicts = [lib.vc_codel_verdict(c, t0 + k * MS, 6 * MS, 100_000) for k in range(100)]
    assert verdicts == [0] * 100  # 0 .. 99 ms above target: not yet
    assert lib.vc_codel_verdict(c, t0 + 100 * MS, 6 * MS, 100_000) == 1
    assert c.drops == 1 and c.dropping == 1 and c.count == 1


def test_codel_a_sojourn_below_target_restarts_the_interval():
    c = codel()
    for k in range(99):
        assert lib.vc_codel_verdict(c, k * MS + 1, 6 * MS, 100_000) == 0
    assert lib.vc_codel_verdict(c, 99 * MS + 1, 4 * MS, 100_000) == 0  # below 5 ms once
    # above again from 100 ms: the first drop is 100 ms later, at 200 ms
    for k in range(100, 200):
        assert lib.vc_codel_verdict(c, k * MS + 1, 6 * MS, 100_000) == 0
    assert lib.vc_codel_verdict(c, 200 * MS + 1, 6 * MS, 100_000) == 1


def test_codel_never_drops_from_a_queue_of_one_mtu_or_less():
    c = codel()
    for k in range(1000):
        assert lib.vc_codel_verdict(c, k * MS + 1, 50 * MS, 1514) == 0
    assert c.drops == 0


def test_codel_drop_rate_rises_with_the_square_root_of_count():
    c = codel()
    step = 10_000  # 10 us between packets
    drops = []
    t = 1
    while len(drops) < 6:
        if lib.vc_codel_verdict(c, t, 6 * MS, 100_000):
            drops.append(t)
        t += step
    gaps = [(b - a) / MS for a, b in zip(drops, drops[1:])]
    # interval / sqrt(1), / sqrt(2), / sqrt(3), / sqrt(4), / sqrt(5)
    expected = [100.0, 70.7107, 57.7350, 50.0, 44.7214]
    for got, want in zip(gaps, expected):
        assert abs(got - want) <= 0.011, (gaps, expected)
    assert c.count == 6


def test_codel_leaves_dropping_when_the_sojourn_falls_below_target():
    c = codel()
    t = 1
    while not lib.vc_codel_verdict(c, t, 6 * MS, 100_000):
        t += MS
    assert c.dropping == 1
    assert lib.vc_codel_verdict(c, t + MS, 1 * MS, 100_000) == 0
    assert c.dropping == 0
    # back above target: another full interval before the next drop
    assert lib.vc_codel_verdict(c, t + 2 * MS, 6 * MS, 100_000) == 0
    assert lib.vc_codel_verdict(c, t + 2 * MS + INTERVAL - 1, 6 * MS, 100_000) == 0
    assert lib.vc_codel_verdict(c, t + 2 * MS + INTERVAL, 6 * MS, 100_000) == 1


def test_codel_reentering_soon_resumes_the_drop_rate():
    """RFC 8289: entering the dropping state again within 16 intervals of the
    last drop starts from count - lastcount, not from 1."""
    c = codel()
    t = 1
    drops = 0
    while drops < 4:  # count reaches 4 (lastcount 1)
        drops += lib.vc_codel_verdict(c, t, 6 * MS, 100_000)
        t += 10_000
    assert c.count == 4 and c.lastcount == 1
    lib.vc_codel_verdict(c, t, 1 * MS, 100_000)  # leave
    t += MS
    while not lib.vc_codel_verdict(c, t, 6 * MS, 100_000):
        t += MS
    assert c.count == 3  # delta = 4 - 1


# ------------------------------------------------------------ the queue


def ipv4(src, dst, proto, sport=0, dport=0, size=100, tag=0, frag=0):
    """An IPv4 packet of `size` bytes; the payload after the ports carries `tag`."""
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, size, 0, frag, 64, proto, 0, bytes(src), bytes(dst))
    body = struct.pack("!HHI", sport, dport, tag)
    return (hdr + body).ljust(size, b"\x00")


def ipv6(src, dst, proto, sport=0, dport=0, size=100, tag=0):
    hdr = struct.pack("!IHBB16s16s", 6 << 28, size - 40, proto, 64, bytes(src), bytes(dst))
    body = struct.pack("!HHI", sport, dport, tag)
    return (hdr + body).ljust(size, b"\x00")


def tag_of(pkt):
    return struct.unpack("!I", pkt[24:28] if pkt[0] >> 4 == 4 else pkt[44:48])[0]


A = (10, 0, 0, 1)
B = (10, 0, 0, 2)


def bulk(sport, size, tag):
    return ipv4(A, B, 6, sport, 5201, size=size, tag=tag)


def ping(tag):
    return ipv4(A, B, 1, size=84, tag=tag)


class Queue:
    def __init__(self, byte_cap=1 << 24, packet_cap=4096, quantum=QUANTUM, seed=7):
        self.q = ffi.gc(
            lib.vc_fq_new(1024, byte_cap, packet_cap, quantum, TARGET, INTERVAL, seed), lib.vc_fq_free
        )
        assert self.q != ffi.NULL
        self.slot = 2048
        self.slab = ffi.new("uint8_t[]", self.slot * 256)
        self.off = ffi.new("uint32_t[]", 256)
        self.len = ffi.new("uint32_t[]", 256)
        self.flow = ffi.new("uint32_t[]", 256)

    def put(self, pkt, now=0):
        return lib.vc_fq_enqueue(self.q, pkt, len(pkt), now)

    def get(self, n, now=0):
        k = lib.vc_fq_dequeue(
            self.q, now, self.slab, self.slot * 256, self.slot, self.off, self.len, self.flow, n
        )
        buf = ffi.buffer(self.slab)
        return [bytes(buf[self.off[i] : self.off[i] + self.len[i]]) for i in range(k)]

    def stats(self):
        s = ffi.new("vc_fq_stats *")
        lib.vc_fq_get_stats(self.q, s)
        return s


def distinct_flows(q, pkts):
    flows = [lib.vc_fq_flow_of(q.q, p, len(p)) for p in pkts]
    assert len(set(flows)) == len(flows), "the test's flows collide under this seed"
    return flows


def test_new_rejects_bad_arguments():
    for args in (
        (0, 1 << 20, 100, QUANTUM, TARGET, INTERVAL, 1),
        (65537, 1 << 20, 100, QUANTUM, TARGET, INTERVAL, 1),
        (1024, 0, 100, QUANTUM, TARGET, INTERVAL, 1),
        (1024, 1 << 20, 0, QUANTUM, TARGET, INTERVAL, 1),
        (1024, 1 << 20, 100, 0, TARGET, INTERVAL, 1),
        (1024, 1 << 20, 100, QUANTUM, 0, INTERVAL, 1),
        (1024, 1 << 20, 100, QUANTUM, TARGET, 0, 1),
    ):
        assert lib.vc_fq_new(*args) == ffi.NULL, args


def test_flow_hash_is_the_inner_five_tuple():
    q = Queue()
    f = lambda p: lib.vc_fq_flow_of(q.q, p, len(p))  # noqa: E731
    assert f(bulk(40000, 1400, 1)) == f(bulk(40000, 60, 2))  # same 5-tuple, any size or payload
    assert len({f(bulk(40000 + k, 100, 0)) for k in range(32)}) > 24  # ports spread
    # IPv6 the same way
    s6, d6 = bytes(15) + b"\x01", bytes(15) + b"\x02"
    assert f(ipv6(s6, d6, 17, 1, 2, tag=1)) == f(ipv6(s6, d6, 17, 1, 2, size=300, tag=2))
    assert len({f(ipv6(s6, d6, 17, 1000 + k, 2)) for k in range(32)}) > 24
    # a later IPv4 fragment has no ports: it hashes with its addresses and protocol only
    assert f(ipv4(A, B, 17, 1, 2, frag=100)) == f(ipv4(A, B, 17, 9, 9, frag=100))


def test_drr_serves_flows_by_bytes_in_turn():
    """Flow X sends 500-byte packets, Y 1500-byte ones, quantum 1500: each
    turn X gets 3 packets and Y 1 (RFC 8290's deficit round robin)."""
    q = Queue(quantum=1500)
    xs = [bulk(1000, 500, 100 + k) for k in range(9)]
    ys = [bulk(2000, 1500, 200 + k) for k in range(3)]
    distinct_flows(q, [xs[0], ys[0]])
    for p in xs:
        q.put(p)
    for p in ys:
        q.put(p)
    order = [tag_of(p) for p in q.get(100)]
    assert order == [100, 101, 102, 200, 103, 104, 105, 201, 106, 107, 108, 202]


def test_drr_alternates_equal_flows_and_keeps_each_flows_order():
    q = Queue()
    flows = [[bulk(3000 + f, QUANTUM, 1000 * f + k) for k in range(5)] for f in range(3)]
    distinct_flows(q, [fl[0] for fl in flows])
    for k in range(5):  # interleaved arrival
        for f in (2, 0, 1):
            q.put(flows[f][k])
    order = [tag_of(p) for p in q.get(100)]
    # one MTU-sized packet per flow per turn, the flows in their first arrival order
    assert order == [1000 * f + k for k in range(5) for f in (2, 0, 1)]


def test_a_sparse_flow_goes_before_a_bulk_backlog():
    q = Queue()
    big = [bulk(5201, 1400, k) for k in range(200)]
    distinct_flows(q, [big[0], ping(0)])
    for p in big:
        q.put(p)
    assert [tag_of(p) for p in q.get(10)] == list(range(10))  # the bulk flow is "old" now
    q.put(ping(7777))
    out = q.get(3)
    assert [tag_of(p) for p in out] == [7777, 10, 11]
    assert q.stats().new_flow_count == 2


def test_byte_cap_drops_half_of_the_fattest_flow_from_its_head():
    q = Queue(byte_cap=10_000)
    xs = [bulk(1000, 1000, k) for k in range(8)]
    ys = [bulk(2000, 1000, 100 + k) for k in range(3)]
    distinct_flows(q, [xs[0], ys[0]])
    for p in xs + ys:
        q.put(p)
    s = q.stats()
    # 11,000 bytes > 10,000: X (8,000 bytes, the fattest) loses half, 4 packets from its head
    assert s.overlimit_drops == 4
    assert s.backlog_bytes == 7000 and s.backlog_packets == 7
    out = sorted(tag_of(p) for p in q.get(100))
    assert out == [4, 5, 6, 7, 100, 101, 102]


def test_packet_cap_drops_from_the_fattest_flow_first():
    q = Queue(packet_cap=6)
    xs = [bulk(1000, 200, k) for k in range(5)]
    y = bulk(2000, 200, 100)
    distinct_flows(q, [xs[0], y])
    for p in xs:
        q.put(p)
    assert q.put(y) >= 0  # 6 of 6
    z = bulk(2000, 200, 101)
    assert q.put(z) >= 0  # a 7th: X (5 packets, 1,000 bytes) gives up 500 bytes = 3 packets
    s = q.stats()
    assert s.overlimit_drops == 3 and s.backlog_packets == 4
    assert sorted(tag_of(p) for p in q.get(100)) == [3, 4, 100, 101]


def test_codel_drops_a_standing_queue_at_dequeue_and_counts_them():
    q = Queue()
    for k in range(300):
        q.put(bulk(5201, 1400, k), now=0)
    # 120 ms later every packet has waited 120 ms: the first dequeue starts the
    # interval (ok_to_drop is off until 100 ms above target have passed) ...
    first = q.get(1, now=120 * MS)
    assert [tag_of(p) for p in first] == [0]
    s = q.stats()
    assert s.codel_drops == 0
    # ... and once the interval is over, CoDel drops the head and delivers the next
    out = q.get(2, now=220 * MS + 1)
    assert [tag_of(p) for p in out] == [2, 3]
    s = q.stats()
    assert s.codel_drops == 1
    assert s.dequeued == 3 and s.enqueued == 300
    assert s.backlog_packets == 300 - 3 - 1
    assert s.bytes_in == 300 * 1400 and s.bytes_out == 3 * 1400


def test_counters_and_empty_queue():
    q = Queue()
    assert q.get(10) == []
    pkts = [bulk(1000, 100, 1), ping(2), ipv6(bytes(16), bytes(15) + b"\x01", 58, size=64, tag=3)]
    for p in pkts:
        assert q.put(p) >= 0
    s = q.stats()
    assert (s.enqueued, s.backlog_packets, s.backlog_bytes, s.max_backlog_bytes) == (3, 3, 248, 248)
    assert s.active_flows == 3
    out = q.get(10)
    assert sorted(out) == sorted(pkts)  # copied out intact
    s = q.stats()
    assert (s.dequeued, s.backlog_packets, s.backlog_bytes, s.active_flows) == (3, 0, 0, 0)
    assert s.codel_drops == s.overlimit_drops == s.too_big == 0


def test_enqueue_rejects_empty_and_oversized_packets():
    q = Queue()
    assert q.put(b"") == -22
    assert lib.vc_fq_enqueue(q.q, b"\x45" * 10, 65536, 0) == -22
    assert q.stats().enqueued == 0
    assert q.stats().too_big == 2  # dropped and counted (-22: EINVAL)
    assert q.stats().nomem_drops == 0


def test_dequeue_never_cuts_a_packet_longer_than_the_slot():
    q = Queue()
    q.put(bulk(1, 3000, 1))
    q.put(bulk(1, 100, 2))
    out = q.get(10)  # 2,048-byte slots
    assert [tag_of(p) for p in out] == [2]
    assert q.stats().too_big == 1


@pytest.mark.parametrize("size", [60, 2048, 9000])
def test_packets_of_any_size_come_back_byte_for_byte(size):
    q = Queue()
    q.slot = 9008
    q.slab = ffi.new("uint8_t[]", q.slot * 256)
    pkts = [bytes((i * 31 + k) & 0xFF for k in range(size)) for i in range(4)]
    pkts = [ipv4(A, B, 17, 7, 7, size=size, tag=i)[:28] + p[28:] for i, p in enumerate(pkts)]
    for p in pkts:
        q.put(p)
    assert q.get(10) == pkts


# ------------------------------------------------ the receive side's CoDel


class Received:
    """A receive call's output as vc_udp_recv_batch_segs leaves it: datagrams
    in a slab (off/len/ep), grouped in buffers (segs, nbufs) with the
    kernel's arrival time of each in the receive state."""

    def __init__(self, buffers):
        # buffers: [(arrival ns, [datagram bytes, ...]), ...]
        self.st = ffi.new("vc_udp_rx *")
        lib.vc_codel_init(ffi.addressof(self.st.codel), TARGET, INTERVAL, 1514)
        self.st.aqm = 1
        total = sum(len(d) for _a, ds in buffers for d in ds)
        n = sum(len(ds) for _a, ds in buffers)
        self.slab = ffi.new("uint8_t[]", total + 1)
        self.off = ffi.new("uint32_t[]", n)
        self.len = ffi.new("uint32_t[]", n)
        self.ep = ffi.new("vc_endpoint[]", n)
        self.segs = ffi.new("uint32_t[]", n)
        self.nbufs = ffi.new("int *", len(buffers))
        at = i = 0
        buf = ffi.buffer(self.slab)
        for b, (arrival, ds) in enumerate(buffers):
            self.st.arrival[b] = arrival
            self.segs[b] = len(ds)
            for d in ds:
                buf[at : at + len(d)] = d
                self.off[i], self.len[i] = at, len(d)
                self.ep[i].family, self.ep[i].port = 4, 1000 + i
                at += len(d)
                i += 1
        self.n = n

    def filter(self, now, more=0, real=None):
        k = lib.vc_udp_aqm_filter(
            self.st,
            self.slab,
            self.off,
            self.len,
            self.ep,
            self.n,
            self.segs,
            self.nbufs,
            more,
            now,
            now if real is None else real,
        )
        buf = ffi.buffer(self.slab)
        kept = [bytes(buf[self.off[i] : self.off[i] + self.len[i]]) for i in range(k)]
        ports = [self.ep[i].port for i in range(k)]
        segs = [self.segs[b] for b in range(self.nbufs[0])]
        return kept, ports, segs


def data(counter, size=1452):
    """A transport data message (type 4, reserved zeros, index, counter)."""
    return (struct.pack("<IIQ", 4, 0x1234, counter) + bytes(16)).ljust(size, b"\xee")


INITIATION = struct.pack("<I", 1) + bytes(144)  # 148 bytes
RESPONSE = struct.pack("<I", 2) + bytes(88)  # 92 bytes
COOKIE = struct.pack("<I", 3) + bytes(60)  # 64 bytes


def test_receive_codel_drops_only_data_after_an_interval_above_target():
    dropped_at = None
    st = None
    for ms in range(0, 130):
        now = 10_000 * MS + ms * MS
        r = Received(
            [(now - 6 * MS, [data(ms), INITIATION, RESPONSE, COOKIE, b"\x04\x00\x00\x00" + bytes(10)])]
        )
        if st is not None:  # the state carries over, as the socket's does
            ffi.buffer(ffi.addressof(r.st.codel))[:] = ffi.buffer(ffi.addressof(st.codel))[:]
            r.st.aqm_dropped = st.aqm_dropped
        kept, _ports, _segs = r.filter(now, more=1)
        # handshake messages, cookie replies and a short "type 4" are never dropped
        assert kept[-4:] == [INITIATION, RESPONSE, COOKIE, b"\x04\x00\x00\x00" + bytes(10)]
        if len(kept) == 4 and dropped_at is None:
            dropped_at = ms
        st = r.st
    assert dropped_at == 100  # 100 ms above the 5 ms target: the first drop
    assert st.aqm_dropped >= 1 and st.codel.dropping == 1


def test_receive_codel_keeps_order_and_fixes_the_buffers():
    now = 50_000 * MS
    r = Received(
        [
            (now - 9 * MS, [data(k) for k in range(4)]),  # a GRO buffer of 4
            (now - 9 * MS, [INITIATION]),
            (now - 8 * MS, [data(10 + k) for k in range(3)]),
        ]
    )
    # dropping already, and the next drop due: the head data message goes
    r.st.codel.first_above = 1
    r.st.codel.dropping = 1
    r.st.codel.count = 1
    r.st.codel.drop_next = now
    kept, ports, segs = r.filter(now, more=1)
    assert r.st.aqm_dropped == 1
    assert kept == [data(1), data(2), data(3), INITIATION] + [data(10 + k) for k in range(3)]
    assert ports == [1001, 1002, 1003, 1004, 1005, 1006, 1007]  # each datagram's endpoint with it
    assert segs == [3, 1, 3] and r.nbufs[0] == 3
    assert [r.st.arrival[b] for b in range(3)] == [now - 9 * MS, now - 9 * MS, now - 8 * MS]


def test_receive_codel_drops_a_whole_buffer_and_removes_it():
    now = 50_000 * MS
    r = Received([(now - 9 * MS, [data(0)]), (now - 1 * MS, [data(1), data(2)])])
    r.st.codel.first_above = 1
    r.st.codel.dropping = 1
    r.st.codel.count = 1
    r.st.codel.drop_next = now
    kept, _ports, segs = r.filter(now, more=1)
    assert kept == [data(1), data(2)]  # the second buffer's sojourn (1 ms) is below target
    assert segs == [2] and r.st.arrival[0] == now - 1 * MS
    assert r.st.codel.dropping == 0


def test_receive_codel_leaves_datagrams_of_unknown_arrival_alone():
    now = 50_000 * MS
    r = Received([(0, [data(k) for k in range(5)])])
    r.st.codel.first_above = 1
    r.st.codel.dropping = 1
    r.st.codel.drop_next = 0
    kept, _ports, _segs = r.filter(now, more=1)
    assert len(kept) == 5 and r.st.aqm_dropped == 0


def test_receive_codel_spares_the_last_mtu_of_a_drained_socket():
    """The backlog CoDel sees is the rest of the batch (and 64 KiB more if the
    socket has more): the last datagram of a drained socket is never dropped."""
    now = 50_000 * MS
    r = Received([(now - 9 * MS, [data(0)])])
    r.st.codel.first_above = 1
    r.st.codel.dropping = 1
    r.st.codel.drop_next = 0
    kept, _ports, _segs = r.filter(now, more=0)
    assert kept == [data(0)]
