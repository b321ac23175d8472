"""The daemon's word for a routing loop the session table cut: the listen
port reaches the table (DataPlane.set_listen_port, as the daemon calls it on
every bind), and the 1 s housekeeping tick's report_routing_loops() logs
"Avoiding routing loop to ENDPOINT" with the count, at most once each 10 s;
the drops show as routing_loop."""

from __future__ import annotations

import logging

import pytest

from tests.packets import udp
from tests.transport.helpers import KEY_AB, KEY_BA
from vpncrypt.protocol import keys
from vpncrypt.transport import Session

PRIVATE = bytes(range(1, 33))
PEER = keys.public_from_private(bytes([7]) * 32)
OWN = udp("192.0.2.77", "192.0.2.1", 51820, 51820, b"\x04" + bytes(47))


@pytest.mark.parametrize("backend", ["native", "pynacl"])
def test_loop_cut_logged_once_per_ten_seconds(backend, caplog):
    from vpncrypt.daemon.data_plane import DataPlane

    dp = DataPlane(PRIVATE, backend=backend)
    dev = dp.device
    peer = dev.add_peer(PEER, allowed_ips=["192.0.2.0/24"], endpoint=("192.0.2.1", 51820))
    assert dev.table.reserve_index(1, peer.pid)
    dev.table.install(peer.pid, Session(1, 9, KEY_AB, KEY_BA, True), 0.0)
    dp.set_listen_port(51820)
    clock = [100.0]
    dp._loop_log.clock = lambda: clock[0]
    caplog.set_level(logging.WARNING, logger="vpncrypt.daemon")

    dp.report_routing_loops()  # nothing cut yet: nothing said
    assert dev.table.seal([OWN] * 3, 0.0).datagrams == []
    dp.report_routing_loops()
    dp.report_routing_loops()  # nothing new since
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("Avoiding routing loop to 192.0.2.1:51820 (peer ")
    assert ": 3 of its own datagrams came back in on the tunnel" in lines[0]

    dev.table.seal([OWN] * 2, 0.0)
    clock[0] += 9.9  # within 10 s of the last line: left out
    dp.report_routing_loops()
    assert len(caplog.records) == 1
    dev.table.seal([OWN], 0.0)
    clock[0] += 0.2
    dp.report_routing_loops()
    assert len(caplog.records) == 2
    assert ": 1 of its own datagrams" in caplog.records[1].getMessage()
    assert "(1 similar message suppressed)" in caplog.records[1].getMessage()
    assert dev.drops()["routing_loop"] == 6
