"""The daemon's metrics scraped by a real Prometheus server (Debian's
package): a vpncrypt daemon in namespace A carries traffic with a
wireguard-go peer in namespace B; Prometheus runs in A (the metrics listen on
A's loopback, over TLS with basic auth from an exporter web config, the
peers' endpoints switched on) and its HTTP API is compared with `wg show IFACE dump`.  Also:
promtool on a scrape, the OpenMetrics form, no private or preshared key in
any scrape, `vpncrypt show --json` against both daemons, and the start-up
errors (a remote address without the flag, a port in use)."""

import base64
import json
import os
import re
import subprocess
import time

import pytest

from tests.installed import script
from tests.interop.lab import Lab, need, pair
from tests.metrics.promserver import Prometheus, http_get
from tests.metrics.webtls import PASSWORD, web_config

METRICS = "127.0.0.1:9586"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "config", "grafana-vpncrypt.json")


@pytest.fixture(scope="module")
def tunnel():
    assert os.geteuid() == 0, "the metrics tests run as root"
    need("wireguard-go")
    lab = Lab()
    try:
        # the environment form of the --metrics options (what the unit's drop-in
        # sets): TLS and basic auth from a web config, the peers' endpoints served
        web, ca = web_config(lab)
        env = {
            "VPNCRYPT_METRICS": METRICS,
            "VPNCRYPT_METRICS_WEB_CONFIG": web,
            "VPNCRYPT_METRICS_ENDPOINTS": "1",
        }
        a, b = pair(lab, "vpncrypt", "wggo", initiator="A", psk=True, env_a=env)
        a.ping(b, count=4)
        # a packet into the interface for no peer: one drop (no_route) to count
        a.run("ping", "-c", "1", "-W", "1", "10.200.0.99", check=False)
        lab.scrape_opts = ("--cafile", ca, "--user", "scraper", "--password", PASSWORD)
        prom = Prometheus(lab, "A", METRICS, auth=(ca, "scraper", PASSWORD))
        yield lab, a, b, prom
    finally:
        lab.close()


def scrape(lab, accept=None):
    ctype, body = http_get(lab, "A", f"https://{METRICS}/metrics", accept, opts=lab.scrape_opts)
    return ctype, body.decode()


def settled(node, prom, names, tries=8):
    """`wg show dump` and Prometheus's newest samples of `names` from a
    scrape made after it, taken while the counters stood still (a dump
    before and after the scrape agree)."""
    for _ in range(tries):
        before = node.dump()
        t0 = time.time()
        deadline = time.monotonic() + 15
        while True:
            got = {n: prom.latest(n) for n in names}
            if all(v and min(ts for ts, _ in v.values()) > t0 + 0.05 for v in got.values()):
                break
            assert time.monotonic() < deadline, f"no scrape after {t0}: {got}"
            time.sleep(0.5)
        if node.dump() == before:
            return before, got
    raise AssertionError("the counters never stood still for a scrape")


def one(samples):
    assert len(samples) == 1, samples
    ((labels, (_, value)),) = samples.items()
    return dict(labels), value


def test_prometheus_scrapes_what_wg_show_says(tunnel):
    lab, a, b, prom = tunnel
    names = [
        "wireguard_sent_bytes_total",
        "wireguard_received_bytes_total",
        "wireguard_latest_handshake_seconds",
        "vpncrypt_peer_info",
    ]
    dump, got = settled(a, prom, names)
    ((pk, peer),) = dump.items()
    assert pk == b.public
    assert peer["rx"] > 0 and peer["tx"] > 0 and peer["handshake"] > 0
    for name, field in (
        ("wireguard_sent_bytes_total", "tx"),
        ("wireguard_received_bytes_total", "rx"),
        ("wireguard_latest_handshake_seconds", "handshake"),
    ):
        labels, value = one(got[name])
        assert labels == {
            "interface": a.iface,
            "public_key": b.public,
            "allowed_ips": peer["allowed_ips"],
            "job": "vpncrypt",
            "instance": METRICS,
        }, labels
        assert value == peer[field], (name, value, peer)
    labels, value = one(got["vpncrypt_peer_info"])
    assert value == 1
    assert labels["endpoint"] == peer["endpoint"] and labels["allowed_ips"] == peer["allowed_ips"]
    # the other side of the same tunnel agrees (what A sent, B received)
    other = b.dump()[a.public]
    assert other["rx"] == peer["tx"] and other["tx"] == peer["rx"]
    # A initiated: one round trip measured; packets both ways; a handshake completed
    labels, count = one(prom.latest("vpncrypt_peer_handshake_rtt_seconds_count"))
    assert count >= 1
    _, inf = one(prom.latest('vpncrypt_peer_handshake_rtt_seconds_bucket{le="+Inf"}'))
    assert inf == count
    _, done = one(prom.latest("vpncrypt_handshakes_completed_total"))
    assert done >= 1
    _, n = one(prom.latest("vpncrypt_peers"))
    assert n == 1
    _, port = one(prom.latest("vpncrypt_listen_port"))
    assert port == 51820
    for name in ("vpncrypt_peer_sent_packets_total", "vpncrypt_peer_received_packets_total"):
        _, v = one(prom.latest(name))
        assert v >= 4, (name, v)  # 4 pings each way, and the handshake


