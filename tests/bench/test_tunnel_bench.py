"""`vpncrypt bench tunnel` in its short mode (2 s per test): every pairing
carries TCP and UDP traffic and byte-checked streams, the JSON has all of its
fields (peer versions, CPU per Gbit), two wireguard-go builds run side by side,
the plot is written, and nothing of the run (namespace, veth, interface, UAPI
socket, process) is left afterwards, also when it is interrupted.  Needs root,
iproute2, wireguard-tools, wireguard-go, iperf3 and ping, and Debian 13's
wireguard-go (tests/tools/fetch-wireguard-go.sh fetches it); a missing tool is
a failure.  No speed is asserted."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.bench.requires import root_and_tools

TOP_FIELDS = {
    "command",
    "date",
    "cpu",
    "cores",
    "kernel",
    "versions",
    "settings",
    "run_id",
    "namespaces",
    "veth",
    "pairings",
    "ratio_vpncrypt_over_wireguard_go",
    "ratios_by_wireguard_go",
    "latency_ratios_by_wireguard_go",
    "ok",
}
PAIRING_FIELDS = {"pairing", "label", "a", "b", "ok", "error", "tests", "checks", "latency", "wireguard_go"}
TCP_FIELDS = {
    "proto",
    "gbit_s",
    "sent_gbit_s",
    "retransmits",
    "seconds",
    "cpu_pct",
    "cpu_s_per_gbit",
    "link_rx_gbit_s",
    "link_tx_dropped",
}
UDP_FIELDS = {
    "proto",
    "gbit_s",
    "sent_gbit_s",
    "loss_pct",
    "packets",
    "lost_packets",
    "seconds",
    "cpu_pct",
    "cpu_s_per_gbit",
    "link_rx_gbit_s",
    "link_tx_dropped",
}
CHECK_FIELDS = {"proto", "expected", "checked", "datagrams", "corrupt", "duplicates", "lost", "ok"}
FETCH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "fetch-wireguard-go.sh"
)


def current_wireguard_go():
    """Debian 13's wireguard-go (cached outside the repo after the first fetch)."""
    r = subprocess.run(["bash", FETCH], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"tests/tools/fetch-wireguard-go.sh failed: {r.stderr[-2000:]}"
    return r.stdout.strip()


PID_LINE = re.compile(r"pid (\d+) (\S+) in (\S+): (.*)$")
RUN_LINE = re.compile(r"run ([0-9a-f]+): namespaces (\S+) (\S+), veth (\S+)/(\S+)")


@pytest.fixture(autouse=True)
def _needs():
    root_and_tools("tunnel", ("ip", "wg", "wireguard-go", "iperf3", "ping", "ss"))


def _cmd(*args):
    return [sys.executable, "-m", "vpncrypt", "bench", "tunnel", *args]


def _started(stderr: str):
    """{pid: command} of every process the run reported starting (-v)."""
    return {int(m.group(1)): m.group(4) for m in map(PID_LINE.search, stderr.splitlines()) if m}


def _alive_as(pid: int, command: str) -> bool:
    """Is pid still the process that was started (not a reused pid)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        return False
    exe = os.path.basename(command.split()[0]).encode()
    return bool(argv) and os.path.basename(argv[0]) == exe


def _table(json_text: str) -> subprocess.CompletedProcess:
    """The table a person reads, printed from the run's JSON."""
    text = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; from vpncrypt.bench import tunnel; tunnel._print_table(json.load(sys.stdin))",
        ],
        input=json_text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0, text.stderr
    return text


def _assert_nothing_left(run_id: str, started: dict):
    deadline = time.monotonic() + 10  # a namespace goes when its last process does
    while True:
        left = []
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        left += [f"namespace {line.split()[0]}" for line in netns.splitlines() if run_id in line]
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if run_id in line]
        if os.path.isdir("/var/run/wireguard"):
            left += [f"socket {s}" for s in os.listdir("/var/run/wireguard") if run_id in s]
        left += [f"process {pid} ({cmd})" for pid, cmd in started.items() if _alive_as(pid, cmd)]
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if run_id in cmdline:
                    left.append(f"process {pid} ({cmdline.strip()})")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"left behind by run {run_id}: {left}"


