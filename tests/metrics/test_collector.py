"""The metrics' parts without a daemon: the --metrics address rule, the
handshake statistics read from the Device's events, and what a scrape of a
made-up state looks like (promtool and the OpenMetrics parser on it)."""

import subprocess

import pytest

from tests.metrics.promserver import need_prometheus
from vpncrypt.daemon.counter_snapshot import CounterSnapshot
from vpncrypt.daemon.peer_metrics import HandshakeStats, MetricRow
from vpncrypt.daemon.histogram import Histogram
from vpncrypt.daemon.metrics import MetricsAddressError, parse_address, render
from vpncrypt.drop_reasons import DropReason
from vpncrypt.protocol import events as E


@pytest.mark.parametrize(
    "text,want",
    [
        ("127.0.0.1:9586", ("127.0.0.1", 9586)),
        ("127.1.2.3:1", ("127.1.2.3", 1)),  # 127.0.0.0/8 is loopback (RFC 1122)
        ("[::1]:65535", ("::1", 65535)),
        ("localhost:9586", ("127.0.0.1", 9586)),
    ],
)
def test_loopback_addresses_are_taken(text, want):
    assert parse_address(text) == want


@pytest.mark.parametrize(
    "text", ["0.0.0.0:9586", "[::]:9586", "192.168.1.5:9586", "[fe80::1]:9586", "[::ffff:10.0.0.1]:9586"]
)
def test_other_addresses_need_allow_remote(text):
    with pytest.raises(MetricsAddressError, match="--metrics-allow-remote"):
        parse_address(text)
    host, port = parse_address(text, allow_remote=True)
    assert port == 9586


@pytest.mark.parametrize(
    "text",
    [
        "9586",
        ":9586",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:+80",
        "example.com:80",
        "[::1:9586",
    ],
)
def test_malformed_addresses_are_refused(text):
    with pytest.raises(MetricsAddressError):
        parse_address(text, allow_remote=True)


class _Peer:
    def __init__(self, key):
        self.public_key = key


def test_handshake_round_trips_failures_keepalives_and_load():
    s = HandshakeStats()
    p, q = _Peer(b"p" * 32), _Peer(b"q" * 32)
    s.events([E.HandshakeInitiated(p, 1)], 100.0)
    s.events([E.HandshakeInitiated(p, 2)], 105.0)  # a retry: timed from it
    s.events([E.HandshakeCompleted(p, True)], 105.03)
    s.events([E.HandshakeCompleted(q, False)], 106.0)  # as responder: no round trip
    s.events([E.HandshakeInitiated(q, 1), E.HandshakeGaveUp(q, 20)], 107.0)
    s.events([E.KeepaliveSent(p, False), E.KeepaliveSent(p, True), E.LoadChanged(True)], 108.0)
    h = s.rtt[p.public_key].as_dict()
    assert h["count"] == 1 and abs(h["sum"] - 0.03) < 1e-9
    assert h["buckets"]["0.01"] == 0 and h["buckets"]["0.05"] == 1 and h["buckets"]["+Inf"] == 1
    assert q.public_key not in s.rtt
    assert s.failed == 1
    assert s.keepalives == {p.public_key: 2} and s.keepalives_total == 2
    assert s.under_load is True
    s.events([E.HandshakeCompleted(q, True)], 110.0)  # no initiation pending: nothing
    assert q.public_key not in s.rtt
    s.forget(p.public_key)
    assert p.public_key not in s.rtt and p.public_key not in s.keepalives


def _hist(bounds, values):
    h = Histogram(bounds)
    for v in values:
        h.observe(v)
    return h


def _state():
    rows = [
        MetricRow(
            bytes(range(32)),
            "192.0.2.1:51820",
            ["10.0.0.2/32", "fd00::2/128"],
            1700000000.5,
            1000,
            2000,
            10,
            20,
            3,
            4,
            _hist((0.001, 0.05), [0.02, 0.02]),
        ),
        MetricRow(bytes(32), None, [], 0.0, 0, 0, 0, 0, 0, 0, None),
    ]
    return {
        "interface": "wg0",
        "listen_port": 51820,
        "public_key": None,
        "counters": CounterSnapshot(
            drops={DropReason.REPLAY: 3, DropReason.COOKIE_SENT: 2},
            tun_rx={"reads": 7},
            tun_tx={"writes": 8},
            device={"handshakes_sent": 5, "handshakes_completed": 4, "open_fds": 12, "under_load": 1},
        ),
        "kernels": {"chacha": "generic", "poly1305": "generic"},
        "uapi": {
            "get": {"buckets": {"0.001": 1, "+Inf": 1}, "sum": 0.0005, "count": 1},
            "set": {"buckets": {"0.001": 0, "+Inf": 0}, "sum": 0.0, "count": 0},
            "other": {"buckets": {"0.001": 0, "+Inf": 0}, "sum": 0.0, "count": 0},
        },
        "batch_sizes": {"rx": ([1, 1, 1, 0, 0, 0, 1, 1, 0], 135), "tx": ([0] * 9, 0)},
        "peers": rows,
    }