def test_promtool_is_clean_and_openmetrics_parses(tunnel):
    lab = tunnel[0]
    ctype, text = scrape(lab)
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        f"promtool check metrics:\n{r.stdout}{r.stderr}"
    )
    ctype, om = scrape(lab, OPENMETRICS)
    assert ctype.startswith("application/openmetrics-text"), ctype
    assert om.endswith("# EOF\n")
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(om)}
    assert families["wireguard_sent_bytes"].type == "counter"
    assert families["wireguard_latest_handshake_seconds"].type == "gauge"
    assert families["vpncrypt_peer_handshake_rtt_seconds"].type == "histogram"
    assert families["vpncrypt_crypto_kernels"].type == "info"


def test_drops_by_reason_match_the_uapi(tunnel):
    """The scrape adds the peers' drops up in parts; `get=vpncrypt` reads
    them at once.  (The tunnel is quiet: no drop happens in between.)"""
    lab, a, _, _ = tunnel
    from prometheus_client.parser import text_string_to_metric_families

    for _ in range(5):
        before = {k: v for k, v in a.counters().items() if k.startswith("drop_")}
        _, text = scrape(lab)
        after = {k: v for k, v in a.counters().items() if k.startswith("drop_")}
        if before == after:
            break
    (fam,) = [f for f in text_string_to_metric_families(text) if f.name == "vpncrypt_drops"]
    scraped = {"drop_" + s.labels["reason"]: int(s.value) for s in fam.samples}
    assert {k: v for k, v in scraped.items() if v} == {k: v for k, v in after.items() if v}
    assert scraped["drop_no_route"] >= 1


def test_no_key_material_in_any_scrape(tunnel):
    lab, a, b, _ = tunnel
    psk = a.peer_conf["psk"]
    secrets = [a.private, b.private, psk]
    forms = set()
    for s in secrets:
        raw = base64.b64decode(s)
        forms |= {
            s,
            raw.hex(),
            raw.hex().upper(),
            s.rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        }
    for accept in (None, OPENMETRICS):
        _, text = scrape(lab, accept)
        assert b.public in text  # the public key is there, as a label
        for form in forms:
            assert form not in text, "key material in a scrape"
    out = subprocess.run([script("vpncrypt"), "show", "--json"], capture_output=True, text=True, timeout=30)
    for form in forms:
        assert form not in out.stdout


def test_show_json_against_vpncrypt_and_wireguard_go(tunnel):
    lab, a, b, _ = tunnel
    for node, other, ours in ((a, b, True), (b, a, False)):
        dump_before = node.dump()
        r = subprocess.run(
            [script("vpncrypt"), "show", node.iface, "--json"], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0, r.stderr
        (dev,) = json.loads(r.stdout)["interfaces"]
        assert dev["name"] == node.iface and dev["public_key"] == node.public
        assert dev["implementation"] == ("vpncrypt" if ours else "other")
        assert dev["listen_port"] == 51820
        (peer,) = dev["peers"]
        d = dump_before[other.public]
        assert peer["public_key"] == other.public
        assert peer["preshared_key"] == "(hidden)"
        assert peer["endpoint"] == d["endpoint"]
        assert ",".join(peer["allowed_ips"]) == d["allowed_ips"]
        assert int(peer["latest_handshake"]) == d["handshake"]
        # counters may have moved by a keepalive between the two reads
        assert peer["received_bytes"] >= d["rx"] and peer["sent_bytes"] >= d["tx"]
        if ours:
            assert dev["counters"]["handshakes_completed"] >= 1
            assert isinstance(dev["drops"], dict)
            assert dev["crypto_kernels"]["chacha"]
        else:
            assert dev["drops"] is None and dev["counters"] is None
    # all interfaces: both daemons' (and possibly others on the machine)
    r = subprocess.run([script("vpncrypt"), "show", "--json"], capture_output=True, text=True, timeout=30)
    names = {d["name"] for d in json.loads(r.stdout)["interfaces"]}
    assert {a.iface, b.iface} <= names


def _start_fails(lab, side, *args, env=None):
    iface = f"vcm{lab.id}"
    r = lab.run_in(
        side,
        script("vpncrypt"),
        "up",
        iface,
        *args,
        check=False,
        timeout=30,
        env={**os.environ, **(env or {})},
    )
    assert not lab.link_exists(side, iface), "a failed start left its interface"
    return r


def test_remote_bind_refused_without_the_flag(tunnel):
    lab = tunnel[0]
    for args, env in (
        (("--metrics", "0.0.0.0:9587"), None),
        (("--metrics", "[::]:9587"), None),
        ((), {"VPNCRYPT_METRICS": "192.168.241.1:9587"}),
    ):
        r = _start_fails(lab, "B", *args, env=env)
        assert r.returncode == 1, r
        lines = r.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and "not a loopback address" in lines[0] and "--metrics-allow-remote" in lines[0]
        ), r.stderr


def test_metrics_port_in_use_fails_the_start(tunnel):
    lab = tunnel[0]
    # Prometheus holds 127.0.0.1:9090 in namespace A
    r = _start_fails(lab, "A", "--metrics", "127.0.0.1:9090")
    assert r.returncode == 1
    assert "--metrics 127.0.0.1:9090: cannot listen: Address already in use" in r.stderr.splitlines(), (
        r.stderr
    )


def test_grafana_dashboard_names_only_served_metrics(tunnel):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    used = {m for e in exprs for m in re.findall(r"\b((?:vpncrypt|wireguard)_[a-z0-9_]+)", e)}
    _, text = scrape(tunnel[0])
    served = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    assert used and used <= served, f"not served: {sorted(used - served)}"
