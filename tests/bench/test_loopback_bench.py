"""`vpncrypt loopback-bench` in its short mode: the handshake completes, every
packet arrives intact, and the JSON has all of its fields.  No speed is asserted."""
import json
import subprocess

import pytest

from tests.installed import script

ROW_FIELDS = {"mode", "crypto", "handshake", "sent", "delivered", "delivered_pct", "elapsed_s",
              "pps", "gbit_s", "latency_p50_us", "latency_p99_us", "corrupted", "duplicated",
              "cpu_s_per_packet", "cpu_s", "drops", "rss_kb", "rss_growth", "intact"}


def _bench(*args):
    proc = subprocess.run([script("vpncrypt"), "loopback-bench", "--json", *args],
                          capture_output=True, text=True, timeout=180)
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


def test_bidirectional_imix_many_peers():
    res = _bench("--packets", "6000", "--mix", "imix", "--bidirectional", "--peers", "3", "--no-baseline")
    row = res["rows"][0]
    assert res["ok"] and row["handshake"] and row["intact"]
    assert row["sent"] == 12000 and row["delivered"] > 0
