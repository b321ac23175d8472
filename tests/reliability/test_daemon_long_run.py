"""Long run of two real `vpncrypt up` daemons in namespaces (the loopback-worker
form is test_long_run.py): a checked UDP stream A -> B and pings, a rekey every
2 s (test-only timers), and the UAPI asked for `get=1` and `get=vpncrypt` ten
times a second, for 12 s (CI) or VPNCRYPT_SOAK_SECONDS.  Every second both
daemons' resident memory, open file descriptors, asyncio tasks and pending
housekeeping timers are sampled: after warm-up none of them may grow (memory
within 10%; open files equal before and after the run), and nothing delivered is
corrupted or duplicated."""

import json
import time

from tests.interop.lab import PORT
from tests.reliability.netutil import SOAK, UapiProbe, fd_count, rss_kb, save_report
from tests.reliability.traffic import start_recv, start_send

SECONDS = SOAK or 12.0
TIMERS = "rekey_after_time=2,reject_after_time=5,keepalive_timeout=1,rekey_timeout=0.5"
RATE = 2000  # datagrams/s of 1000 bytes: the Python sender's comfortable pace


def _flat(samples, key):
    warm = samples[len(samples) // 5 :]  # the first fifth is warm-up
    return warm[0][key], max(s[key] for s in warm), warm[-1][key]


def test_daemons_stay_flat(lab, tmp_path):
    env = {"VPNCRYPT_TEST_TIMERS": TIMERS}
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "vpncrypt")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}]), env=env)
    b.start(b.conf([{"public": a.public, "inner": a.inner, "endpoint": f"{a.outer}:{PORT}"}]), env=env)
    a.ping(b)
    nodes = (("A", a), ("B", b))
    for _side, n in nodes:
        # the event loop opens one descriptor for good with the first UAPI
        # client (uvloop's reserve for running out of descriptors): not a leak
        n.counters()
    time.sleep(0.2)
    fds_before = {side: fd_count(n.proc.popen.pid) for side, n in nodes}
    tasks_before = {side: n.counters()["asyncio_tasks"] for side, n in nodes}
    recv = start_recv(lab, "B", 9000, SECONDS + 3)
    send = start_send(lab, "A", b.inner, 9000, RATE, SECONDS, 1000)
    probes = [UapiProbe(n, req, every=0.1) for n in (a, b) for req in ("get=1\n\n", "get=vpncrypt\n\n")]
    for p in probes:
        p.start()
    samples = {"A": [], "B": []}
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        for side, node in (("A", a), ("B", b)):
            pid = node.proc.popen.pid
            c = node.counters()
            samples[side].append(
                {
                    "t": time.monotonic(),
                    "rss_kb": rss_kb(pid),
                    "fds": fd_count(pid),
                    "tasks": c.get("asyncio_tasks"),
                    "timers": c.get("pending_timers"),
                    "handshakes": c["handshakes_completed"],
                }
            )
        time.sleep(1.0)
    probe_report = [p.finish() for p in probes]
    out, _ = send.communicate(timeout=60)
    sent = json.loads(out.strip().splitlines()[-1])
    out, _ = recv.communicate(timeout=60)
    got = json.loads(out.strip().splitlines()[-1])
    time.sleep(0.2)
    fds_after = {side: fd_count(n.proc.popen.pid) for side, n in nodes}
    tasks_after = {side: n.counters()["asyncio_tasks"] for side, n in nodes}
    report = {
        "seconds": SECONDS,
        "stream_sent": sent,
        "stream_received": got,
        "uapi": probe_report,
        "fds_before": fds_before,
        "fds_after": fds_after,
        "tasks_before": tasks_before,
        "tasks_after": tasks_after,
        "samples": samples,
    }
    save_report(tmp_path, "daemon_long_run.json", report)

    assert got["corrupted"] == 0 and got["duplicated"] == 0, report
    assert got["unique"] >= 0.95 * sent["sent"], report
    assert all(not r["errors"] for r in probe_report), report
    for side, ss in samples.items():
        assert ss[-1]["handshakes"] - ss[0]["handshakes"] >= SECONDS / 2 / 2, (side, report)
        first, top, last = _flat(ss, "rss_kb")
        assert last <= 1.10 * first, (side, "memory grew", first, last)
        first, top, last = _flat(ss, "timers")
        assert top == first == last, (side, "pending timers grew", first, top, last)
        # open files and asyncio tasks: the same before and after; while the probes
        # run, their UAPI connections (a socket and a task each) come and go
        assert fds_after[side] == fds_before[side], (side, "open files", fds_before, fds_after)
        assert tasks_after[side] == tasks_before[side], (side, "tasks", tasks_before, tasks_after)
        assert max(x["fds"] for x in ss) <= fds_before[side] + len(probes), (side, report)
        assert max(x["tasks"] for x in ss) <= tasks_before[side] + len(probes), (side, report)
    a.ping(b)
