"""The receive round's CoDel on the socket's sojourn time is opt-in (the
fair_queue of a table Batch, `vpncrypt up --fair-queue`): by default a
receive round opens every datagram the kernel delivered, however long it
waited in the socket, as WireGuard does, and never turns SO_TIMESTAMPNS on.

The rounds are the real ones (vc_wg_receive_round through Batch.receive) on
a loopback UDP socket; the inner side is a datagram socketpair (a TunBatch
without a vnet header).  The datagrams are WireGuard transport data messages
(type 4, 64 bytes) for an index the table does not know: the table drops
them after the round has handed them to it, which is what is counted here."""

import socket
import struct
import time

import pytest

from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket
from vpncrypt.transport import new_table

# SO_TIMESTAMPNS (asm-generic/socket.h: SO_TIMESTAMPNS_OLD, 35), if the
# socket module does not name it
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
BATCH = 16
MESSAGES = 3 * BATCH  # more than one round takes: the socket still holds some after each


def data_message(k: int) -> bytes:
    # type 4, three reserved zero bytes, receiver index, counter, then 48 bytes
    return struct.pack("<BxxxIQ", 4, 0x5EED0000 + k, k) + bytes(48)


class Rig:
    def __init__(self, fair_queue, batch=BATCH, gro=True):
        self.table = new_table("native")
        self.near, self.far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.near.setblocking(False)
        self.sock.bind(("127.0.0.1", 0))
        self.inner = TunBatch(self.near.fileno(), mtu=1500, batch=batch)
        self.udp = UdpBatchSocket(self.sock, batch=batch, gro=gro)
        self.fair_queue = bool(fair_queue)
        kw = {} if fair_queue is None else {"fair_queue": fair_queue}
        self.batch = self.table.batch(batch, 2048, **kw)

    def send(self, n):
        for k in range(n):
            self.peer.sendto(data_message(k), self.sock.getsockname())

    def rounds(self, sent, pause=0.0):
        """Receive rounds until the `sent` datagrams were opened or dropped
        by CoDel, `pause` seconds after each of the first two; the datagrams
        the rounds handed to the table."""
        opened = 0
        for k in range(4 * sent):
            opened += self.batch.receive(self.udp, self.inner, time.monotonic())
            if opened + self.udp.aqm_dropped >= sent:
                return opened
            if k < 2:
                time.sleep(pause)
        raise AssertionError(f"only {opened} + {self.udp.aqm_dropped} of {sent} datagrams came")

    def stamped(self):
        """With CoDel wanted: a first round sets it up (SO_TIMESTAMPNS on),
        then probes until the kernel stamps datagrams when they arrive (the
        first socket to ask turns the stamping on through a work item, and a
        datagram queued before that is stamped when it is read); without it,
        the same first round."""
        self.batch.receive(self.udp, self.inner, time.monotonic())
        if not self.fair_queue:
            return
        for _ in range(200):
            self.peer.sendto(b"probe", self.sock.getsockname())  # short: CoDel never judges it
            time.sleep(0.005)
            for _ in range(100):
                if self.batch.receive(self.udp, self.inner, time.monotonic()):
                    break
            arrival = self.udp.state.arrival[0]
            if arrival and time.time_ns() - arrival >= 4_000_000:
                return
        raise AssertionError("the kernel never stamped a datagram on arrival")

    def timestamps(self):
        return self.sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS)

    def close(self):
        for s in (self.near, self.far, self.sock, self.peer):
            s.close()


@pytest.fixture
def rig(request):
    r = Rig(request.param)
    yield r
    r.close()


@pytest.mark.parametrize("rig", [None, False], indirect=True, ids=["default", "off"])
def test_by_default_the_receive_round_has_no_codel_and_no_timestamps(rig):
    rig.send(4)
    assert rig.rounds(4) == 4
    assert rig.udp.state.aqm == 0  # off: never set up
    assert rig.timestamps() == 0  # the socket was left as it was
    assert rig.batch.fair_queue_stats()["enqueued"] == 0


