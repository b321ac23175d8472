"""`get=vpncrypt` (what `vpncrypt show` asks) adds the peers' drops up in
the pass over the peers it makes to list them, not in a second walk over
every peer (Device.drops(): 1.2 s of the daemon's CPU at 100,000 peers):
the totals are those of DataPlane.counters(peer_drops=True), and the
session table's per-peer stats are not read again."""

from __future__ import annotations

import pytest

from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.drop_reasons import DropReason
from vpncrypt.daemon.uapi import handle_request
from vpncrypt.protocol import keys
from vpncrypt.transport import status as S
from vpncrypt.transport.native import NativeTable

from tests.daemon.fakes import StubHost
from tests.packets import ipv4

PRIVATE = bytes(range(1, 33))
KEYS = [keys.public_from_private(bytes([k]) * 32) for k in range(2, 6)]


class Host(StubHost):
    """The daemon's counters as Daemon.counters reads them: the DataPlane's
    (on the native session table, or the pure-Python one)."""

    def __init__(self, private_key: bytes, backend: str = "native"):
        from vpncrypt.daemon.data_plane import DataPlane

        super().__init__(private_key)
        if backend != "native":
            self.dataplane = DataPlane(private_key, backend=backend)

    def counters(self, peer_drops=True):
        return self.dataplane.counters(None, peer_drops=peer_drops)


@pytest.fixture
def host():
    h = Host(PRIVATE)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture(params=["native", "pynacl"])
def any_host(request):
    h = Host(PRIVATE, backend=request.param)
    try:
        yield h
    finally:
        h.close()


def _drops(counters: dict) -> dict:
    return {k: v for k, v in counters.items() if k.startswith("drop_") and v}


def _answer_counters(answer: str) -> dict:
    out = {}
    for line in answer.splitlines():
        k, _, v = line.partition("=")
        if k.startswith("vpncrypt_") and not k.startswith("vpncrypt_info_") and k != "vpncrypt_endpoint_name":
            out[k[len("vpncrypt_") :]] = int(v)
    return out


def _device_with_drops(host) -> DeviceControl:
    """Four peers without an endpoint, 10.0.0.2-5; packets routed to the
    first three are dropped as no_endpoint on those peers (3, 5 and 7 of
    them); one to no peer's network and a runt are the table's own drops;
    two queue_full are the protocol core's."""
    control = DeviceControl(host)
    body = "".join(f"public_key={k.hex()}\nallowed_ip=10.0.0.{n}/32\n" for n, k in enumerate(KEYS, 2))
    assert handle_request("set=1", body, control) == b"errno=0\n\n"
    table = host.device.table
    packets = [ipv4("10.0.0.1", f"10.0.0.{n}") for n, count in ((2, 3), (3, 5), (4, 7)) for _ in range(count)]
    res = table.seal([*packets, ipv4("10.0.0.1", "192.0.2.1"), b"\x45" + b"\x00" * 9], 1.0)
    assert res.status == [S.NO_ENDPOINT] * 15 + [S.NO_ROUTE, S.MALFORMED]
    host.device.drop(DropReason.QUEUE_FULL, n=2)
    return control


def test_get_vpncrypt_drops_add_up_to_a_full_walks(any_host):
    host = any_host
    control = _device_with_drops(host)
    counters = _answer_counters(handle_request("get=vpncrypt", "", control).decode())
    full = host.dataplane.counters(None, peer_drops=True).served()
    assert _drops(counters) == _drops(full)
    # the figures themselves (from the packets above)
    assert _drops(counters) == {
        "drop_no_endpoint": 15,
        "drop_no_route": 1,
        "drop_malformed": 1,
        "drop_queue_full": 2,
    }
    # and a snapshot's counters are the full counters, every one of them
    assert control.snapshot().counters == {**full, "open_fds": control.snapshot().counters["open_fds"]}


def test_get_vpncrypt_reads_each_peer_once(host, monkeypatch):
    """The answer comes from one pass: NativeTable.stats (a peer's full
    stats, what the second walk read for each peer) is not called."""
    control = _device_with_drops(host)
    assert isinstance(host.device.table, NativeTable)
    calls = []
    stats = NativeTable.stats
    monkeypatch.setattr(NativeTable, "stats", lambda self, *a: calls.append(a) or stats(self, *a))
    answer = handle_request("get=vpncrypt", "", control).decode()
    assert "vpncrypt_drop_no_endpoint=15\n" in answer
    assert calls == []


def test_peers_removed_before_the_get_are_not_counted(any_host):
    """A removed peer's drops go with it, in both counts alike."""
    host = any_host
    control = _device_with_drops(host)
    assert handle_request("set=1", f"public_key={KEYS[1].hex()}\nremove=true\n", control) == b"errno=0\n\n"
    counters = _answer_counters(handle_request("get=vpncrypt", "", control).decode())
    assert counters["drop_no_endpoint"] == 3 + 7
    assert _drops(counters) == _drops(host.dataplane.counters(None, peer_drops=True).served())


def test_source_addresses_forgotten_is_a_counter(host, monkeypatch):
    """The native table's count of sources the kernel refused is served as
    source_addresses_forgotten (get=vpncrypt, so `vpncrypt show`)."""
    control = DeviceControl(host)

    def forgotten():
        answer = handle_request("get=vpncrypt", "", control).decode()
        return _answer_counters(answer)["source_addresses_forgotten"]

    assert forgotten() == 0
    monkeypatch.setattr(NativeTable, "sources_forgotten", property(lambda self: 3))
    assert forgotten() == 3


def test_source_addresses_forgotten_is_a_metric(host, monkeypatch):
    """... and scraped as vpncrypt_source_addresses_forgotten_total, with the
    drops of the scrape's own pass over the peers alike."""
    import asyncio

    from vpncrypt.daemon.metrics import read_state, render

    _device_with_drops(host)
    host.interface, host.uapi = "wg0", None
    host.endpoint_name_rows = lambda: []
    monkeypatch.setattr(NativeTable, "sources_forgotten", property(lambda self: 4))
    body = render(asyncio.run(read_state(host)))[0].decode()
    assert 'vpncrypt_source_addresses_forgotten_total{interface="wg0"} 4.0\n' in body
    assert 'vpncrypt_drops_total{interface="wg0",reason="no_endpoint"} 15.0\n' in body
