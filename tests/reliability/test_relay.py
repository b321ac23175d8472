"""The hostile relay itself (tests/reliability/relay.py): its handshake loss
keeps to the streak it is given, and its handshake log says what reached the
other side, since the hostile-path tests judge the sessions by that log."""

import socket
import time

from tests.reliability.relay import HostileRelay, Impairments, handshakes_through

CLEAN = dict(drop=0.0, duplicate=0.0, reorder=0.0, delay=0.0, corrupt=0.0)


def _udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.2)
    return s


def _initiation(index: int) -> bytes:
    # a 148-byte message of type 1 with its sender index at bytes 4..8
    return bytes([1, 0, 0, 0]) + index.to_bytes(4, "little") + bytes(140)


def test_handshake_loss_never_longer_than_the_streak_and_the_log_matches_what_arrived():
    a, b = _udp(), _udp()
    relay = HostileRelay(Impairments(**CLEAN, handshake_drop=0.5, handshake_drop_streak=1), seed=3)
    port_for_a, _ = relay.start(a.getsockname()[1], b.getsockname()[1])
    arrived = []
    try:
        for i in range(1, 301):
            a.sendto(_initiation(i), ("127.0.0.1", port_for_a))
            time.sleep(0.001)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                arrived.append(int.from_bytes(b.recv(2048)[4:8], "little"))
            except TimeoutError:
                if len(arrived) >= 150:
                    break
    finally:
        stats = relay.stop()
        a.close()
        b.close()
    log = stats["handshakes"]
    assert [e[3] for e in log] == list(range(1, 301))  # every message, in order
    assert {e[1] for e in log} == {"to_b"} and {e[2] for e in log} == {1}
    fates = [e[5] for e in log]
    assert set(fates) <= {"forwarded", "dropped"}
    assert "dropped,dropped" not in ",".join(fates)  # never two in a row
    # a pass after each loss, then a loss half the time: a third lost in the long run
    assert 70 <= fates.count("dropped") <= 130, fates.count("dropped")
    assert arrived == [e[3] for e in log if e[5] == "forwarded"]
    assert stats["to_b"]["dropped_handshake"] == fates.count("dropped")


def test_handshakes_through_counts_only_an_intact_answer_to_the_latest_initiation():
    def init(t, direction, index, fate="forwarded"):
        return [t, direction, 1, index, 0, fate]

    def resp(t, direction, sender, receiver, fate="forwarded"):
        return [t, direction, 2, sender, receiver, fate]

    assert handshakes_through([init(0, "to_b", 11), resp(0.01, "to_a", 21, 11)]) == 1
    # lost or damaged on the way, either message
    assert handshakes_through([init(0, "to_b", 11, "dropped"), resp(0.01, "to_a", 21, 11)]) == 0
    assert handshakes_through([init(0, "to_b", 11, "tampered"), resp(0.01, "to_a", 21, 11)]) == 0
    assert handshakes_through([init(0, "to_b", 11), resp(0.01, "to_a", 21, 11, "dropped")]) == 0
    assert handshakes_through([init(0, "to_b", 11), resp(0.01, "to_a", 21, 11, "late")]) == 0
    # an answer that comes after its initiator has moved on to a new initiation
    assert handshakes_through([init(0, "to_b", 11), init(0.5, "to_b", 12), resp(0.6, "to_a", 21, 11)]) == 0
    # a duplicated response is still one handshake; B's initiations count as well
    log = [
        init(0, "to_b", 11),
        resp(0.01, "to_a", 21, 11),
        resp(0.02, "to_a", 21, 11),
        init(2, "to_a", 31),
        resp(2.01, "to_b", 41, 31),
    ]
    assert handshakes_through(log) == 2
