"""The daemon's GRO given TCP segments that arrive out of order (issue 31
item 7): what reaches the TUN must be what the kernel's GRO delivers for the
same arrivals (net/ipv4/tcp_offload.c, tcp_gro_receive):

- a segment whose sequence number is not the held super-packet's end
  (seq != th2->seq + gro_len) is not merged: the held one is flushed and the
  segment starts a new one (it is never put in front of a held one, and never
  merged into one held before the last flush);
- nothing is held back past a flush: the writes come in arrival order, so the
  receiver sees each hole (and sends its duplicate ACK / SACK) where it would
  without offloads;
- a segment shorter than the held ones' size closes the super-packet after
  itself; a PSH closes it too.

Each case gives the arrival order of segments k (sequence 5000 + 1000k) and
the literal segment boundaries of the writes."""

import pytest

from tests.dataplane import offload_ref as R
from tests.dataplane.gro_packets import body
from tests.dataplane.offload_helpers import gro_coalesce

MSS = 1000


def seg(k, v6=False, flags=R.ACK, n=MSS):
    src, dst = ("fd00:1::1", "fd00:1::2") if v6 else ("10.1.0.1", "10.1.0.2")
    ip_kw = {} if v6 else {"ident": 100 + k}
    return R.tcp_packet(v6, src, dst, 40000, 5201, 5000 + k * MSS, 1, flags, body(k, n), ip_kw=ip_kw)


def writes_of(arrivals, v6=False, **kw):
    """The segments (by k) in each TUN write, checked against offload_ref's
    independent model and against the bytes: each write, segmented as the
    kernel's GSO would, is exactly its segments as they came."""
    pkts = [seg(k, v6, **kw.get(k, {})) for k in arrivals]
    got = gro_coalesce(pkts)
    assert [n for _, n in got] == [n for _, _, n in R.coalesce(pkts)]
    out, i = [], 0
    for frame, n in got:
        if n == 1:
            assert frame[:10] == b"\0" * 10 and frame[10:] == pkts[i]
        else:
            assert R.split(R.unvnet(frame), frame[10:], 65535) == pkts[i : i + n]
        out.append(list(arrivals[i : i + n]))
        i += n
    return out


CASES = {
    # one segment overtaken by three: the held 0-2 flushed at 4, 4-6 at 3,
    # 3 alone at 7 (after 3 the next expected is 4, not 7)
    "one-late": ([0, 1, 2, 4, 5, 6, 3, 7, 8], [[0, 1, 2], [4, 5, 6], [3], [7, 8]]),
    # a neighbour swap: 2 never goes in front of the held 3
    "swap": ([0, 1, 3, 2, 4, 5], [[0, 1], [3], [2], [4, 5]]),
    # 1 would close the gap between 0 and 2-3, but 0 was flushed: alone
    "gap-filled-late": ([0, 2, 3, 1, 4], [[0], [2, 3], [1], [4]]),
    # a retransmission of 1 after 1-3 went: not the next expected (4)
    "duplicate": ([0, 1, 2, 3, 1, 4, 5], [[0, 1, 2, 3], [1], [4, 5]]),
    # descending: every segment flushes the one before
    "reversed": ([3, 2, 1, 0], [[3], [2], [1], [0]]),
}


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reordered_segments_are_flushed_not_merged(case, v6):
    arrivals, want = CASES[case]
    assert writes_of(arrivals, v6) == want


def test_a_short_segment_or_a_push_ends_the_super_packet_in_a_reordered_run():
    # 5 is short (500 of 1000 bytes): 4-5 ends there, 6 starts anew; 2-3
    # merge (3 is 2's next); 8 carries PSH: 7-8 ends there though 9 is next
    arrivals = [0, 1, 4, 5, 6, 2, 3, 7, 8, 9]
    pkts = [seg(k, n=500 if k == 5 else MSS, flags=R.ACK | (R.PSH if k == 8 else 0)) for k in arrivals]
    # 5's short payload shifts no later sequence: the segments are built by k
    got = gro_coalesce(pkts)
    assert [n for _, n in got] == [n for _, _, n in R.coalesce(pkts)]
    assert [n for _, n in got] == [2, 2, 1, 2, 2, 1]  # 0-1, 4-5, 6, 2-3, 7-8, 9
