"""Anti-replay window."""
from hypothesis import given, settings, strategies as st

from vpncrypt.protocol.replay import WINDOW, ReplayWindow


def test_window_size():
    assert WINDOW >= 8128


def test_in_order_out_of_order_duplicates_old():
    w = ReplayWindow()
    assert w.update(0) and not w.update(0)
    assert w.update(5) and w.update(3) and w.update(4) and not w.update(3)
    assert w.update(WINDOW + 4)          # 5 is now WINDOW-1 behind: still inside
    assert not w.update(4)               # exactly WINDOW behind: too old
    assert w.update(6) and not w.update(5)
    assert w.update(10 ** 6) and not w.update(10 ** 6 - WINDOW)
    assert w.update(10 ** 6 - WINDOW + 1)


def test_check_does_not_mark():
    w = ReplayWindow()
    assert w.check(7) and w.check(7)
    assert w.update(7) and not w.check(7)


def _model_accept(seen, greatest, c):
    if c in seen:
        return False
    if greatest is not None and c <= greatest and greatest - c >= WINDOW:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 40000)), max_size=300))
def test_against_model(counters):
    w = ReplayWindow()
    seen, greatest = set(), None
    for c in counters:
        expect = _model_accept(seen, greatest, c)
        assert w.check(c) == expect
        assert w.update(c) == expect
        if expect:
            seen.add(c)
            greatest = c if greatest is None else max(greatest, c)
