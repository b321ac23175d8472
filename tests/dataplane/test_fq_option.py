"""`vpncrypt up --fair-queue` (and VPNCRYPT_FAIR_QUEUE): off by default, a
bad value is one clear error, and the setting reaches, layer by layer
(cli -> Daemon -> DataPlane -> Engine -> Device.batch_path -> Batch), every
queue's send round (its fair queue) and every receiving socket (CoDel
wanted: vc_udp_rx.aqm = 2, on after the first receive round); the daemon's
counters then carry the drops, 0 or more, and leave them out without it.

The data plane runs on descriptors made here: a loopback UDP socket per
queue and a datagram socketpair per TUN queue (a TunBatch without a vnet
header), on an event loop that is not run."""

import argparse
import asyncio
import socket
import time

import pytest

from vpncrypt.cli import up
from vpncrypt.daemon.data_plane import DataPlane

QUEUES = 3
FQ_COUNTERS = {
    "drop_aqm",
    "drop_fq_codel",
    "drop_fq_overflow",
    "drop_fq_too_big",
    "drop_fq_nomem",
    "fair_queue_packets",
}


def parse(*argv):
    p = argparse.ArgumentParser()
    up.add_up_arguments(p)
    return p.parse_args(["wg0", *argv])


def test_the_setting_is_off_by_default(monkeypatch):
    monkeypatch.delenv("VPNCRYPT_FAIR_QUEUE", raising=False)
    assert parse().fair_queue is None
    assert up.fair_queue_settings(None) is False
    d = up.build_daemon("wg0", None)
    assert d is not None and d.fair_queue is False


@pytest.mark.parametrize(
    "env, flag, expected",
    [
        ("1", None, True),
        ("0", None, False),
        ("", None, False),
        ("yes", None, True),
        ("0", True, True),  # the command line wins
        ("1", False, False),
        ("", True, True),
    ],
)
def test_the_flag_and_the_environment(monkeypatch, env, flag, expected):
    monkeypatch.setenv("VPNCRYPT_FAIR_QUEUE", env)
    assert up.fair_queue_settings(flag) is expected
    d = up.build_daemon("wg0", None, fair_queue=flag)
    assert d is not None and d.fair_queue is expected


def test_the_command_line_flag_reaches_the_daemon(monkeypatch):
    monkeypatch.delenv("VPNCRYPT_FAIR_QUEUE", raising=False)
    assert parse("--fair-queue").fair_queue is True
    assert parse("--no-fair-queue").fair_queue is False
    args = parse("--fair-queue")
    d = up.build_daemon(args.interface, None, fair_queue=args.fair_queue)
    assert d is not None and d.fair_queue is True


@pytest.mark.parametrize("bad", ["2", "maybe", "-1"])
def test_a_bad_environment_value_is_a_clear_error(monkeypatch, capsys, bad):
    monkeypatch.setenv("VPNCRYPT_FAIR_QUEUE", bad)
    with pytest.raises(ValueError, match="VPNCRYPT_FAIR_QUEUE"):
        up.fair_queue_settings(None)
    assert up.build_daemon("wg0", None) is None
    err = capsys.readouterr().err
    assert "VPNCRYPT_FAIR_QUEUE" in err and repr(bad) in err and "Traceback" not in err


