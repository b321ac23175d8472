"""`python3 -m tests.benchlab.reconnect_storm` in a tiny form (60 peers, quiet and busy, vpncrypt
and Debian 13's wireguard-go; 20 and 45 peers from 3 addresses): every peer
completes, every response authenticates as the initiator checks it, every
peer's keepalive sets the victim's latest-handshake, the victim saw one
address per peer (or the --sources count), the counters add up, and nothing
of the run is left.  The storm peers' initiations are also checked against
vpncrypt's own responder code, and a tampered or misdirected response must
fail the initiator's check.  No speed is asserted."""

import hashlib
import json
import subprocess
import sys
import time

import pytest

from tests.bench.requires import root_and_tools
from tests.benchlab import REPO
from tests.bench.test_tunnel_bench import RUN_LINE, _assert_nothing_left, _started, current_wireguard_go
from tests.benchlab.reconnect_storm import COUNTERS

# A storm's result: its own fields, and one per counter the storm keeps (the
# checks below name every counter; a counter the product stops keeping fails them)
STORM_FIELDS = {
    "implementation",
    "label",
    "peers",
    "load",
    "ok",
    "error",
    "configure_s",
    "complete",
    "seconds",
    "all_complete_s",
    "half_complete_s",
    "p90_complete_s",
    "handshakes_per_s",
    "peak_handshakes_per_s",
    "victim_cpu_s",
    "victim_cpu_pct",
    "victim_cpu_ms_per_handshake",
    "generator_cpu_pct",
    "victim_socket_drops",
    "confirmed",
    "expired_unconfirmed",
    "victim_endpoint_addresses",
} | set(COUNTERS)


@pytest.fixture(autouse=True)
def _needs():
    root_and_tools("storm", ("ip", "wg", "wireguard-go", "stress-ng"))


def _storm(*args):
    cmd = [sys.executable, "-m", "tests.benchlab.reconnect_storm", "--json", "-v", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None)


def _check_counts(s, sources):
    n = s["peers"]
    assert STORM_FIELDS <= s.keys(), STORM_FIELDS - s.keys()
    assert s["ok"] is True and s["error"] is None, s
    assert s["complete"] == s["confirmed"] == n, s
    assert s["bad_responses"] == 0 and s["expired_unconfirmed"] == 0, s
    assert s["victim_endpoint_addresses"] == min(n, sources or n), s
    # one first initiation per peer, then retries; one response completes a peer
    assert s["initiations"] == n + s["retries"], s
    assert s["responses"] == (
        n + s["answered_after_replaced"] + s["duplicate_responses"] + s["bad_responses"]
    ), s
    assert s["with_mac2"] <= s["retries"] and s["cookies_taken"] <= s["cookie_replies"], s
    assert s["cookie_replies_to_replaced"] <= s["cookie_replies"], s
    assert s["unknown_index"] == 0 and s["other"] == 0, s
    assert 0 < s["half_complete_s"] <= s["p90_complete_s"] <= s["all_complete_s"] <= s["seconds"], s
    assert s["handshakes_per_s"] > 0 and 1 <= s["peak_handshakes_per_s"] <= n, s
    assert s["victim_cpu_s"] >= 0 and s["victim_cpu_ms_per_handshake"] >= 0, s
    assert s["victim_socket_drops"] is not None and s["victim_socket_drops"] >= 0, s


def test_tiny_storm_quiet_and_busy_all_complete_checked_and_leave_nothing():
    new = current_wireguard_go()
    t0 = time.monotonic()
    proc, res = _storm("--peers", "60", "--load", "quiet,busy", "--timeout", "60", "--wireguard-go", new)
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    m = RUN_LINE.search(proc.stderr)
    assert m, proc.stderr[-2000:]
    assert res["ok"] is True and res["run_id"] == m.group(1)
    assert res["settings"]["peers"] == [60] and res["settings"]["loads"] == ["quiet", "busy"]
    assert set(res["generation_s"]) == {"60"}
    order = [(s["peers"], s["load"], s["implementation"]) for s in res["storms"]]
    assert order == [
        (60, load, impl) for load in ("quiet", "busy") for impl in ("vpncrypt", "wireguard-go")
    ], order
    assert [b["version"] for b in res["versions"]["wireguard-go-builds"]] == ["wireguard-go v0.0.20230223"]
    for s in res["storms"]:
        _check_counts(s, 0)
    _assert_nothing_left(res["run_id"], _started(proc.stderr))
    assert time.monotonic() - t0 < 300


