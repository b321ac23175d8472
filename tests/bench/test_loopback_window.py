"""The loopback bench's closed-loop source: its window (SendWindow), the
window's size from the options, the sink counts the two worker processes
share (SharedCounts), and the limit's fraction by CPU per packet.  No timing:
the window is driven with given counts and clock values."""

import argparse
import os

import pytest

from vpncrypt.bench.limit import fraction_by_cpu
from vpncrypt.bench.loopback import (
    Pacer,
    SendWindow,
    SharedCounts,
    _Sink,
    _Source,
    window_packets,
    worker_cpus,
)


def test_window_opens_as_the_peer_counts():
    w = SendWindow(128, stall=0.05)
    assert w.room(0, 0, 10.0) == 128
    assert w.room(64, 0, 10.0) == 64
    assert w.room(128, 0, 10.0) == 0  # full: wait
    assert w.room(128, 64, 10.001) == 64  # the peer counted a batch
    assert w.room(192, 64, 10.002) == 0
    assert w.waits == 2
    assert w.written_off == 0


def test_a_full_window_that_keeps_moving_is_not_written_off():
    w = SendWindow(100, stall=0.05)
    received = 0
    now = 0.0
    for _ in range(50):  # the peer counts one packet every 40 ms: slow, but moving
        assert w.room(received + 100, received, now) == 0
        now += 0.04
        received += 1
    assert w.written_off == 0


def test_a_stalled_window_writes_off_what_is_in_flight():
    w = SendWindow(100, stall=0.5)
    assert w.room(130, 30, 1.0) == 0  # 100 in flight (30 of 130 counted): full from now
    assert w.room(130, 30, 1.25) == 0  # not yet 0.5 s
    assert w.room(130, 30, 1.5) == 100  # 0.5 s without a count: the 100 are lost
    assert w.written_off == 100
    assert w.in_flight(130, 30) == 0
    assert w.room(180, 30, 1.75) == 50  # counts on from there
    # written-off packets that arrive after all make the window larger, never negative in flight
    assert w.in_flight(180, 110) == 0
    assert w.room(180, 110, 2.0) == 100


def test_a_stall_is_timed_from_the_last_count():
    w = SendWindow(10, stall=0.5)
    assert w.room(10, 0, 0.0) == 0
    assert w.room(10, 0, 0.25) == 0
    assert w.room(11, 1, 0.375) == 0  # one more counted (and one more sent): the clock restarts
    assert w.room(11, 1, 0.625) == 0  # 0.25 s since that count (0.625 s since the first wait)
    assert w.room(11, 1, 0.875) == 10
    assert w.written_off == 10


def test_a_window_holds_at_least_one_packet():
    with pytest.raises(ValueError):
        SendWindow(0)


def _ns(**kw):
    base = dict(rate=0.0, batch=64)
    base.update(kw)
    return argparse.Namespace(**base)


def test_window_size_from_the_options():
    assert window_packets(_ns()) == 16 * 64  # no --window (the reliability tests' options): 16 batches
    assert window_packets(_ns(window=None)) == 1024
    assert window_packets(_ns(window=4, batch=32)) == 128
    assert window_packets(_ns(window=0)) == 0  # open loop
    assert window_packets(_ns(rate=500000.0, window=16)) == 0  # paced rows stay open-loop


def test_the_two_processes_see_each_others_sink_counts():
    fd = SharedCounts.make_fd()
    try:
        mine, theirs = SharedCounts(fd), SharedCounts(fd)  # as mapped by A and by B
    finally:
        os.close(fd)
    sink = _Sink([1], theirs.sink("B"))  # B's sink, checking A's stream 1
    sink.armed = True
    src = _Source([1472], 8, "10.0.0.1", ["10.0.0.2"], 1)
    src.fill(8, 1000)
    sink.write(src.slab, src.off, src.len, 8)
    assert mine.sink("B").received == 8  # what A's window reads
    assert mine.sink("A").received == 0  # the other slot is A's own sink
    assert sink.report()["received"] == 8 and sink.report()["corrupted"] == 0
    assert mine.peer("A") == "B" and mine.peer("B") == "A"


def test_a_shared_sink_state_serves_one_stream():
    fd = SharedCounts.make_fd()
    try:
        counts = SharedCounts(fd)
    finally:
        os.close(fd)
    with pytest.raises(ValueError):
        _Sink([1, 2], counts.sink("A"))


def test_fraction_by_cpu_uses_the_slower_worker():
    limit = {"baseline_cpu_s_per_packet": 0.4e-6, "seal_s_per_packet": 0.5e-6}
    row = {"cpu_s_per_packet": {"A": 1.0e-6, "B": 0.8e-6}}
    assert fraction_by_cpu(row, limit) == pytest.approx(0.9)
    row = {"cpu_s_per_packet": {"A": 0.6e-6, "B": 1.2e-6}}
    assert fraction_by_cpu(row, limit) == pytest.approx(0.75)


def test_worker_cpus():
    assert worker_cpus("off", {0, 1}) == (None, None)
    assert worker_cpus("auto", {0, 1}) == (0, 1)
    assert worker_cpus("auto", {3, 1, 2}) == (1, 2)  # the first two this process may use
    assert worker_cpus("auto", {0}) == (None, None)  # one CPU: nothing to place
    assert worker_cpus("auto", {0, 1}, threads=2) == (None, None)  # a worker's threads need the cores
    assert worker_cpus("1,0", {0, 1}) == (1, 0)
    for bad in ("0,5", "x", "0", "0,1,1", ""):
        with pytest.raises(ValueError):
            worker_cpus(bad, {0, 1})


def test_pacer_schedule_and_lateness():
    p = Pacer(500000.0, t0=100.0)  # a packet every 2 us
    assert p.wait(0, 100.0) == 0.0
    assert p.wait(64, 100.0) == pytest.approx(128e-6)  # 64 packets are 128 us of traffic
    assert p.wait(64, 100.000100) == pytest.approx(28e-6)  # a sub-millisecond clock counts
    assert p.late == 0.0 and p.late_batches == 0
    assert p.wait(64, 100.000628) == pytest.approx(-500e-6)  # 0.5 ms behind
    assert p.late == pytest.approx(500e-6) and p.late_at == pytest.approx(628e-6)
    assert p.late_batches == 0  # not over 1 ms
    assert p.wait(128, 100.0023) == pytest.approx(-2.044e-3)
    assert p.late == pytest.approx(2.044e-3) and p.late_batches == 1
    assert p.wait(1000000, 100.5) == pytest.approx(1.5)  # ahead: never counted as late
    assert p.report() == {"late_s": p.late, "late_at_s": p.late_at, "batches_over_1ms_late": 1}


def test_a_pacer_needs_a_rate():
    with pytest.raises(ValueError):
        Pacer(0.0, 0.0)
