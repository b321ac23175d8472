"""A send round that drops packets for no route or no endpoint comes back
to Python (it ends a looped call: io.unroutable), and the sending Worker
writes their ICMP errors into the inner side, counted; routable traffic
loops in C as before and costs nothing more.

The setup is tests/transport/test_rounds_loop.py's Twin: a Device with
peers for 10.0.0.1 and 10.0.0.3, sessions installed, a UDP socket and a
socketpair as the TUN (batch 8)."""

from vpncrypt.dataplane.unreachable import UnreachableReplies
from vpncrypt.protocol.icmp_errors import ErrorRateLimiter

from tests.transport.helpers import ipv4
from tests.transport.test_rounds_loop import NOW, Twin, _drain


def _sending_twin():
    peer_end = Twin(False)
    t = Twin(True, dest=peer_end.addr)
    t.worker.replies = UnreachableReplies(ErrorRateLimiter())
    return t, peer_end


def test_an_unroutable_packet_ends_the_loop_and_is_answered():
    t, peer_end = _sending_twin()
    try:
        routable = [ipv4("10.0.0.2", "10.0.0.1", bytes([i]) * 40) for i in range(16)]
        lost = ipv4("10.0.0.2", "10.0.0.9", b"lost" * 10)
        for p in routable[:8] + [lost] + routable[8:15]:
            t.far.send(p)
        n = t.worker.rounds(NOW, 4)
        # round 1: 8 routable (routine); round 2: the lost one and 7 more: not routine
        assert t.path.rounds == 2 and n == 8
        assert t.path.io.unroutable == 1 and t.path.io.sealed == 7
        back = _drain(t.far)
        assert len(back) == 1
        err = back[0]
        assert err[9] == 1 and err[20] == 3 and err[21] == 1  # ICMP, type 3, code 1
        assert err[12:16] == bytes([10, 0, 0, 9]) and err[16:20] == bytes([10, 0, 0, 2])
        assert err[28:] == lost
        c = t.worker.counters
        assert (c.icmp_errors_sent, c.icmp_errors_limited) == (1, 0)
    finally:
        t.close()
        peer_end.close()


def test_routable_rounds_loop_as_before():
    t, peer_end = _sending_twin()
    try:
        for i in range(24):
            t.far.send(ipv4("10.0.0.2", "10.0.0.1", bytes([i]) * 40))
        n = t.worker.rounds(NOW, 4)
        # three full rounds and the empty one that ends them, in one call
        assert t.path.rounds == 4 and n == 0 and list(t.path.loop_sizes[:3]) == [8, 8, 8]
        assert t.path.io.unroutable == 0
        assert _drain(t.far) == []
        assert t.worker.counters.icmp_errors_sent == 0
    finally:
        t.close()
        peer_end.close()


def test_past_the_global_limit_a_round_is_only_counted():
    t, peer_end = _sending_twin()
    t.worker.replies = UnreachableReplies(ErrorRateLimiter(burst=1.0, per_second=0.001))
    try:
        for i in range(8):  # 8 senders: the per-destination limit is not the one
            t.far.send(ipv4(f"10.0.1.{i + 1}", "10.0.0.9"))
        t.worker.rounds(NOW, 4)
        assert t.path.io.unroutable == 8
        for i in range(8):
            t.far.send(ipv4(f"10.0.1.{i + 1}", "10.0.0.9"))
        t.worker.rounds(NOW, 4)  # (a token a 1000 s: the bucket is still empty)
        c = t.worker.counters
        assert (c.icmp_errors_sent, c.icmp_errors_limited) == (1, 15)
        assert len(_drain(t.far)) == 1
    finally:
        t.close()
        peer_end.close()


def test_a_limited_sender_costs_no_error_built(monkeypatch):
    """A flood from one sender past its per-sender burst (6) is only
    counted: no error is built for it (the builder copied and checksummed
    up to 1280 bytes a packet, under the shared lock, for errors the limit
    then threw away; the global bucket stayed full, so nothing cut it
    short).  The review found it on the merged tree."""
    import vpncrypt.dataplane.unreachable as mod

    built = []
    real = mod.unreachable

    def counting(pkt, source):
        built.append(1)
        return real(pkt, source)

    monkeypatch.setattr(mod, "unreachable", counting)
    replies = UnreachableReplies(ErrorRateLimiter())

    class Sink:
        def write_packets(self, errors):
            return len(errors), 0

    # ICMP echo requests from 10.0.0.1 to 10.9.9.9, 100 of them at one moment
    ping = bytes.fromhex("4500001c000000004001" + "0000" + "0a000001" + "0a090909") + bytes.fromhex(
        "0800f7ff00000000"
    )
    sent, limited = replies.answer([ping] * 100, Sink(), now=100.0)
    assert (sent, limited) == (6, 94)
    assert len(built) == 6
