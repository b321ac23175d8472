"""Looped rounds (Worker.rounds) against one round per call with hostile and
moving traffic mixed in: replayed, forged and malformed datagrams in the
middle of the routine rounds (dropped and counted alike, never delivered),
and the endpoint moving mid-loop (the round it moved in stops the loop; the
same EndpointChanged comes out)."""

import hashlib
import socket

from tests.transport.helpers import KEY_AB, ipv4, message
from tests.transport.test_rounds_loop import LOCAL, Twin, _warm_up


def _traffic():
    """40 datagrams of the first peer (rounds of 8): counters 0..39, with a
    replay of counter 3 at 10, a forged tag at 12 and a 20-byte runt at 13."""
    items = []
    for i in range(40):
        items.append(message(KEY_AB, 7, i, ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * (50 + i))))
    forged = bytearray(items[12])
    forged[-1] ^= 1
    items[10] = items[3]
    items[12] = bytes(forged)
    items[13] = items[13][:20]
    return items


def _twins():
    """Two receiving twins (one round per call, looped) and a UDP source."""
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    src.bind((LOCAL, 0))
    return Twin(False), Twin(False), src


def test_hostile_datagrams_mid_loop_counted_as_one_by_one():
    single, looped, src = _twins()
    try:
        for t in (single, looped):
            _warm_up(t, src)
            before = dict(t.dev.drops())
            for d in _traffic():
                src.sendto(d, t.addr)
            t.one_by_one() if t is single else t.looped()
            t.drops = {k: v - before.get(k, 0) for k, v in t.dev.drops().items() if v != before.get(k, 0)}
        a, b = single.seen(), looped.seen()
        # (the C loop's last, empty round is a call of its own; one by one it is not recorded)
        assert b.pop("rounds") == a.pop("rounds") + 1
        assert a == b
        assert single.drops == looped.drops == {"replay": 1, "bad_tag": 1, "malformed": 1}
        assert len(a["inner"]) == 37
        assert looped.calls == [6]  # all routine: one call, its sixth round empty
    finally:
        src.close()
        single.close()
        looped.close()


def test_endpoint_moving_mid_loop_stops_there():
    """Datagrams 0..19 from one address, 20..39 from another (the peer
    roamed in the third round): the loop stops after that round; both ways
    report the move once and end with the new endpoint."""
    single, looped, src = _twins()
    moved = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    moved.bind((LOCAL, 0))
    try:
        events = []
        for t in (single, looped):
            _warm_up(t, src)
            for i in range(40):
                d = message(KEY_AB, 7, i, ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * 60))
                (src if i < 20 else moved).sendto(d, t.addr)
            t.one_by_one() if t is single else t.looped()
            events.append([o[2] for o in t.outputs if o is not None])
            assert t.peers[0].endpoint is not None
        a, b = single.seen(), looped.seen()
        # (the C loop's last, empty round is a call of its own; one by one it is not recorded;
        # a looped call's prefix and last round come out as one Output)
        assert b.pop("rounds") == a.pop("rounds") + 1
        del a["outputs"], b["outputs"]
        assert a == b
        assert looped.calls == [3, 3]  # rounds 8, 8, 8 (moved), then 8, 8 and an empty one
        flat = [[n for ev in e for n in ev] for e in events]
        assert flat[0].count("EndpointChanged") == flat[1].count("EndpointChanged") == 1
    finally:
        for s in (src, moved):
            s.close()
        single.close()
        looped.close()


def _initiation(responder_public: bytes) -> bytes:
    """A 148-byte handshake initiation whose mac1 is right for the responder
    (the paper: mac1 = MAC(HASH("mac1----" || S_pub_r), msg[:116])); the rest
    is noise, which only the handshake's own checks (in Python) refuse."""
    body = b"\x01\x00\x00\x00" + bytes(range(112))
    key = hashlib.blake2s(b"mac1----" + responder_public).digest()
    mac1 = hashlib.blake2s(body, key=key, digest_size=16).digest()
    return body + mac1 + bytes(16)


def test_handshake_mid_loop_reaches_python_at_once():
    """40 data datagrams with an initiation as the 12th (second round): the
    loop stops after that round and its fold hands the queued message on
    (Output.handshakes), not after the rounds behind it."""
    single, looped, src = _twins()
    try:
        for t in (single, looped):
            _warm_up(t, src)
            for i in range(41):
                if i == 11:
                    d = _initiation(t.dev.public_key)
                else:
                    d = message(KEY_AB, 7, i, ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * 60))
                src.sendto(d, t.addr)
            t.one_by_one() if t is single else t.looped()
        a, b = single.seen(), looped.seen()
        assert a["rounds"] == b["rounds"] == 6
        assert looped.calls == [2, 4]  # 8, 8 (the initiation), then 8, 8, 8, 1
        assert [o[3] for o in looped.outputs if o is not None][0] == 1  # the first fold's Output
        del a["outputs"], b["outputs"]
        assert a == b
        assert len(a["inner"]) == 40
    finally:
        src.close()
        single.close()
        looped.close()
