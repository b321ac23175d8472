"""The anti-replay window: wireguard-go and the Linux module accept a counter
up to 8128 behind the greatest one accepted and refuse one 8129 behind."""

from hypothesis import given, settings, strategies as st

from vpncrypt.transport.replay import ReplayWindow

from tests.transport.helpers import A_ADDR, KEY_AB, b_side, ipv4, message

LIMIT = 2**64 - 2**13 - 1  # REJECT_AFTER_MESSAGES


def test_window_boundary_literals():
    w = ReplayWindow()
    assert w.record(10_000, LIMIT)
    assert w.fresh(10_000 - 8128, LIMIT) and w.record(10_000 - 8128, LIMIT)
    assert not w.fresh(10_000 - 8129, LIMIT) and not w.record(10_000 - 8129, LIMIT)
    assert not w.record(10_000 - 8128, LIMIT)  # now a duplicate


def test_in_order_out_of_order_duplicates():
    w = ReplayWindow()
    assert w.record(0, LIMIT) and not w.record(0, LIMIT)
    assert w.record(5, LIMIT) and w.record(3, LIMIT) and w.record(4, LIMIT) and not w.record(3, LIMIT)
    assert w.record(8133, LIMIT)  # 5 is exactly 8128 behind now: still checked
    assert not w.record(5, LIMIT)  # (seen)
    assert w.record(6, LIMIT)  # 8127 behind, unseen
    assert not w.record(4, LIMIT)  # 8129 behind: too old
    assert w.record(10**6, LIMIT) and not w.record(10**6 - 8129, LIMIT)
    assert w.record(10**6 - 8128, LIMIT)


def test_fresh_does_not_mark_and_limit():
    w = ReplayWindow()
    assert w.fresh(7, LIMIT) and w.fresh(7, LIMIT)
    assert w.record(7, LIMIT) and not w.fresh(7, LIMIT)
    assert not w.fresh(LIMIT, LIMIT) and not w.record(LIMIT, LIMIT)
    assert w.record(LIMIT - 1, LIMIT)


def _model_accept(seen, greatest, c):
    if c in seen:
        return False
    if greatest is not None and c <= greatest and greatest - c > 8128:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 40000)), max_size=300))
def test_against_model(counters):
    w = ReplayWindow()
    seen, greatest = set(), None
    for c in counters:
        expect = _model_accept(seen, greatest, c)
        assert w.fresh(c, LIMIT) == expect
        assert w.record(c, LIMIT) == expect
        if expect:
            seen.add(c)
            greatest = c if greatest is None else max(greatest, c)


def _deliver(t, counter):
    res = t.open([(message(KEY_AB, 7, counter, ipv4("10.0.0.1", "10.0.0.2")), A_ADDR)], 1.0)
    return res.status[0]


def test_table_window_boundary(backend):
    """The same boundary in the session table (both backends)."""
    t, pid = b_side(backend)
    assert _deliver(t, 10_000) == 0
    assert _deliver(t, 10_000 - 8128) == 0  # exactly 8128 behind: accepted
    assert _deliver(t, 10_000 - 8129) == 6  # 8129 behind: VC_WG_REPLAY
    assert _deliver(t, 10_000 - 8128) == 6  # a duplicate
    assert _deliver(t, 10_001) == 0
    assert t.stats(pid, 1.0).drops == {"replay": 2}


def test_table_refuses_counters_at_the_limit(backend):
    t, pid = b_side(backend, reject_after_messages=1000)
    assert _deliver(t, 999) == 0
    assert _deliver(t, 1000) == 6
    assert _deliver(t, 2**64 - 1) == 6


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20000), max_size=60))
def test_table_matches_the_window(counters):
    for backend in ("native", "pynacl"):
        t, _ = b_side(backend)
        w = ReplayWindow()
        for c in counters:
            assert (_deliver(t, c) == 0) == w.record(c, LIMIT)
