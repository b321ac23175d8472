"""Clock jumps forward and back (the protocol core takes `now`, so a fake clock
drives it): no session gets stuck, data keeps flowing, rekeys still happen."""

import pytest

from tests.packets import ipv4
from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, make_pair


def a2b(i):
    return ipv4(A_IP, B_IP, i.to_bytes(4, "big") * 5)


def b2a(i):
    return ipv4(B_IP, A_IP, i.to_bytes(4, "big") * 5)


def _talk(net, i):
    """One packet each way; both must arrive."""
    net.send(A_ADDR, [a2b(i)])
    net.send(B_ADDR, [b2a(i)])
    assert net.delivered[B_ADDR][-1] == a2b(i), f"a->b lost at step {i}"
    assert net.delivered[A_ADDR][-1] == b2a(i), f"b->a lost at step {i}"


def _run(net, clock, start, seconds, step=5.0):
    i = start
    end = clock.now + seconds
    while clock.now < end:
        net.advance(clock.now + step)
        _talk(net, i)
        i += 1
    return i


@pytest.mark.parametrize("jump", [-10_000.0, -150.0, -3.0])
def test_backward_jump_keeps_sessions_and_rekeys(crypto, clock, jump):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    _talk(net, 0)
    pa = a.peers[b.public_key]
    done = pa.counters.handshakes_completed
    i = _run(net, clock, 1, 60)
    clock.now += jump  # the clock goes back
    i = _run(net, clock, i, 1)  # traffic carries on at once
    # every deadline stays within the protocol's timer range of the new clock
    for dev in (a, b):
        d = dev.next_deadline()
        assert d is None or d <= clock.now + 200, "a deadline was pushed into the far future"
    # the rekey that was due (REKEY_AFTER_TIME 120 s from the first handshake) still happens
    i = _run(net, clock, i, 130)
    assert pa.counters.handshakes_completed > done
    # and keys keep rotating: never rejected, never stuck
    before = pa.counters.handshakes_completed
    _run(net, clock, i, 260)
    assert pa.counters.handshakes_completed > before
    for reason in ("staged_flushed", "stale_keypair"):
        assert a.drops().get(reason, 0) == 0 and b.drops().get(reason, 0) == 0


@pytest.mark.parametrize("jump", [30.0, 200.0, 100_000.0])
def test_forward_jump_recovers(crypto, clock, jump):
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    _talk(net, 0)
    pa = a.peers[b.public_key]
    done = pa.counters.handshakes_completed
    clock.now += jump  # e.g. a suspend
    net.advance(clock.now)  # overdue timers fire once, not once per missed period
    i = _run(net, clock, 1, 20)  # traffic flows again (new handshake if keys expired)
    if jump >= 180:
        assert pa.counters.handshakes_completed > done
    _run(net, clock, i, 200)
    assert a.has_session(pa)


def test_keys_expire_on_the_device_clock_across_a_jump(crypto, clock):
    """After the caller's clock jumps back, a keypair still expires 180 s of
    device time after it was made: not 180 s plus the jump."""
    a, b, net = make_pair(crypto, clock, a_endpoint_for_b=A_ADDR)
    _talk(net, 0)
    net.drop = lambda s, d, data: data[0] != 4  # no handshake gets through any more
    net.advance(clock.now + 100)

    def tick():  # the devices see the time (and the jump)
        for dev, addr in ((a, A_ADDR), (b, B_ADDR)):
            net.run(addr, dev.handle_timers(clock.now))

    tick()
    clock.now -= 5000
    tick()
    net.advance(clock.now + 79.5)  # 179.5 s of device time
    net.send(A_ADDR, [a2b(1)])
    assert net.delivered[B_ADDR][-1] == a2b(1)
    net.advance(clock.now + 1)  # 180.5 s
    net.send(A_ADDR, [a2b(2)])
    assert net.delivered[B_ADDR][-1] == a2b(1)  # A's keypair is past REJECT_AFTER_TIME
