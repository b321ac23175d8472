"""vpncrypt.bench.limit: the loopback bench's limit is one packet per (the
baseline row's CPU per packet + the seal of one packet), issue 22.  Only the
arithmetic and what is measured are checked here, never how fast it is."""

import math

from vpncrypt.bench import limit as L


def test_limit_is_one_packet_per_baseline_plus_seal():
    row = {"cpu_s_per_packet": {"A": 2e-6, "B": 3e-6}}
    got = L.measure_limit(row, size=1472, batch=8, seconds=0.05)
    assert got["packet_bytes"] == 1500  # 1472 bytes of UDP payload behind 20 + 8 bytes of headers
    assert got["baseline_cpu_s_per_packet"] == 3e-6  # the slower worker's
    assert 0 < got["seal_s_per_packet"] < 1 and 0 < got["aead_seal_s_per_packet"] < 1
    assert math.isclose(got["limit_pps"], 1 / (3e-6 + got["seal_s_per_packet"]))
    text = L.describe(got, {"pps": got["limit_pps"] * 0.5})
    assert "of it" in text and "50%" in text and "by CPU per packet" not in text
    # a row that measured its CPU also says how close its own cost comes: half as costly here
    slow = 2 * (3e-6 + got["seal_s_per_packet"])
    text = L.describe(got, {"pps": got["limit_pps"] * 0.5, "cpu_s_per_packet": {"A": slow / 2, "B": slow}})
    assert "(50% by CPU per packet)" in text


def test_seal_covers_the_whole_batch_of_bench_packets():
    # the seal path refuses nothing: a batch it did not seal whole would raise
    for size, batch in ((24, 1), (1472, 64), (8972, 3)):
        assert L.seal_s(size, batch, seconds=0.02) > 0
