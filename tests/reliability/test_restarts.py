"""Restarts and faults with real `vpncrypt up` daemons in namespaces
(tests/interop/lab.py):

* kill -9 of daemon B in the middle of a checked UDP stream A -> B, then a
  restart with the same config.  (1) B sends the first packet after its
  restart: its handshake completes within REKEY_TIMEOUT + jitter (defaults:
  5.333 s) of that packet.  (2) After a second kill -9 and restart only the
  survivor A talks (on its old session, which B no longer has): A's timers
  start a new handshake and the stream resumes within KEEPALIVE_TIMEOUT +
  REKEY_TIMEOUT + jitter (A runs short test timers: 2 + 1 + 0.333 s).
  Nothing delivered is corrupted or duplicated.
* The UDP port taken by another process at start: exit 1, and the message
  names the port.
* EAGAIN on send and a full receive buffer: A's socket gets a tiny SO_SNDBUF
  (through pidfd_getfd) behind a slow tbf qdisc, B's a tiny SO_RCVBUF; a
  stream at full speed: A's engine_tx_dropped/tx_send_errors and B's
  drop_socket_overflow (equal to the kernel's count) grow, both survive, and
  the tunnel works again once the buffers are restored.

VPNCRYPT_SOAK_SECONDS=N: N kill/restart cycles instead of 2 (each checked).
"""

import json
import os
import signal
import socket
import sys
import time

from tests.interop.lab import PORT
from tests.reliability.netutil import SOAK, save_report, steal_udp_socket, udp_socket_drops
from tests.reliability.traffic import command, start_recv, start_send

A_TIMERS = {"keepalive_timeout": 2.0, "rekey_timeout": 1.0}
REKEY_TIMEOUT, JITTER = 5.0, 0.333  # B's (default) timers


def _both_with_endpoints(lab, env_a=None):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "vpncrypt")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}]), env=env_a)
    b.start(b.conf([{"public": a.public, "inner": a.inner, "endpoint": f"{a.outer}:{PORT}"}]))
    return a, b


def _restart(lab, node):
    node.proc = lab.spawn_vpncrypt(node.side, node.iface, node.conf_path)
    return node.proc


def _kill9(node):
    node.proc.popen.send_signal(signal.SIGKILL)
    node.proc.popen.wait(10)


def test_kill9_and_restart(lab, tmp_path):
    timers = ",".join(f"{k}={v}" for k, v in A_TIMERS.items())
    a, b = _both_with_endpoints(lab, env_a={"VPNCRYPT_TEST_TIMERS": timers})
    a.ping(b)
    cycles = max(2, int(SOAK / 15)) if SOAK else 2
    seconds = 4 + cycles * 8
    recv = start_recv(lab, "B", 9000, seconds + 2)
    send = start_send(lab, "A", b.inner, 9000, 500, seconds, 1000)
    time.sleep(2.0)
    cycles_report = []
    for cycle in range(cycles):
        b_sends_first = cycle % 2 == 0
        t_kill = time.monotonic()
        _kill9(b)  # in the middle of the stream
        assert not lab.link_exists("B", b.iface)
        time.sleep(0.5)
        _restart(lab, b)
        t_ready = time.monotonic()
        hs = None
        if b_sends_first:
            t_first = time.monotonic()
            pinger = lab.popen_in("B", "ping", "-c", "1", "-W", "8", a.inner)
            while time.monotonic() - t_first < 10:
                if b.counters()["handshakes_completed"] > 0:
                    hs = time.monotonic() - t_first
                    break
                time.sleep(0.01)
            pinger.communicate(timeout=15)
        else:
            t_first = t_ready
            while time.monotonic() - t_first < 10:
                if b.counters()["handshakes_completed"] > 0:
                    hs = time.monotonic() - t_first
                    break
                time.sleep(0.01)
        cycles_report.append(
            {
                "b_sends_first": b_sends_first,
                "kill_to_ready_s": t_ready - t_kill,
                "handshake_after_first_packet_s": hs,
                "t_ready": t_ready,
            }
        )
        time.sleep(max(0.0, 7.5 - (time.monotonic() - t_kill)))
    out, err = send.communicate(timeout=seconds + 30)
    sent = json.loads(out.strip().splitlines()[-1])
    out, err = recv.communicate(timeout=30)
    got = json.loads(out.strip().splitlines()[-1])
    # the stream's outage around each restart, from its gaps
    for c in cycles_report:
        gap = [g for g in got["gaps"] if g[0] <= c["t_ready"] <= g[1] + 0.2]
        c["stream_resumed_after_ready_s"] = (gap[0][1] - c["t_ready"]) if gap else 0.0
    report = {
        "cycles": cycles_report,
        "stream_sent": sent,
        "stream_received": got,
        "bound_b_first_s": REKEY_TIMEOUT + JITTER,
        "bound_survivor_s": A_TIMERS["keepalive_timeout"] + A_TIMERS["rekey_timeout"] + JITTER,
    }
    save_report(tmp_path, "restarts.json", report)
    assert got["corrupted"] == 0 and got["duplicated"] == 0, report
    assert got["unique"] > 0.5 * sent["offered"], report
    for c in cycles_report:
        assert c["handshake_after_first_packet_s"] is not None, report
        bound = report["bound_b_first_s"] if c["b_sends_first"] else report["bound_survivor_s"]
        assert c["handshake_after_first_packet_s"] <= bound + 0.5, report
        assert c["stream_resumed_after_ready_s"] <= bound + 1.0, report
    a.ping(b)
    b.ping(a)


