"""`vpncrypt loopback-bench` in its short mode: the handshake completes, every
packet arrives intact, and the JSON has all of its fields.  No speed is asserted."""

import json
import os
import subprocess

import pytest

from tests.installed import script

ROW_FIELDS = {
    "mode",
    "crypto",
    "handshake",
    "sent",
    "delivered",
    "delivered_pct",
    "elapsed_s",
    "pps",
    "gbit_s",
    "latency_p50_us",
    "latency_p99_us",
    "corrupted",
    "duplicated",
    "cpu_s_per_packet",
    "cpu_s",
    "drops",
    "rss_kb",
    "rss_growth",
    "intact",
    "cpu_share",
    "switches",
    "window",
    "pinned_cpu",
}


def _bench(*args):
    proc = subprocess.run(
        [script("vpncrypt"), "loopback-bench", "--json", *args], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


@pytest.mark.parametrize("crypto", ["native", "pynacl"])
def test_short_run_delivers_everything_intact(crypto):
    res = _bench("--packets", "20000", "--crypto", crypto)
    assert res["ok"] is True
    assert {"command", "date", "cpu", "settings", "rows", "fraction_of_baseline"} <= res.keys()
    assert [r["mode"] for r in res["rows"]] == ["baseline", "wireguard"]
    for row in res["rows"]:
        assert ROW_FIELDS <= row.keys()
        assert row["handshake"] is True
        assert row["sent"] == 20000
        assert row["corrupted"] == 0 and row["duplicated"] == 0 and row["intact"]
        assert row["delivered"] > 0
        assert row["latency_p50_us"] is not None and row["latency_p99_us"] >= row["latency_p50_us"]
    wg = res["rows"][1]
    assert wg["crypto"] == crypto
    assert res["fraction_of_baseline"] is not None
    # the encrypted row's limit: 1 / (the baseline's CPU per packet, the slower
    # worker's, + the seal of one 1500-byte packet, 28 + 1472), measured in this run
    lim = res["limit"]
    base = res["rows"][0]["cpu_s_per_packet"]
    assert lim["packet_bytes"] == 1500
    assert lim["baseline_cpu_s_per_packet"] == max(base["A"], base["B"])
    assert lim["seal_s_per_packet"] > 0 and lim["aead_seal_s_per_packet"] > 0
    assert lim["limit_pps"] == pytest.approx(
        1 / (lim["baseline_cpu_s_per_packet"] + lim["seal_s_per_packet"])
    )
    assert lim["fraction"] == pytest.approx(wg["pps"] / lim["limit_pps"])
    cpu = wg["cpu_s_per_packet"]
    assert lim["fraction_by_cpu"] == pytest.approx(
        (lim["baseline_cpu_s_per_packet"] + lim["seal_s_per_packet"]) / max(cpu["A"], cpu["B"])
    )
    # unpaced: the source keeps at most 16 batches of 64 in flight; only A sends
    assert res["settings"]["window_packets"] == 16 * 64
    for row in res["rows"]:
        assert row["window"]["A"]["packets"] == 1024 and row["window"]["B"]["packets"] == 0
        assert 0 < row["cpu_share"]["A"] and 0 < row["cpu_share"]["B"]
        # --cpus auto: the two workers on two different CPUs this process may use
        allowed = os.sched_getaffinity(0)
        pinned = row["pinned_cpu"]
        if len(allowed) >= 2:
            assert pinned["A"] in allowed and pinned["B"] in allowed and pinned["A"] != pinned["B"]
        else:
            assert pinned == {"A": None, "B": None}


def test_paced_rows_have_no_window_and_cpus_off_leaves_placement():
    res = _bench("--packets", "3000", "--rate", "100000", "--no-baseline", "--cpus", "off")
    row = res["rows"][0]
    assert res["ok"] and row["intact"]
    assert res["settings"]["window_packets"] == 0
    assert row["window"]["A"]["packets"] == 0 and row["window"]["A"]["waits"] == 0
    assert row["pinned_cpu"] == {"A": None, "B": None}


def test_bad_cpus_is_refused():
    proc = subprocess.run(
        [script("vpncrypt"), "loopback-bench", "--cpus", "0,99999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--cpus 0,99999" in proc.stderr


def test_bidirectional_imix_many_peers():
    res = _bench("--packets", "6000", "--mix", "imix", "--bidirectional", "--peers", "3", "--no-baseline")
    row = res["rows"][0]
    assert res["ok"] and row["handshake"] and row["intact"]
    assert row["sent"] == 12000 and row["delivered"] > 0