def test_a_scrape_passes_promtool_and_the_openmetrics_parser():
    need_prometheus()
    body, ctype = render(_state())
    assert ctype.startswith("text/plain")
    text = body.decode()
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr
    assert (
        'wireguard_sent_bytes_total{allowed_ips="10.0.0.2/32,fd00::2/128",interface="wg0",'
        'public_key="AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="} 2000.0'
    ) in text
    assert 'wireguard_latest_handshake_seconds{allowed_ips="",interface="wg0"' in text
    assert 'vpncrypt_drops_total{interface="wg0",reason="replay"} 3.0' in text
    assert 'vpncrypt_tun_offload_total{counter="reads",direction="rx",interface="wg0"} 7.0' in text
    assert 'vpncrypt_tun_offload_total{counter="writes",direction="tx",interface="wg0"} 8.0' in text
    assert 'reason="cookie_sent"' not in text  # a reply, not a drop: its own counter
    assert 'vpncrypt_cookie_replies_sent_total{interface="wg0"} 2.0' in text
    assert 'operation="other"' not in text  # none seen: not listed
    body, ctype = render(_state(), "application/openmetrics-text; version=1.0.0")
    assert ctype.startswith("application/openmetrics-text")
    om = body.decode()
    assert om.endswith("# EOF\n") and om.count("# EOF") == 1
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(om)}
    rtt = fams["vpncrypt_peer_handshake_rtt_seconds"]
    assert rtt.type == "histogram" and len({s.labels["public_key"] for s in rtt.samples}) == 1
    assert fams["vpncrypt_under_load"].samples[0].value == 1


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        "application/openmetrics-text; version=0.0.1",
    ],
)
def test_the_fast_writer_writes_what_prometheus_client_writes(accept):
    """render() writes the per-peer lines itself and tells the OpenMetrics
    encoder that no name needs escaping; the bytes must be the library's."""
    state = _state()
    state["interface"] = 'w"g\\0\n'  # every character a label value escapes
    state["peers"].append(
        MetricRow(
            b"\xff" * 32,
            "[fd00::1]:51820",
            ["0.0.0.0/0", "::/0"],
            1796133539.25,
            123456789012,
            1,
            2**40,
            7,
            0,
            0,
            _hist((0.001, 5.0), [0.0005, 2.0, 2.5, 9.0]),
        )
    )
    fast, ctype = render(state, accept)
    slow, ctype_slow = render(state, accept, fast=False)
    assert ctype == ctype_slow
    assert fast.decode() == slow.decode()


def test_batch_sizes_in_power_of_two_buckets_and_as_a_histogram():
    """Batches of 1, 2, 3, 64, 65, 128 and 129 packets: one each at most 1, 2,
    4 and 64, two at most 128 (the daemon's batch), one above; served as
    vpncrypt_dataplane_batch_size."""
    from vpncrypt.dataplane.engine import EngineCounters

    c = EngineCounters()
    for n in (1, 2, 3, 64, 65, 128, 129):
        c.rx_batch(n)
    c.tx_batch(8)
    sizes = c.batch_sizes()
    assert sizes["rx"] == ([1, 1, 1, 0, 0, 0, 1, 2, 1], 392)
    assert sizes["tx"] == ([0, 0, 0, 1, 0, 0, 0, 0, 0], 8)
    assert c.rx_batches == 7 and c.tx_batches == 1
    total = EngineCounters()
    total.add(c)
    total.add(c)
    assert total.batch_sizes()["rx"] == ([2, 2, 2, 0, 0, 0, 2, 4, 2], 784)
    text = render(_state())[0].decode()
    for le, n in (("1", 1), ("2", 2), ("4", 3), ("32", 3), ("64", 4), ("128", 5), ("+Inf", 5)):
        assert (
            f'vpncrypt_dataplane_batch_size_bucket{{direction="rx",interface="wg0",le="{le}"}} {n}.0'
        ) in text, (le, text[text.find("batch_size") :][:800])
    assert 'vpncrypt_dataplane_batch_size_sum{direction="rx",interface="wg0"} 135.0' in text
