"""TCP segments arriving out of order, for the GRO tests against the
kernel's rules (test_gro_reorder.py: the daemon's coalescer;
tun_kernel_gro_child.py: the kernel's own GRO fed the same arrivals).

Segment k carries MSS bytes (fewer where a case says) at sequence number
5000 + 1000k; each case gives the arrival order, what tcp_gro_receive
(net/ipv4/tcp_offload.c) delivers for it (the segments of each super-packet,
in delivery order), and per segment k any other payload size or flags."""

from tests.dataplane import offload_ref as R
from tests.dataplane.gro_packets import body

MSS = 1000
SEQ0 = 5000

CASES = {
    # one segment overtaken by three: the held 0-2 flushed at 4, 4-6 at 3,
    # 3 alone at 7 (after 3 the next expected is 4, not 7)
    "one-late": ([0, 1, 2, 4, 5, 6, 3, 7, 8], [[0, 1, 2], [4, 5, 6], [3], [7, 8]], {}),
    # a neighbour swap: 2 never goes in front of the held 3
    "swap": ([0, 1, 3, 2, 4, 5], [[0, 1], [3], [2], [4, 5]], {}),
    # 1 would close the gap between 0 and 2-3, but 0 was flushed: alone
    "gap-filled-late": ([0, 2, 3, 1, 4], [[0], [2, 3], [1], [4]], {}),
    # a retransmission of 1 after 1-3 went: not the next expected (4)
    "duplicate": ([0, 1, 2, 3, 1, 4, 5], [[0, 1, 2, 3], [1], [4, 5]], {}),
    # descending: every segment flushes the one before
    "reversed": ([3, 2, 1, 0], [[3], [2], [1], [0]], {}),
    # 5 is short (500 of 1000 bytes): 4-5 ends there and 6 starts anew; 2-3
    # merge (3 is 2's next); 8 has PSH: 7-8 ends there though 9 is next
    "short-and-push": (
        [0, 1, 4, 5, 6, 2, 3, 7, 8, 9],
        [[0, 1], [4, 5], [6], [2, 3], [7, 8], [9]],
        {5: {"n": 500}, 8: {"flags": R.ACK | R.PSH}},
    ),
}


def seg(k, v6=False, *, addrs=None, sport=40000, n=MSS, flags=R.ACK):
    """Segment k of a flow from addrs[0] to addrs[1] (default: documentation-
    style private addresses), port sport to 5201; IPv4 IDs count up with k."""
    src, dst = addrs or (("fd00:1::1", "fd00:1::2") if v6 else ("10.1.0.1", "10.1.0.2"))
    ip_kw = {} if v6 else {"ident": 100 + k}
    return R.tcp_packet(v6, src, dst, sport, 5201, SEQ0 + k * MSS, 1, flags, body(k, n), ip_kw=ip_kw)


def arrivals(case, v6=False, **kw):
    """The packets of a case, in arrival order."""
    order, _, opts = CASES[case]
    return [seg(k, v6, **kw, **opts.get(k, {})) for k in order]


def runs(want):
    """[first segment, count] of each delivered super-packet."""
    return [[w[0], len(w)] for w in want]