class Plane:
    """A started DataPlane of QUEUES queues on descriptors made here."""

    def __init__(self, fair_queue, threads=1):
        self.loop = asyncio.new_event_loop()
        self.socks, self.pairs = [], []
        self.dp = DataPlane(None, fair_queue=fair_queue, threads=threads)
        for _ in range(QUEUES):
            self.socks.append(self.new_socket())
            near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            near.setblocking(False)
            self.pairs.append((near, far))
        self.udps = self.dp.udp_sockets(self.socks)
        self.dp.start(
            self.udps, [n.fileno() for n, _f in self.pairs], loop=self.loop, mtu=1420, on_fatal=None
        )
        self.workers = self.dp.engine.queue_workers()

    def new_socket(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        return s

    def replace_sockets(self):
        """What a ListenPort change does: a new socket per queue."""
        old = self.socks
        self.socks = [self.new_socket() for _ in old]
        self.udps = self.dp.udp_sockets(self.socks)
        self.dp.replace_udp(self.udps)
        for s in old:
            s.close()
        self.workers = self.dp.engine.queue_workers()

    def receive_rounds(self):
        """A datagram into every queue's socket, and a receive round each."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            for s in self.socks:
                peer.sendto(b"\x04\0\0\0" + bytes(60), s.getsockname())
        for (rx, _tx), udp in zip(self.workers, self.udps):
            for _ in range(100):  # loopback: there by the first round, in practice
                if rx.path.receive(udp, rx.inner, time.monotonic()):
                    break
                time.sleep(0.01)

    def close(self):
        self.dp.stop()
        for s in self.socks:
            s.close()
        for near, far in self.pairs:
            near.close()
            far.close()
        self.loop.close()


@pytest.fixture
def plane(request):
    p = Plane(*request.param) if isinstance(request.param, tuple) else Plane(request.param)
    yield p
    p.close()


@pytest.mark.parametrize("plane", [True], indirect=True)
def test_with_the_option_every_queue_gets_it_and_the_counters_say_so(plane):
    assert len(plane.workers) == QUEUES
    for rx, tx in plane.workers:
        assert tx.path.batch._round.fq_on == 1  # each send round: its own fair queue
    plane.receive_rounds()
    for rx, _tx in plane.workers:
        assert rx.udp.state.aqm == 1  # each receiving socket: CoDel set up
    c = plane.dp.counters(plane.udps[0]).served()
    assert FQ_COUNTERS <= set(c), c
    assert {k: c[k] for k in FQ_COUNTERS} == dict.fromkeys(FQ_COUNTERS, 0)


@pytest.mark.parametrize("plane", [False], indirect=True)
def test_without_it_no_queue_no_codel_no_counters(plane):
    for rx, tx in plane.workers:
        assert tx.path.batch._round.fq_on == 0
    plane.receive_rounds()
    for rx, _tx in plane.workers:
        assert rx.udp.state.aqm == 0
        assert rx.udp.sock.getsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35)) == 0
    c = plane.dp.counters(plane.udps[0]).served()
    assert not FQ_COUNTERS & set(c), c


@pytest.mark.parametrize("plane", [(True, 1), (True, 2)], indirect=True, ids=["loop", "threads"])
def test_the_receive_drops_stay_counted_across_a_listen_port_change(plane):
    """drop_aqm sums every receiving socket's count; a ListenPort change
    (new sockets, and with threads new receive states) keeps what the old
    ones counted: a counter never goes back."""
    for k, (rx, _tx) in enumerate(plane.workers):
        rx.udp.state.aqm_dropped = 5 + k  # as if CoDel had dropped that many
    assert plane.dp.counters(plane.udps[0]).served()["drop_aqm"] == 5 + 6 + 7
    plane.replace_sockets()
    assert all(rx.udp.aqm_dropped == 0 for rx, _tx in plane.workers)  # new sockets, new states
    assert plane.dp.counters(plane.udps[0]).served()["drop_aqm"] == 18
    plane.workers[1][0].udp.state.aqm_dropped = 2
    assert plane.dp.counters(plane.udps[0]).served()["drop_aqm"] == 20


@pytest.mark.parametrize("name", ["VPNCRYPT_FAIR_QUEUE", "VPNCRYPT_METRICS_ALLOW_REMOTE"])
def test_the_switch_variables_take_one_set_of_words(monkeypatch, name):
    """Both on/off variables read 1/0, yes/no, true/false, on/off alike, and
    a bad value's error names every accepted word."""
    from vpncrypt.cli.up import env_switch

    for word, on in [("1", True), ("YES", True), ("true", True), ("On", True), ("0", False), ("no", False)]:
        monkeypatch.setenv(name, word)
        assert env_switch(name) is on, word
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError, match=rf"{name}: 'maybe' is not one of 1/0, yes/no, true/false, on/off"):
        env_switch(name)
