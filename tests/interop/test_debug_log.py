"""`--log-level debug` traces a session: handshake messages sent and
received, handshakes completed and new keypairs, keepalives, endpoint
changes (roaming), UAPI changes and reloads; rate-limited, and never any
key material (issue 10 h)."""

import re
import signal
import time

from tests.interop.lab import PORT, pair
from vpncrypt.protocol import keys


def _trace(log):
    return [line for line in log.splitlines() if "vpncrypt.trace:" in line]


def _send_from_b(lab, a, lines):
    """Raw datagrams from namespace B to A's listen port: `lines` of Python
    with a socket `s` and `to`, A's address."""
    script = ["import os, socket", "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"]
    script.append(f"to = ({a.outer!r}, {PORT})")
    lab.run_in("B", "python3", "-c", "\n".join(script + lines) + "\n")


def test_debug_log_traces_a_session(lab):
    env = {"VPNCRYPT_TEST_TIMERS": "rekey_after_time=2,rekey_timeout=1"}
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A", psk=True, keepalive=1, env_a=env)
    a.ping(b)
    time.sleep(3)  # a rekey and some keepalives
    # roaming: B's packets now come from another port
    b.wg("set", b.iface, "listen-port", str(PORT + 1))
    b.ping(a)
    # a UAPI change, then a reload
    a.wg("set", a.iface, "peer", b.public, "persistent-keepalive", "7")
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    time.sleep(0.5)
    log = a.proc.log()
    trace = "\n".join(_trace(log))
    outer_b = f"{b.outer}:{PORT}"
    assert f"sent handshake initiation to {outer_b}" in trace, trace
    assert f"received handshake response from {outer_b}" in trace, trace
    assert re.search(r"peer \S+: handshake completed as initiator \(\d+ so far\); new keypair", trace), trace
    assert len(re.findall(r"handshake completed", trace)) >= 2, trace  # the rekey
    assert f"sent keepalive to {b.outer}:" in trace, trace
    assert f"endpoint changed from {outer_b} to {b.outer}:{PORT + 1}" in trace, trace
    assert "UAPI: set=1 request from uid 0" in trace, trace
    assert "persistent keepalive every 7 s" in log, log
    assert "reloaded" in log
    # peers are named by a short fingerprint; no key material anywhere
    for secret in (a.private, a.peer_conf["psk"]):
        assert secret not in log and keys.decode(secret).hex() not in log
    assert b.public not in log and keys.decode(b.public).hex() not in log
    assert b.public[:8] in trace


def test_debug_trace_is_rate_limited(lab):
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    a.ping(b)
    n = 5000
    _send_from_b(lab, a, [f"for _ in range({n}):", "    s.sendto(b'\\x01\\0\\0\\0' + os.urandom(144), to)"])
    time.sleep(1)
    trace = _trace(a.proc.log())
    floods = [line for line in trace if "received handshake initiation from" in line]
    assert floods, trace[-20:]
    assert len(trace) < 400, len(trace)  # not one line per datagram
    time.sleep(1)  # the bucket refills
    a.wg("show", a.iface)  # a traced UAPI request after the flood
    time.sleep(0.5)  # says how many lines were dropped
    assert any("dropped by the rate limit" in line for line in _trace(a.proc.log()))
    assert a.counters().get("drop_bad_mac1", 0) >= n * 0.9


def test_debug_trace_names_only_well_formed_messages(lab):
    # A message is named by its type only if it has that type's size and
    # zero reserved bytes: a lone b"\x02" is no handshake response, and an
    # initiation-sized datagram with reserved bytes set is no initiation.
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    a.ping(b)
    _send_from_b(
        lab,
        a,
        [
            "s.bind(('0.0.0.0', 40999))",
            "s.sendto(b'\\x02', to)",
            "s.sendto(b'\\x01\\xff\\xff\\xff' + os.urandom(144), to)",
            "s.sendto(b'\\x04\\0\\0\\0' + bytes(12), to)",
            "s.sendto(b'\\x04\\0\\0\\0' + bytes(28), to)",  # keepalive-sized, forged
        ],
    )
    time.sleep(0.5)
    trace = "\n".join(_trace(a.proc.log()))
    sender = f"{b.outer}:40999"
    assert f"received a malformed datagram (1 bytes) from {sender}" in trace, trace
    assert f"received a malformed datagram (148 bytes) from {sender}" in trace, trace
    assert f"received a malformed datagram (16 bytes) from {sender}" in trace, trace
    forged = f"received a keepalive-sized transport message from {sender} (not yet authenticated)"
    assert forged in trace, trace
    assert [
        line
        for line in trace.splitlines()
        if sender in line and "malformed" not in line and forged not in line
    ] == []
    assert "received keepalive" not in trace
    assert a.counters().get("drop_malformed", 0) >= 3


def test_roaming_through_a_handshake_is_traced_from_the_configured_endpoint(lab):
    # A has B at PORT from its file; B's first initiation comes from PORT + 1:
    # the trace names the move from the configured endpoint, not "(none)"
    a, b = pair(lab, "vpncrypt", "wggo", initiator="A")
    b.wg("set", b.iface, "listen-port", str(PORT + 1), "peer", a.public, "endpoint", f"{a.outer}:{PORT}")
    b.ping(a)
    time.sleep(0.3)
    trace = "\n".join(_trace(a.proc.log()))
    assert f"endpoint changed from {b.outer}:{PORT} to {b.outer}:{PORT + 1}" in trace, trace
    # and after `wg set ... endpoint`, a move is traced from the endpoint set
    a.wg("set", a.iface, "peer", b.public, "endpoint", f"{b.outer}:{PORT + 7}")
    b.wg("set", b.iface, "listen-port", str(PORT + 2))
    b.ping(a)
    time.sleep(0.3)
    trace = "\n".join(_trace(a.proc.log()))
    assert f"endpoint changed from {b.outer}:{PORT + 7} to {b.outer}:{PORT + 2}" in trace, trace
