"""`python3 -m tests.benchlab.handshake_flood` in a tiny form (1 s of iperf3, a 20,000/s flood,
vpncrypt and Debian 13's wireguard-go): each implementation runs a control
round and a round per flood kind; the control carries pings and TCP and the
new peer completes its handshake; the flood was sent (and never above the
rate asked), no victim answers an initiation from an unknown key with a
response or a bad mac1 with anything, every round counted the new peer's
initiations, the victims stayed up, and nothing of the run is left.  No speed
is asserted."""

import json
import subprocess
import sys

import pytest

from tests.bench.requires import root_and_tools
from tests.benchlab import REPO
from tests.bench.test_tunnel_bench import RUN_LINE, _assert_nothing_left, _started, current_wireguard_go

RATE = 20000
ROUND_FIELDS = {
    "kind",
    "flood",
    "error",
    "tcp",
    "ping",
    "seconds",
    "victim_cpu_pct",
    "victim_socket_drops",
    "new_peer",
    "victim_alive",
}
FLOOD_FIELDS = {
    "kind",
    "sent",
    "seconds",
    "rate",
    "wanted_rate",
    "sources",
    "sendmmsg_calls",
    "replies",
    "replies_per_s",
}


@pytest.fixture(autouse=True)
def _needs():
    root_and_tools("flood", ("ip", "wg", "wireguard-go", "iperf3", "ping", "nft"))


def _flood(*args):
    cmd = [sys.executable, "-m", "tests.benchlab.handshake_flood", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)


def test_tiny_flood_rounds_are_well_formed_and_leave_nothing():
    new = current_wireguard_go()
    proc = _flood(
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--new-peer-timeout",
        "3",
        "--rate",
        str(RATE),
        "--sources",
        "16",
        "--json",
        "-v",
        "--wireguard-go",
        new,
    )
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    res = json.loads(proc.stdout)
    m = RUN_LINE.search(proc.stderr)
    assert m and res["run_id"] == m.group(1), proc.stderr[-2000:]
    assert res["ok"] is True
    assert len(res["namespaces"]) == 3
    assert [i["implementation"] for i in res["implementations"]] == ["vpncrypt", "wireguard-go"]
    assert res["implementations"][1]["wireguard_go"]["version"] == "wireguard-go v0.0.20230223"
    for imp in res["implementations"]:
        assert imp["ok"] is True and imp["error"] is None, imp
        rounds = imp["rounds"]
        assert [r["kind"] for r in rounds] == ["control", "mac1", "nomac"]
        control = rounds[0]
        assert control["flood"] is None
        assert control["ping"]["sent"] > 0 and control["ping"]["received"] > 0, control
        assert control["tcp"]["gbit_s"] > 0 and control["tcp"]["fraction_of_control"] == 1.0
        assert control["new_peer"]["handshake_s"] is not None, control
        for r in rounds:
            assert ROUND_FIELDS <= r.keys(), ROUND_FIELDS - r.keys()
            assert r["victim_alive"] is True and r["error"] is None, r
            assert r["victim_cpu_pct"] is not None and r["victim_cpu_pct"] >= 0, r
            assert r["victim_socket_drops"] is not None and r["victim_socket_drops"] >= 0, r
            np_ = r["new_peer"]
            # the nftables counter saw the new peer's first initiation at least
            assert np_["initiations"] >= 1, r
            if np_["handshake_s"] is not None:
                assert np_["retries"] == np_["initiations"] - 1, r
            p = r["ping"]
            assert p["sent"] > 0 and 0 <= p["received"] <= p["sent"], r
            assert r["tcp"]["gbit_s"] >= 0
        for r in rounds[1:]:
            f = r["flood"]
            assert FLOOD_FIELDS <= f.keys() and f["kind"] == r["kind"], f
            assert f["sources"] == 16 and f["wanted_rate"] == RATE
            assert f["sent"] > 0 and f["sent"] <= RATE * f["seconds"] + 1024, f
            # initiations from keys the victim does not know never get a
            # response; a bad mac1 gets nothing at all
            assert f["replies"]["response"] == 0 and f["replies"]["other"] == 0, f
            if r["kind"] == "nomac":
                assert f["replies"]["cookie_reply"] == 0, f
    _assert_nothing_left(res["run_id"], _started(proc.stderr))


def test_bad_arguments():
    for bad in (["--kinds", "mac3"], ["--sources", "1025"], ["--implementations", "boringtun"]):
        proc = _flood(*bad)
        assert proc.returncode == 2, (bad, proc.stderr)
