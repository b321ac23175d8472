"""CounterSnapshot: a field per source, served under the names the UAPI's
get=vpncrypt, `vpncrypt show` and docs/metrics.md have always used, and
read back from those names by the UAPI's client."""

from vpncrypt.daemon.counter_snapshot import CounterSnapshot, served_drops
from vpncrypt.drop_reasons import DropReason


def _every_source() -> CounterSnapshot:
    return CounterSnapshot(
        drops={DropReason.NO_ROUTE: 3, DropReason.AQM: 0},
        engine={"rx_batches": 4, "icmp_errors_sent": 5},
        tun_rx={"superpackets": 6},
        tun_tx={"coalesced": 7},
        queues=[(8, 9), (10, 11)],
        fair_queue_packets=12,
        device={"handshakes_sent": 13, "open_fds": 14},
    )


def test_served_names():
    assert _every_source().served() == {
        "drop_no_route": 3,
        "drop_aqm": 0,
        "engine_rx_batches": 4,
        "engine_icmp_errors_sent": 5,
        "tun_rx_superpackets": 6,
        "tun_tx_coalesced": 7,
        "queues": 2,
        "queue_0_rx_packets": 8,
        "queue_0_tx_packets": 9,
        "queue_1_rx_packets": 10,
        "queue_1_tx_packets": 11,
        "fair_queue_packets": 12,
        "handshakes_sent": 13,
        "open_fds": 14,
    }
    assert all(type(name) is str for name in _every_source().served())


def test_one_queue_and_no_fair_queue_serve_no_such_lines():
    assert CounterSnapshot(queues=[], device={"open_fds": 3}).served() == {"open_fds": 3}


def test_the_served_drops_read_back():
    drops, rest = served_drops(_every_source().served())
    assert drops == {"no_route": 3, "aqm": 0}
    assert "drop_no_route" not in rest and rest["engine_rx_batches"] == 4 and rest["queues"] == 2
