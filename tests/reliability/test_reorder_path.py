"""TCP through a path that only reorders (issue 31 item 7): vpncrypt in
namespace A, vpncrypt (TUN offloads on, then off) or wireguard-go in B,
joined through tests/reliability/relay.py holding 5% of the datagrams back
until 1..16 later ones have passed.  The receiving side's GRO sees segments
out of order and must flush rather than merge them.

Asserted: every byte of an 8 MiB transfer arrives intact (SHA-256 at both
ends) and the relay really did reorder both ways.  The retransmission figures
are benchmark numbers (tests/reliability/reorder_lab.py), never asserted."""

import json

import pytest

from tests.reliability.reorder_lab import reorder_only, tunnel

NBYTES = 8 << 20


@pytest.mark.parametrize(
    "kind_b, extra",
    [("vpncrypt", ()), ("vpncrypt", ("--tun-offloads", "off")), ("wggo-current", ())],
    ids=["vpncrypt-offloads-on", "vpncrypt-offloads-off-both", "wireguard-go-current"],
)
def test_tcp_bytes_all_arrive_through_a_reordering_path(lab, kind_b, extra):
    a, b, relay = tunnel(lab, ("vpncrypt", kind_b), extra, reorder_only(0.05, 16), seed=3)
    try:
        # both ways: A to B, then B to A (the other end's GRO)
        for src, dst, port in ((a, b, "5201"), (b, a, "5202")):
            sink = lab.tool_bg(dst.side, "tcp-sink", dst.inner, port)
            sent = lab.tool(src.side, "tcp-source", dst.inner, port, str(NBYTES), "7", timeout=180)
            got = json.loads(sink.communicate(timeout=120)[0].strip().splitlines()[-1])
            assert got["bytes"] == NBYTES, (src.side, got)
            assert sent["sha256"] == got["sha256"] == sent["peer_sha256"], (src.side, sent, got)
    finally:
        stats = relay.stop()
    assert stats["to_a"]["reordered"] > 0 and stats["to_b"]["reordered"] > 0, stats
    for d in ("to_a", "to_b"):
        st = stats[d]
        assert st["dropped"] == st["duplicated"] == st["tampered"] == st["delayed"] == 0, stats
