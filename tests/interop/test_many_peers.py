"""Ten thousand peers: the config comes up, `wg show` lists every peer, and
a handshake with one of them (wireguard-go, the 7,778th) works.  The start-up
time, resident memory and `wg show` time are written to the report
(VPNCRYPT_RELIABILITY_REPORT / --basetemp) and quoted in BENCHMARKS.md."""

import json
import os
import time

from tests.interop.lab import PORT
from vpncrypt.protocol import keys

N = 10_000
K = 7_777


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_ten_thousand_peers(lab, tmp_path):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    lines = [
        "[Interface]",
        f"PrivateKey = {a.private}",
        f"ListenPort = {PORT}",
        f"Address = {a.inner}/24",
        "",
    ]
    publics = []
    for i in range(N):
        if i == K:
            pub, allowed = b.public, f"{b.inner}/32"
        else:
            pub = keys.pubkey(keys.genkey())
            allowed = f"10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32"
        publics.append(pub)
        lines += ["[Peer]", f"PublicKey = {pub}", f"AllowedIPs = {allowed}"]
        if i == K:
            lines.append(f"Endpoint = {b.outer}:{PORT}")
        lines.append("")
    path = a.write_conf("\n".join(lines))
    rss0 = None
    t0 = time.monotonic()
    a.proc = lab.spawn_vpncrypt("A", a.iface, path, log_level="warning")
    startup = time.monotonic() - t0
    rss = _rss_kb(a.proc.popen.pid)
    b.start(b.conf([{"public": a.public, "inner": a.inner}], listen=True))

    t0 = time.monotonic()
    listed = a.wg("show", a.iface, "peers").stdout.split()
    show_s = time.monotonic() - t0
    assert len(listed) == N and set(listed) == set(publics)
    t0 = time.monotonic()
    dump = a.wg("show", a.iface, "dump").stdout.strip().splitlines()
    dump_s = time.monotonic() - t0
    assert len(dump) == N + 1

    a.ping(b)  # a handshake with the 7,778th peer, and traffic
    b.ping(a)
    peer = a.dump()[b.public]
    assert peer["handshake"] > 0 and peer["endpoint"] == f"{b.outer}:{PORT}"
    # routes for the AllowedIPs outside the Address prefix: one each
    routes = lab.run_in("A", "ip", "-4", "route", "show", "dev", a.iface).stdout.splitlines()
    assert len(routes) == N - 1 + 1, len(routes)  # N - 1 peers' /32s and the Address /24

    # a second, empty daemon for the per-peer memory: the difference over N
    e = lab.node("A", "vpncrypt")
    e.iface = "vce" + lab.id
    empty = e.write_conf(f"[Interface]\nPrivateKey = {e.private}\n", name="empty.conf")
    proc = lab.spawn_vpncrypt("A", e.iface, empty, log_level="warning")
    rss0 = _rss_kb(proc.popen.pid)
    report = {
        "peers": N,
        "startup_s": round(startup, 2),
        "rss_kb": rss,
        "rss_empty_kb": rss0,
        "rss_per_peer_bytes": round((rss - rss0) * 1024 / N),
        "wg_show_peers_s": round(show_s, 2),
        "wg_show_dump_s": round(dump_s, 2),
    }
    out = os.environ.get("VPNCRYPT_RELIABILITY_REPORT") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "many_peers.json"), "w") as f:
        json.dump(report, f, indent=2)
    print("many peers:", json.dumps(report))