def test_two_sizes_shared_sources_and_bad_arguments():
    proc, res = _storm(
        "--peers", "20", "--peers", "45", "--sources", "3", "--implementations", "vpncrypt", "--timeout", "60"
    )
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    assert [(s["peers"], s["implementation"]) for s in res["storms"]] == [(20, "vpncrypt"), (45, "vpncrypt")]
    assert set(res["generation_s"]) == {"20", "45"}
    for s in res["storms"]:
        _check_counts(s, 3)
    _assert_nothing_left(res["run_id"], _started(proc.stderr))
    for bad in (["--peers", "0"], ["--load", "noisy"], ["--sources", "70000"]):
        proc, _ = _storm(*bad)
        assert proc.returncode == 2, (bad, proc.stderr)


def test_storm_peers_initiations_and_response_check_against_the_responder_code():
    from tests.benchlab import handshakeload as H
    from vpncrypt.crypto import get_backend
    from vpncrypt.protocol import keys
    from vpncrypt.protocol.cookie import CookieState
    from vpncrypt.protocol.noise_ik import (
        wg_begin_consume_initiation,
        wg_create_response,
        wg_finish_consume_initiation,
    )
    from vpncrypt.protocol.messages import parse_initiation

    crypto = get_backend("native")
    v_priv = keys.generate_private()
    v_pub = keys.public_from_private(v_priv)
    peers = H.make_storm_peers(v_pub, 3, workers=1)
    assert len({p.public for p in peers}) == 3
    items = []
    for k, p in enumerate(peers):
        body, enc_ts = p.initiation(crypto, 0x1234 + k, time.time())
        msg = CookieState(v_pub).add_macs(body, 0.0)
        assert len(msg) == 148  # WireGuard's initiation
        # mac1 = BLAKE2s-128 keyed by BLAKE2s-256("mac1----" || responder's public key)
        # over the message up to mac1 (the WireGuard paper, 5.4.4)
        mac1_key = hashlib.blake2s(b"mac1----" + v_pub).digest()
        assert msg[116:132] == hashlib.blake2s(msg[:116], key=mac1_key, digest_size=16).digest()
        init = parse_initiation(msg)
        ss, static = wg_begin_consume_initiation(crypto, v_priv, v_pub, init)
        assert static == p.public
        wg_finish_consume_initiation(ss, keys.dh(v_priv, static), init)
        rbody, (send_key, recv_key) = wg_create_response(
            ss, keys.generate_private(), init, static, None, 77 + k
        )
        resp = CookieState(p.public).add_macs(rbody, 0.0)
        items.append((p, enc_ts, resp, recv_key))
    # a good response, one with a flipped byte in the encrypted empty payload,
    # one answering another peer's initiation, one with a bad mac1
    p0, e0, r0, k0 = items[0]
    p1, e1, _r1, _ = items[1]
    bad_tag = r0[:50] + bytes([r0[50] ^ 1]) + r0[51:]
    bad_mac1 = r0[:60] + bytes([r0[60] ^ 1]) + r0[61:]
    assert p0.keepalive(crypto, e0, bad_tag) is None
    assert p1.keepalive(crypto, e1, r0) is None
    assert p0.keepalive(crypto, e0, bad_mac1) is None
    assert p0.keepalive(crypto, e1, r0) is None  # the timestamp is in the hash
    keepalive = p0.keepalive(crypto, e0, r0)
    assert keepalive[:4] == b"\x04\x00\x00\x00" and int.from_bytes(keepalive[4:8], "little") == 77
    assert keepalive[8:16] == bytes(8)  # counter 0
    assert crypto.open(k0, bytes(12), keepalive[16:], b"") == b""  # empty payload