@pytest.mark.parametrize("rig", [True], indirect=True, ids=["fair-queue"])
def test_with_the_fair_queue_the_round_sets_codel_up(rig):
    rig.send(4)
    assert rig.rounds(4) == 4  # fresh datagrams: nothing dropped
    assert rig.udp.state.aqm == 1  # on
    assert rig.timestamps() == 1
    assert rig.udp.aqm_dropped == 0


@pytest.mark.parametrize("rig", [None, True], indirect=True, ids=["default", "fair-queue"])
def test_old_datagrams_are_all_opened_unless_codel_was_asked_for(rig):
    """Every datagram waited more than 20 ms in the socket when its round
    took it, a standing queue for CoDel (RFC 8289: above its 1 ms target
    for more than its 10 ms interval: it drops).  Without the option every
    one is opened; with it (the control, the same rounds) CoDel drops."""
    rig.stamped()
    rig.send(MESSAGES)
    time.sleep(0.03)
    opened = rig.rounds(MESSAGES, pause=0.03)
    if rig.fair_queue:
        assert rig.udp.aqm_dropped >= 1
        assert opened + rig.udp.aqm_dropped == MESSAGES
    else:
        assert opened == MESSAGES and rig.udp.aqm_dropped == 0
        assert rig.udp.state.aqm == 0
    assert rig.table.drops().get("unknown_index", 0) == opened  # the table saw each one opened


def test_every_buffer_of_a_round_of_128_has_its_arrival_time():
    """The daemon's rounds take 128 datagrams (more than one recvmmsg of 64
    entries): without GRO each is a buffer of its own, and CoDel must know
    when each arrived, not only the first 64 (the rest were never judged)."""
    rig = Rig(True, batch=128, gro=False)
    try:
        rig.stamped()
        for k in range(128):
            rig.peer.sendto(b"probe-%03d" % k, rig.sock.getsockname())  # short: never dropped
        time.sleep(0.01)
        n = rig.batch.receive(rig.udp, rig.inner, time.monotonic())
        assert n == 128 and rig.udp.nbufs == 128, (n, rig.udp.nbufs)
        now = time.time_ns()
        stamps = [rig.udp.state.arrival[b] for b in range(128)]
        assert all(0 < now - t < 10_000_000_000 for t in stamps), stamps
    finally:
        rig.close()


def test_codel_judges_data_in_buffers_past_the_64th():
    """vc_udp_aqm_filter on rounds of 128 one-datagram buffers, all 50 ms
    old, data messages (type 4) only in buffers 64-127 (the first 64 are
    handshake-type): above the 1 ms target for more than the 10 ms interval,
    CoDel drops some of them (RFC 8289), and never one of the first 64."""
    from vpncrypt._native import ffi, lib

    n = 128
    st = ffi.new("vc_udp_rx *")
    lib.vc_codel_init(ffi.addressof(st.codel), 1_000_000, 10_000_000, 1514)
    slab = ffi.new("uint8_t[]", n * 64)
    off, ln = ffi.new("uint32_t[]", n), ffi.new("uint32_t[]", n)
    ep, segs, nb = ffi.new("vc_endpoint[]", n), ffi.new("uint32_t[]", n), ffi.new("int *")
    real, mono = time.time_ns(), time.monotonic_ns()
    kept_handshakes = 0
    for r in range(20):
        for i in range(n):
            off[i], ln[i], segs[i] = i * 64, 48, 1
            slab[i * 64] = 4 if i >= 64 else 1
            st.arrival[i] = real - 50_000_000
        nb[0] = n
        left = lib.vc_udp_aqm_filter(st, slab, off, ln, ep, n, segs, nb, 1, mono + r * 5_000_000, real)
        kept_handshakes += sum(1 for i in range(left) if slab[off[i]] == 1)
    assert st.aqm_dropped >= 1
    assert kept_handshakes == 20 * 64  # every handshake-type datagram kept
