"""Two vpncrypt devices (the production data plane, in two processes) talk
through a hostile relay that drops 2%, duplicates 2%, reorders 5% by up to 64
positions, delays some by up to 50 ms and truncates or bit-flips 1% of the
datagrams, handshakes included, while short test timers force a rekey every
few seconds.

Asserted: every delivered inner packet is byte-identical to one that was sent,
none is delivered twice, nothing tampered with is delivered, the sessions
recover by themselves whenever handshake messages are lost, and the
receivers' drop counters add up to exactly what the relay did to them.

CI runs the short form (200,000 inner packets); VPNCRYPT_SOAK_SECONDS=600
runs the soak form for that long.
"""

import json

import pytest

from tests.reliability.netutil import SOAK, pair_args, short_timers, wait_received
from tests.reliability.relay import HostileRelay, Impairments, handshakes_through
from vpncrypt.bench.loopback import run_pair

TIMERS = short_timers(rekey_after_time=1.5, reject_after_time=4.0)
# Every reason a receiver may give for dropping a datagram the path damaged or
# duplicated.  ("stale_keypair" is not one: data that reaches the responder just after
# its copy of the keypair passed REJECT_AFTER_TIME, while the initiator's copy,
# made one round trip later, still had a moment to go; the short test timers
# make that visible.  It is accounted for separately below.)
DROP_REASONS_FROM_PATH = {
    "bad_tag",
    "replay",
    "unknown_index",
    "malformed",
    "source_not_allowed",
    "bad_mac1",
    "unknown_peer",
    "rate_limited",
    "cookie_sent",
}


def _args(**kw):
    count = dict(packets=None, duration=SOAK) if SOAK else dict(packets=100_000, duration=None)
    return pair_args(TIMERS, rate=20_000.0, **{**count, **kw})


def _path_drops(raw):
    return {k: v for k, v in raw["drops"].items() if k in DROP_REASONS_FROM_PATH}


@pytest.mark.parametrize(
    "crypto, impairments",
    [
        ("native", Impairments()),
        # half the handshake messages lost on top, never two in a row in one
        # direction: sessions must recover by retransmission
        ("native", Impairments(handshake_drop=0.5, handshake_drop_streak=1)),
    ],
    ids=["path", "path+handshake-loss"],
)
def test_hostile_path_vpncrypt_to_vpncrypt(crypto, impairments, tmp_path):
    relay = HostileRelay(impairments, seed=7)
    endpoints = set()

    def through_relay(a_ports, b_ports):
        endpoints.update(a_ports[:1] + b_ports[:1])
        port_for_a, port_for_b = relay.start(a_ports[0], b_ports[0])
        return [port_for_a], [port_for_b]

    def freeze():
        # The endpoints go on sending after their traffic (keepalives every second
        # and rekeys with these timers): the relay stops forwarding, and the
        # endpoints stop counting only once they have read what it forwarded, so
        # that each datagram it damaged either met a counting receiver or is "late".
        relay.freeze()
        wait_received(endpoints)

    try:
        row, ra, rb = run_pair(
            _args(), "wireguard", crypto, path=through_relay, drain=1.0, before_stop=freeze
        )
    finally:
        stats = relay.stop()
    report = {
        "row": row,
        "relay": stats,
        "handshakes": [r and r["handshakes"] for r in (ra, rb)],
        "drops_a": ra and ra["drops"],
        "drops_b": rb and rb["drops"],
    }
    (tmp_path / "hostile.json").write_text(json.dumps(report, indent=1))
    assert row["handshake"], row
    to_a, to_b = stats["to_a"], stats["to_b"]
    sent = ra["sent"] + rb["sent"]
    assert sent >= (200_000 if not SOAK else 1)

    # 1. every delivered packet is byte-identical to one sent, and none twice
    assert row["corrupted"] == 0 and row["duplicated"] == 0, report
    # 2. the path really was hostile, in both directions and to handshakes too
    for st in (to_a, to_b):
        assert st["dropped"] > 0 and st["duplicated"] > 0 and st["reordered"] > 0
        assert st["delayed"] > 0 and st["truncated"] > 0 and st["flipped"] > 0
    assert to_a["received_handshake"] + to_b["received_handshake"] > 2
    if impairments.handshake_drop:
        assert to_a["dropped_handshake"] + to_b["dropped_handshake"] >= 2, report
    # 3. sessions recovered by themselves: every handshake the path let through
    # became a session on both sides, and no other did.  Each completes at its
    # initiator when the response arrives and at its responder when the first
    # data on the new keypair does: the last one may have had no time for that,
    # and one lost at a receiver's full socket never arrived.
    through = handshakes_through(stats["handshakes"])
    completed = ra["handshakes"] + rb["handshakes"]
    overflow = sum(raw["drops"].get("socket_receive_buffer", 0) for raw in (ra, rb))
    assert 2 * through - 1 - overflow <= completed <= 2 * through, (report, through)
    # and rekeys kept happening: with handshake_drop_streak=1 a path that let
    # fewer than two through in a run (the first session and a rekey) is about a
    # 1-in-30,000 event; with the losses uncapped it was 1 in 11 (9 attempts at
    # 0.51 x 0.51 x 0.99 x 0.99 each)
    assert through >= 2, (report, through)
    delivered = row["delivered"]
    lost_on_path = to_a["dropped_data"] + to_b["dropped_data"]
    assert delivered >= (0.9 if not impairments.handshake_drop else 0.6) * sent, report
    # 4. nothing tampered with is delivered, and the drop counters add up: every
    # duplicated or tampered datagram shows up as exactly one drop at its receiver
    # (a duplicate that arrives before its original is dropped instead of it).
    # One that lands on a keypair just past REJECT_AFTER_TIME is counted as
    # stale_keypair, as an undamaged packet there would be, so those drops bound the
    # difference (without expiries, as in most runs, the equality is exact).
    # When half the handshake messages are lost too, sessions are replaced in
    # bursts, and an undamaged packet still in flight on a keypair that has just
    # been retired is dropped as unknown_index: allow 1% of those there.
    # What the relay released only after the endpoints had stopped counting
    # (a relay starved of CPU) or could not send never met a receiver.
    for raw, st in ((ra, to_a), (rb, to_b)):
        counted = sum(_path_drops(raw).values())
        expired = raw["drops"].get("stale_keypair", 0)
        damaged = st["duplicated"] + st["tampered"]
        slack = damaged // 100 if impairments.handshake_drop else 0
        late = st["late"] + st["send_errors"]  # never reached a receiver
        # lost at the receiver's own socket (it was full): uncounted, or the
        # original of a duplicate, which is then delivered instead of dropped
        late += raw["drops"].get("socket_receive_buffer", 0)
        assert damaged - expired - late <= counted <= damaged + slack, (report, counted, expired, late)
    # and every sent packet is accounted for: delivered, lost on the path,
    # tampered with, dropped at the sender while a handshake was lost, or on a stale keypair
    assert (
        delivered
        + lost_on_path
        + to_a["tampered_data"]
        + to_b["tampered_data"]
        + to_a["kernel_dropped"]
        + to_b["kernel_dropped"]
        + _sender_side(ra)
        + _sender_side(rb)
        >= sent - 64
    ), report


def _sender_side(raw):
    """Packets dropped for reasons of the protocol's timing, not the path: the
    sender's staged queue full (128 packets) while a handshake was lost, staged
    packets flushed when keys expired (staged_flushed), data on keys past their time
    (stale_keypair), no endpoint yet."""
    d = raw["drops"]
    return sum(d.get(k, 0) for k in ("queue_full", "staged_flushed", "stale_keypair", "no_endpoint"))