def test_port_taken_is_a_clear_error(lab):
    a = lab.node("A", "vpncrypt")
    holder = lab.popen_in(
        "A",
        sys.executable,
        "-c",
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"s.bind(('0.0.0.0', {PORT})); print('bound', flush=True)\n"
        "time.sleep(120)",
    )
    assert holder.stdout.readline().strip() == "bound"
    try:
        proc = lab.spawn_vpncrypt("A", a.iface, a.write_conf(a.conf([])), wait_ready=False)
        assert proc.popen.wait(20) == 1
        log = proc.log()
        assert f"UDP port {PORT}" in log and "Address already in use" in log, log
        assert not lab.link_exists("A", a.iface) and not os.path.exists(a.sock)
    finally:
        holder.kill()
        holder.wait(5)


def test_send_eagain_and_full_receive_buffer(lab, tmp_path):
    a, b = _both_with_endpoints(lab)
    a.ping(b)
    sa = steal_udp_socket(a.proc.popen.pid, PORT)
    sb = steal_udp_socket(b.proc.popen.pid, PORT)
    try:
        lab.run_in(
            "A",
            "tc",
            "qdisc",
            "add",
            "dev",
            lab.veth["A"],
            "root",
            "tbf",
            "rate",
            "50mbit",
            "burst",
            "20kb",
            "latency",
            "50ms",
        )
        sa.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the minimum: 4608 bytes
        sb.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the minimum: 2304 bytes
        ca0, cb0 = a.counters(), b.counters()
        recv = start_recv(lab, "B", 9000, 4)
        r = lab.run_in("A", *command("send", b.inner, 9000, 0, SOAK or 2, 1200), timeout=SOAK + 60)
        sent = json.loads(r.stdout.strip().splitlines()[-1])
        got = json.loads(recv.communicate(timeout=SOAK + 30)[0].strip().splitlines()[-1])
        ca, cb = a.counters(), b.counters()
        kernel_b = udp_socket_drops(lab, "B", PORT)
        report = {
            "stream_sent": sent,
            "stream_received": got,
            "a": {k: ca.get(k, 0) - ca0.get(k, 0) for k in ca},
            "b": {k: cb.get(k, 0) - cb0.get(k, 0) for k in cb},
            "b_kernel_socket_drops": kernel_b,
        }
        save_report(tmp_path, "buffers.json", report)
        assert a.proc.popen.poll() is None and b.proc.popen.poll() is None, report
        assert report["a"]["engine_tx_dropped"] > 0 and report["a"]["engine_tx_send_errors"] > 0
        assert cb["drop_socket_overflow"] > 0 and cb["drop_socket_overflow"] == kernel_b, report
        assert got["corrupted"] == 0 and got["duplicated"] == 0 and got["unique"] > 0, report
    finally:
        lab.run_in("A", "tc", "qdisc", "del", "dev", lab.veth["A"], "root", check=False)
        for s, opt in ((sa, socket.SO_SNDBUF), (sb, socket.SO_RCVBUF)):
            s.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
            s.close()
    a.ping(b)
    b.ping(a)
