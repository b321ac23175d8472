"""Long run: two vpncrypt devices (the production data plane, in the
loopback-bench worker processes) carry traffic both ways at 50% of the
maximum rate measured just before on this machine, with test timers that
rekey every 2 s.

Asserted: zero corrupted or duplicated deliveries, at least 98% delivered,
rekeys kept happening, resident memory flat within 10% after warm-up (the
last tenth of the run against the second tenth), and no growth in open file
descriptors or asyncio tasks.

CI: 18 s.  VPNCRYPT_SOAK_SECONDS=600: ten minutes.
"""

from tests.reliability.netutil import SOAK, pair_args, save_report, short_timers
from vpncrypt.bench.loopback import run_pair

SECONDS = SOAK or 18.0
TIMERS = short_timers(rekey_after_time=2.0, reject_after_time=6.0)


def _args(**kw):
    return pair_args(TIMERS, **kw)


def test_long_run_half_rate_with_rekeys(tmp_path):
    top, _, _ = run_pair(_args(), "wireguard", "native", drain=0.5)
    assert top["handshake"] and top["pps"] > 0, top
    per_direction = top["pps"] / 2
    rate = 0.5 * per_direction
    row, ra, rb = run_pair(_args(duration=SECONDS, rate=rate), "wireguard", "native", drain=1.0)
    report = {
        "max_pps_both_directions": top["pps"],
        "rate_per_direction": rate,
        "seconds": SECONDS,
        "row": row,
        "handshakes": {"A": ra["handshakes"], "B": rb["handshakes"]},
        "rss_kb": {
            w: {"after_warmup": r["rss_after_warmup_kb"], "end": r["rss_kb"], "growth": r["rss_growth"]}
            for w, r in (("A", ra), ("B", rb))
        },
        "fds": {"A": ra["fds"], "B": rb["fds"]},
        "tasks": {"A": ra["tasks"], "B": rb["tasks"]},
    }
    save_report(tmp_path, "long_run.json", report)
    assert row["handshake"], report
    assert row["corrupted"] == 0 and row["duplicated"] == 0, report
    assert row["delivered"] >= 0.98 * row["sent"], report
    assert ra["handshakes"] + rb["handshakes"] >= SECONDS / 2.0 / 2, report
    for r in (ra, rb):
        assert r["rss_growth"] is not None and r["rss_growth"] <= 1.10, report
        assert r["fds"]["last"] <= r["fds"]["after_warmup"], report
        assert r["fds"]["max"] <= r["fds"]["after_warmup"] + 2, report
        assert r["tasks"]["last"] <= r["tasks"]["after_warmup"], report
