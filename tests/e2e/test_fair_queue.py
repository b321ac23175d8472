"""`VPNCRYPT_FAIR_QUEUE=1` (`vpncrypt up --fair-queue`): a vpncrypt daemon
whose send rounds go through their fair queue (fq_codel) and whose
receiving sockets have CoDel, against the newest wireguard-go and against
a vpncrypt with the option too: TCP flows each way and UDP streams at once,
every byte checked (vpncrypt.bench.streamcheck, as test_multiqueue.py runs
them); the daemons' counters (`get=1`) carry the option's drops (present,
0 or more) and the packets its queues took in; a daemon without it has
neither.

Two namespaces joined by a veth (tests/interop/lab.py), removed at the end."""

import contextlib
import os

import pytest

from tests.e2e.conftest import binary
from tests.dataplane.test_fq_option import FQ_COUNTERS  # the counters the option brings, by name
from tests.e2e.test_multiqueue import _streams  # TCP flows each way and UDP streams, every byte checked
from tests.interop.lab import PORT, Lab

FAIR_QUEUE = {"VPNCRYPT_FAIR_QUEUE": "1"}


@pytest.fixture
def lab():
    assert os.geteuid() == 0, "the end-to-end tests run as root"
    with contextlib.closing(Lab()) as lab:  # everything it made removed, whatever happened
        yield lab


@pytest.mark.parametrize("peer_kind", ["wireguard-go", "vpncrypt"])
def test_the_fair_queue_carries_every_byte_and_counts_its_drops(lab, peer_kind):
    a = lab.node("A", "wggo" if peer_kind == "wireguard-go" else "vpncrypt")
    if peer_kind == "wireguard-go":
        a.binary = binary("wireguard-go")  # the newest (unstable's)
    b = lab.node("B", "vpncrypt")
    conf_a = a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}])
    a.start(conf_a, **({"env": FAIR_QUEUE} if peer_kind == "vpncrypt" else {}))
    b.start(b.conf([{"public": a.public, "inner": a.inner}]), env=FAIR_QUEUE)
    a.ping(b)
    _streams(lab, a, b, seed=31)  # two TCP flows each way, seven UDP streams
    for node in [b] + ([a] if peer_kind == "vpncrypt" else []):
        c = node.counters()
        assert FQ_COUNTERS <= set(c), c
        assert all(c[k] >= 0 for k in FQ_COUNTERS), c
        # the TCP flows out of this side (2 x 2 MiB, some 3000 packets) went
        # through the send rounds' queues
        assert c["fair_queue_packets"] >= 1000, c


def test_without_the_option_the_counters_have_none_of_it(lab):
    a = lab.node("A", "vpncrypt")
    b = lab.node("B", "vpncrypt")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}]))
    b.start(b.conf([{"public": a.public, "inner": a.inner}]), env={"VPNCRYPT_FAIR_QUEUE": "0"})
    a.ping(b)
    for node in (a, b):
        c = node.counters()
        assert not FQ_COUNTERS & set(c), c
