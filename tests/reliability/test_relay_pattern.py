"""The relay's reordering by a fixed pattern (Impairments.reorder_every, for
tests/reliability/reorder_lab.py): every N-th datagram of a direction held
back until `reorder_depth` later ones have passed, nothing else changed."""

import socket

from tests.reliability.relay import HostileRelay, Impairments

# no other impairment; max_delay far beyond the test, so that only the count
# releases a held datagram (a sender stalled by a loaded machine cannot)
PATTERN = dict(drop=0.0, duplicate=0.0, delay=0.0, corrupt=0.0, reorder=0.0, max_delay=30.0)
N = 42


def _through(imp):
    """Data messages 1..N (type 4, their index at bytes 4..8) from A to B
    through a relay with imp: (the indices in the order B got them, the
    relay's counts)."""
    a, b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for s in (a, b):
        s.bind(("127.0.0.1", 0))
    b.settimeout(10)
    relay = HostileRelay(imp, seed=1)
    port_for_a, _ = relay.start(a.getsockname()[1], b.getsockname()[1])
    try:
        for i in range(1, N + 1):
            a.sendto(bytes([4, 0, 0, 0]) + i.to_bytes(4, "little") + bytes(56), ("127.0.0.1", port_for_a))
        arrived = [int.from_bytes(b.recv(2048)[4:8], "little") for _ in range(N)]
    finally:
        stats = relay.stop()
        a.close()
        b.close()
    return arrived, stats["to_b"]


def test_every_fourth_datagram_comes_after_the_two_behind_it():
    arrived, st = _through(Impairments(**PATTERN, reorder_every=4, reorder_depth=2))
    assert sorted(arrived) == list(range(1, N + 1))
    held = list(range(4, 41, 4))  # the 4th, 8th, ... 40th datagram the relay saw
    for i in held:
        assert arrived.index(i) > arrived.index(i + 1) and arrived.index(i) > arrived.index(i + 2), arrived
    rest = [i for i in arrived if i not in held]
    assert rest == sorted(rest)
    assert st["reordered"] == 10 and st["forwarded"] == N, st


def test_without_a_pattern_the_relay_forwards_in_order():
    arrived, st = _through(Impairments(**PATTERN))  # the control: nothing held back
    assert arrived == list(range(1, N + 1))
    assert st["reordered"] == 0
