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

The cases (gro_reorder_cases.py) give the arrival order of segments k
(sequence 5000 + 1000k) and the literal segment boundaries of the writes;
test_tun_kernel_gro_netns.py feeds the same arrivals to the kernel's own GRO."""

import pytest

from tests.dataplane import offload_ref as R
from tests.dataplane.gro_reorder_cases import CASES, arrivals
from tests.dataplane.offload_helpers import gro_coalesce


def writes_of(case, v6=False):
    """The segments (by k) in each TUN write, checked against offload_ref's
    independent model and against the bytes: each write, segmented as the
    kernel's GSO would, is exactly its segments as they came."""
    order = CASES[case][0]
    pkts = arrivals(case, v6)
    got = gro_coalesce(pkts)
    assert [n for _, n in got] == [n for _, _, n in R.coalesce(pkts)]
    out, i = [], 0
    for frame, n in got:
        if n == 1:
            assert frame[:10] == b"\0" * 10 and frame[10:] == pkts[i]
        else:
            assert R.split(R.unvnet(frame), frame[10:], 65535) == pkts[i : i + n]
        out.append(list(order[i : i + n]))
        i += n
    return out


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reordered_segments_are_flushed_not_merged(case, v6):
    assert writes_of(case, v6) == CASES[case][1]