def test_short_run_all_pairings_carry_traffic_and_leave_nothing(tmp_path):
    old = shutil.which("wireguard-go")
    new = current_wireguard_go()
    png = tmp_path / "tunnel.png"
    proc = subprocess.run(
        _cmd(
            # 1 s a stream: 6 pairings x (TCP + UDP) were 24 s of the run's 36 at
            # 2 s; what is judged (every pairing carries both, every checked byte
            # right, the measured fields filled, nothing left) is the same
            "--duration",
            "1",
            "--json",
            "-v",
            "--check-mib",
            "2",
            "--wireguard-go",
            old,
            "--wireguard-go",
            new,
            "--plot",
            str(png),
        ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    res = json.loads(proc.stdout)
    assert TOP_FIELDS <= res.keys()
    assert res["ok"] is True
    assert res["settings"]["duration"] == 1 and res["settings"]["mtu"] == 1420
    # each pairing with wireguard-go once per build, in the order given
    assert [p["pairing"] for p in res["pairings"]] == ["vc-vc", "vc-wg", "vc-wg", "wg-wg", "wg-wg", "veth"]
    builds = res["versions"]["wireguard-go-builds"]
    assert [b["path"] for b in builds] == [os.path.abspath(old), new]
    assert builds[0]["version"] == "wireguard-go v0.0.20220316"  # Debian 12's
    assert builds[1]["version"] == "wireguard-go v0.0.20230223"  # Debian 13's
    assert res["versions"]["wireguard-go"] == builds[0]["version"]
    for p, build in zip(
        [p for p in res["pairings"] if "wireguard-go" in (p["a"], p["b"])], [builds[0], builds[1]] * 2
    ):
        assert p["wireguard_go"]["path"] == build["path"]
        assert build["version"].split()[-1] in p["label"]
    assert set(res["ratios_by_wireguard_go"]) == {b["path"] for b in builds}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    for p in res["pairings"]:
        checks = {c["proto"]: c for c in p["checks"]}
        assert set(checks) == {"tcp", "udp"}, p
        for c in checks.values():  # every byte that arrived was right
            assert CHECK_FIELDS <= c.keys() and c["ok"], (p["label"], c)
            assert c["corrupt"] == 0 and c["duplicates"] == 0
        assert checks["tcp"]["expected"] == 2 << 20
        assert checks["tcp"]["checked"] == 2 << 20 and checks["tcp"]["lost"] == 0
        # 2 MiB as 1200-byte datagrams: 1747 of them, most of which arrive
        assert checks["udp"]["expected"] == 1747
        assert checks["udp"]["checked"] == 1200 * checks["udp"]["datagrams"] > 1200 * 1747 // 2
        assert PAIRING_FIELDS <= p.keys()
        assert p["ok"] and p["error"] is None, p
        tests = {t["proto"]: t for t in p["tests"]}
        assert set(tests) == {"tcp", "udp"}, p
        assert TCP_FIELDS <= tests["tcp"].keys() and UDP_FIELDS <= tests["udp"].keys()
        for t in tests.values():
            assert t["gbit_s"] > 0, (p["pairing"], t)
        assert tests["tcp"]["retransmits"] is not None
        assert 0 <= tests["udp"]["loss_pct"] <= 100
        for t in tests.values():  # the inner interfaces' counters were read
            assert t["link_rx_gbit_s"] > 0 and t["link_tx_dropped"] >= 0, (p["pairing"], t)
        if p["pairing"] == "veth":
            assert tests["tcp"]["cpu_pct"] == {}
        else:
            assert {p["a"], p["b"]} <= {"vpncrypt", "wireguard-go"}
            assert set(p["pids"]) == {"A", "B"}
            for t in tests.values():  # the daemons worked: CPU was measured
                assert set(t["cpu_pct"]) == {"A", "B"}
                assert all(v is not None and v >= 0 for v in t["cpu_pct"].values())
                per = t["cpu_s_per_gbit"]
                assert set(per) == {"A", "B", "total"}
                assert per["total"] == pytest.approx(
                    (t["cpu_pct"]["A"] + t["cpu_pct"]["B"]) / 100 / t["gbit_s"]
                )
    ratio = res["ratio_vpncrypt_over_wireguard_go"]
    assert ratio["tcp"] > 0 and ratio["udp"] > 0
    # the same result as the table a person reads: one byte-check line per stream
    text = _table(proc.stdout)
    assert text.stdout.count("byte check ok: ") == 2 * len(res["pairings"]), text.stdout
    assert "TCP   byte check ok: 2097152 bytes checked, 0 corrupt" in text.stdout
    started = _started(proc.stderr)
    daemon_pids = {pid for p in res["pairings"] for pid in p.get("pids", {}).values()}
    assert daemon_pids and daemon_pids <= set(started)
    assert any("wireguard-go" in c for c in started.values())
    assert any("vpncrypt up" in c for c in started.values())
    _assert_nothing_left(res["run_id"], started)


def _read_until(proc: subprocess.Popen, marker: str, timeout: float):
    """The bench's stderr lines up to the first with `marker`, and its run line's match."""
    lines: list[str] = []
    run = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line, "the bench ended early:\n" + "".join(lines)
        lines.append(line)
        run = run or RUN_LINE.search(line)
        if marker in line:
            assert run, lines
            return lines, run
    raise AssertionError(f"the bench did not reach {marker!r}:\n" + "".join(lines))


@contextlib.contextmanager
def _nobody_can_read_the_code():
    """o+x on the directories above the checkout and the venv (CI clones into a
    mktemp -d folder, 0700), as tests/proxy does, and their modes back after."""
    from tests.proxy.lab import open_ancestors

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    opened = open_ancestors(repo, sys.prefix)
    try:
        yield
    finally:
        for d, mode in reversed(opened):
            os.chmod(d, mode)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_still_cleans_up(sig):
    proc = subprocess.Popen(
        _cmd("--duration", "30", "--json", "-v", "--pairings", "vc-wg,vc-vc"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines, m = _read_until(proc, "TCP for", 60)  # up to the first iperf3 through the tunnel
        run_id = m.group(1)
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert m.group(2) in ns and m.group(3) in ns
        time.sleep(0.5)
        started = _started("".join(lines))
        assert any("wireguard-go" in c for c in started.values())
        assert all(_alive_as(pid, c) for pid, c in started.items()), started
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert out == ""  # no results from an interrupted run
    _assert_nothing_left(run_id, started)


def test_bad_wireguard_go_is_a_clear_error(tmp_path):
    fake = tmp_path / "not-wireguard-go"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    for path, msg in (
        (str(tmp_path / "missing"), "not an executable file"),
        (str(fake), "does not name wireguard-go"),
    ):
        proc = subprocess.run(
            _cmd("--pairings", "wg-wg", "--wireguard-go", path), capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 1 and msg in proc.stderr, proc.stderr
        assert proc.stdout == ""


def test_not_root_is_a_clear_error(monkeypatch, capsys):
    from vpncrypt import cli
    from vpncrypt.bench import tunnel

    monkeypatch.setattr(tunnel.os, "geteuid", lambda: 1000)
    assert cli.main(["bench", "tunnel", "--duration", "1"]) == 1
    err = capsys.readouterr().err
    assert "needs root" in err


LATENCY_FIELDS = {
    "idle",
    "loaded",
    "tcp_gbit_s_with_pings",
    "tcp_gbit_s_without_pings",
    "tcp_change_pct",
    "queues",
}
RTT_FIELDS = {"sent", "received", "lost", "p50_ms", "p99_ms", "max_ms"}


def test_latency_run_reports_rtt_idle_and_under_tcp_and_the_queues(tmp_path):
    """--latency: a ping every 50 ms for the 2 s, idle and under one TCP
    flow, for the tunnel and the plain veth; the table, the JSON and the
    plot carry it, and the versions are printed."""
    png = tmp_path / "latency.png"
    args = "--duration 2 --json -v --pairings vc-vc,veth --no-udp --check-mib 0 --latency".split()
    proc = subprocess.run(_cmd(*args, "--plot", str(png)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    res = json.loads(proc.stdout)
    assert res["settings"]["latency"] is True and res["settings"]["ping_interval"] == 0.05
    assert [p["pairing"] for p in res["pairings"]] == ["vc-vc", "veth"]
    for p in res["pairings"]:
        lat = p["latency"]
        assert LATENCY_FIELDS <= lat.keys(), lat
        tcp = next(t for t in p["tests"] if t["proto"] == "tcp")
        assert lat["tcp_gbit_s_without_pings"] == tcp["gbit_s"]
        assert lat["tcp_gbit_s_with_pings"] > 0
        # 2 s / 50 ms pings idle; 1.5 s of them under the flow (after its first 0.5 s)
        assert lat["idle"]["sent"] == 40 and lat["loaded"]["sent"] == 30
        for state in ("idle", "loaded"):
            r = lat[state]
            assert RTT_FIELDS <= r.keys()
            assert 0 < r["received"] <= r["sent"] and r["lost"] == r["sent"] - r["received"]
            assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], (p["pairing"], state, r)
        q = lat["queues"]
        assert set(q) == {"A", "B", "tcp_in_flight_bytes"}
        # (a sample may be 0: on a loaded machine iperf3 can have nothing unacknowledged at that moment)
        assert q["tcp_in_flight_bytes"]["samples"] >= 1 and q["tcp_in_flight_bytes"]["max"] >= 0, q
        if p["pairing"] == "veth":  # the control is the veth itself
            assert lat["loaded_outside_tunnel"] is None
        else:
            c = lat["loaded_outside_tunnel"]
            assert c["sent"] == 30 and 0 < c["received"] <= 30 and c["p50_ms"] <= c["p99_ms"], c
        for side in "AB":
            assert q[side]["samples"] >= 1, q
            assert q[side]["tun_qdisc_backlog_bytes_max"] is not None
        if p["pairing"] == "veth":  # no daemon, no UDP socket of one
            assert q["A"]["udp_rcvbuf"] is None and q["B"]["udp_rcvbuf"] is None
        else:
            assert q["B"]["udp_rcvbuf"] > 0 and q["B"]["udp_recv_queue_bytes_max"] is not None
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = _table(proc.stdout)
    assert text.stdout.count("ping  RTT idle p50 ") == 2, text.stdout
    assert text.stdout.count("queue TCP in flight mean ") == 2, text.stdout
    assert text.stdout.count(", outside the tunnel meanwhile p50 ") == 1, text.stdout
    assert f"vpncrypt {res['versions']['vpncrypt']} (Python " in text.stdout
    _assert_nothing_left(res["run_id"], _started(proc.stderr))


PING_OUTPUT = """PING 10.77.0.2 (10.77.0.2) 56(84) bytes of data.
64 bytes from 10.77.0.2: icmp_seq=1 ttl=64 time=0.512 ms
64 bytes from 10.77.0.2: icmp_seq=2 ttl=64 time=4.20 ms
64 bytes from 10.77.0.2: icmp_seq=2 ttl=64 time=4.90 ms (DUP!)
64 bytes from 10.77.0.2: icmp_seq=4 ttl=64 time=1.00 ms

--- 10.77.0.2 ping statistics ---
4 packets transmitted, 3 received, +1 duplicates, 25% packet loss, time 150ms
rtt min/avg/max/mdev = 0.512/1.904/4.200/1.700 ms
"""


def test_ping_parsing_and_percentiles():
    from vpncrypt.bench import tunnel

    # a duplicate reply counts once (the first); seq 3 was lost
    assert tunnel._ping_rtts(PING_OUTPUT) == {1: 0.512, 2: 4.2, 4: 1.0}
    assert tunnel._ping_rtts(PING_OUTPUT.encode()) == {1: 0.512, 2: 4.2, 4: 1.0}
    st = tunnel._rtt_stats(PING_OUTPUT, 4)
    assert (st["received"], st["lost"], st["max_ms"]) == (3, 1, 4.2)
    assert st["p50_ms"] == 1.0
    # linear between the closest ranks: of 1..100, p50 = 50.5, p99 = 99.01
    values = list(range(1, 101))
    assert tunnel.percentile(values, 50) == pytest.approx(50.5)
    assert tunnel.percentile(values, 99) == pytest.approx(99.01)
    assert tunnel.percentile([7.0], 99) == 7.0
    assert tunnel.percentile([], 50) is None


def test_tcp_in_flight_is_unacked_segments_times_mss_and_0_when_ss_prints_none():
    from types import SimpleNamespace

    from vpncrypt.bench import tunnel

    def lab(stdout):
        return SimpleNamespace(run_in=lambda *a, **kw: SimpleNamespace(stdout=stdout))

    head = "ESTAB 0 0 10.0.0.1:40000 10.0.0.2:5201\n"
    busy = "\t bbr wscale:7,7 rto:204 rtt:2.5/0.3 mss:1368 pmtu:1420 cwnd:400 unacked:300 rcv_space:14600\n"
    idle = "\t bbr wscale:7,7 rto:204 rtt:2.5/0.3 mss:1368 pmtu:1420 cwnd:400 rcv_space:14600\n"
    assert tunnel._tcp_in_flight(lab(head + busy + head + idle), "10.0.0.2") == 300 * 1368
    assert tunnel._tcp_in_flight(lab(head + idle), "10.0.0.2") == 0  # ss prints no "unacked:0"
    assert tunnel._tcp_in_flight(lab(""), "10.0.0.2") is None  # no such flow


PROXY_ROWS = {"proxy": {("tcp", "socks5"), ("tcp", "forward"), ("udp", "socks5")}}
PROXY_ROWS["proxy-wan"] = {("tcp", "socks5"), ("tcp", "forward")}


def test_short_proxy_pairings_with_the_tun_pairing_and_nothing_left():
    """vc-vc, proxy and proxy-wan in one short run (1 s per test, 100
    connections): the proxy runs as nobody (uid 65534) with an empty
    capability bounding set, TCP through SOCKS5 and the forward and UDP
    through ASSOCIATE carry traffic, every connection echoes, the ratios to
    the TUN pairing and the memory per connection are there, and nothing is
    left.  No speed is asserted."""
    args = "--pairings vc-vc,proxy,proxy-wan --duration 1 --check-mib 0 --proxy-connections 100"
    with _nobody_can_read_the_code():
        proc = subprocess.run(
            _cmd(*args.split(), "--json", "-v"), capture_output=True, text=True, timeout=300
        )
    assert proc.returncode == 0, proc.stderr[-5000:] + proc.stdout[-2000:]
    res = json.loads(proc.stdout)
    assert res["ok"] is True and TOP_FIELDS | {"proxy_ratios"} <= res.keys()
    assert [p["pairing"] for p in res["pairings"]] == ["vc-vc", "proxy", "proxy-wan"]
    for p in res["pairings"][1:]:
        assert PAIRING_FIELDS <= p.keys() and p["ok"] and p["error"] is None, p
        # the proxy and its host-side helper, all nobody (65534); no capability in our user
        # namespace; the proxy itself in a user namespace of its own
        ident = p["proxy_identity"]
        assert len(ident) >= 2 and all(i["uid"] == i["euid"] == 65534 for i in ident), ident
        assert not ident[0]["host_user_namespace"], ident
        for i in ident:
            if i["host_user_namespace"]:
                assert i["cap_eff"] == i["cap_bnd"] == "0000000000000000", ident
        rows = {(t["proto"], t["via"]): t for t in p["tests"]}
        assert set(rows) == PROXY_ROWS[p["pairing"]], p["tests"]
        for t in rows.values():
            assert t["gbit_s"] > 0 and set(t["cpu_pct"]) == {"A", "B"}, t
            assert t["retransmits"] is not None and t["retransmits"] >= 0, t  # read in the proxy's namespace
        info = rows[("tcp", "socks5")]["tcp_info"]
        assert info["window_scaling"] and info["sack"], info
        udp = rows.get(("udp", "socks5"))
        if udp:
            assert udp["packets"] > 0 and 0 <= udp["loss_pct"] <= 100 and udp["datagram_size"] == 1200
    wan = res["pairings"][2]["wan"]
    assert (wan["one_way_delay_ms"], wan["loss_each_way"]) == (25.0, 0.001)
    assert wan["relay"]["forwarded"] > 1000 and wan["relay"]["dropped"] >= 0, wan  # the path went through it
    c = res["pairings"][1]["connections"]
    assert (c["count"], c["open"], c["errors"]) == (100, 100, []), c
    assert c["rss_before_kib"] > 0 and c["rss_with_kib"] > 0 and c["kib_per_connection"] is not None
    r = res["proxy_ratios"]
    assert r["window_64k_mbit_s_at_50ms"] == pytest.approx(65536 * 8 / 0.05 / 1e6)
    for k in ("tcp_socks5_over_tun", "tcp_forward_over_tun", "udp_socks5_over_tun"):
        assert r[k] > 0, r
    for k in ("wan_tcp_socks5_over_64k_window", "wan_tcp_forward_over_64k_window"):
        assert r[k] > 0, r
    text = _table(proc.stdout).stdout
    assert "100 of 100 concurrent SOCKS5 connections open" in text, text
    assert "proxy over vpncrypt<->vpncrypt (TUN), same run: TCP SOCKS5 " in text, text
    assert "over what a 64 KiB window allows (10.5 Mbit/s)" in text, text
    assert f"the relay forwarded {wan['relay']['forwarded']} datagrams and dropped " in text, text
    started = _started(proc.stderr)
    assert any("vpncrypt proxy" in c or " proxy -c " in c for c in started.values()), started
    assert any("delayrelay" in c for c in started.values()), started
    _assert_nothing_left(res["run_id"], started)


def test_proxy_counters_parse_snmp_and_netstat():
    from vpncrypt.bench.proxypair import parse_snmp

    text = (
        "Tcp: RtoAlgorithm RtoMin RetransSegs\nTcp: 1 200 17\n"
        "Udp: InDatagrams\nUdp: 5\n"
        "TcpExt: SyncookiesSent TCPSackRecovery\nTcpExt: 0 3\n"
    )
    assert parse_snmp(text) == {
        "Tcp:RtoAlgorithm": 1,
        "Tcp:RtoMin": 200,
        "Tcp:RetransSegs": 17,
        "Udp:InDatagrams": 5,
        "TcpExt:SyncookiesSent": 0,
        "TcpExt:TCPSackRecovery": 3,
    }


def test_bench_killed_takes_its_proxy_with_it():
    """SIGKILL of the bench during a proxy pairing: every process it started
    goes with it, the proxy too (setpriv's uid change clears the parent-death
    signal the lab sets, so the proxy needs its own).  The namespaces stay
    (nobody is left to remove them): this test removes them."""
    with _nobody_can_read_the_code():
        proc = subprocess.Popen(
            _cmd("--pairings", "proxy", "--duration", "30", "--json", "-v"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        run_id, proxies = None, {}
        try:
            lines, m = _read_until(proc, "TCP through SOCKS5 for", 90)
            run_id = m.group(1)
            time.sleep(0.5)
            started = _started("".join(lines))
            proxies = {pid: c for pid, c in started.items() if "setpriv" in c}
            # (setpriv execs the proxy: this interpreter then)
            assert len(proxies) == 1 and all(_alive_as(pid, sys.executable) for pid in proxies), started
            proc.kill()
            proc.communicate(timeout=30)

            def left():
                return {
                    p: c for p, c in started.items() if _alive_as(p, sys.executable if p in proxies else c)
                }

            deadline = time.monotonic() + 10
            while left() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not left(), left()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            for pid in proxies:
                if _alive_as(pid, sys.executable):
                    os.kill(pid, signal.SIGKILL)
            if run_id:
                _remove_run(run_id)
    _assert_nothing_left(run_id, started)


def _remove_run(run_id: str) -> None:
    """What a bench killed with SIGKILL leaves: its namespaces, UAPI sockets and directory."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in [line.split()[0] for line in netns.splitlines() if run_id in line]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for s in os.listdir("/var/run/wireguard") if os.path.isdir("/var/run/wireguard") else []:
        if run_id in s:
            os.unlink(os.path.join("/var/run/wireguard", s))
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        if d.startswith(f"vpncrypt-bench-{run_id}-"):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
