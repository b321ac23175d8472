"""`vpncrypt loopback-bench` measures the data plane the daemon runs: its
devices and engines come from the daemon's own construction
(vpncrypt.daemon.data_plane.DataPlane), so the two cannot drift apart (the
handshake threads, the event handling, the backend)."""

import asyncio

from vpncrypt.bench import loopback
from vpncrypt.daemon import data_plane
from vpncrypt.protocol import keys


def _cfg(crypto):
    a, b = keys.generate_private(), keys.generate_private()
    return {
        "crypto": crypto,
        "batch": 64,
        "sizes": [1472],
        "threads": 1,
        "devices": [
            {
                "private_key": keys.encode(a),
                "address": "10.0.0.1",
                "peers": [
                    {"public_key": keys.encode(keys.public_from_private(b)), "allowed_ips": ["10.0.0.2/32"]}
                ],
            }
        ],
    }


def _built(crypto, monkeypatch):
    """(the engine the bench starts, the DataPlanes that started one, the
    device, the sink, the socket)."""
    started = []
    real = data_plane.DataPlane.start_engine

    def spy(self, udps, inners, **kw):
        started.append(self)
        return real(self, udps, inners, **kw)

    monkeypatch.setattr(data_plane.DataPlane, "start_engine", spy)

    async def build():
        cfg = _cfg(crypto)
        socks = loopback._open_sockets(cfg)
        sink = loopback._Sink([2])
        devices, engines = loopback._start_planes(cfg, socks, [1], sink, asyncio.get_running_loop())
        try:
            return engines[0], started, devices[0], sink, socks[0]
        finally:
            for e in engines:
                e.stop()
            for s in socks:
                s.sock.close()

    return asyncio.run(build())


def test_the_bench_engine_is_the_daemons_construction(monkeypatch):
    engine, started, device, sink, udp = _built("native", monkeypatch)
    assert len(started) == 1
    plane = started[0]
    assert plane.engine is engine and plane.device is device
    assert engine.device is device and engine.inner is sink and engine.udp is udp
    # the daemon's settings: its event handling (the metrics' handshake
    # stats, the trace) and its handshake threads (2 on a machine with a
    # second core, else none: data_plane.handshake_threads)
    assert engine.on_events == plane.on_events
    assert engine._hs_threads == data_plane.handshake_threads()
    assert device.backend == "native"


def test_the_pynacl_row_is_the_same_construction_with_the_naive_backend(monkeypatch):
    engine, started, device, _sink, _udp = _built("pynacl", monkeypatch)
    assert started[0].device is device and device.backend == "pynacl"
    assert engine.on_events == started[0].on_events
