"""The send round's fair queue (vc_wg_send_round with native/fq_codel.c):
a sparse flow's packet that arrives behind a bulk flow's backlog is sealed
in the first batch, the bulk flow keeps its order, and nothing is lost.

The queue is opt-in (vc_wg_round.fq_on); without it the round reads and
seals in the TUN's order, and the sparse packet comes last (checked here
too).  The inner side is a datagram socketpair (TunBatch without a vnet header:
one packet per read), the peer has an endpoint but no key yet, so every packet comes back
from the round as NO_KEY (Batch.waiting(), in the order the round took
them) instead of being sealed: the order is the queue's."""

import socket
import struct

from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket
from vpncrypt.transport import new_table

from tests.dataplane.tun_child import udp_packet

BULK, SPARSE = 150, 1
STATS: dict[int, dict[str, int]] = {}  # the queue's counters after rounds_of(fq_on)


def packets():
    bulk = [
        udp_packet("10.0.0.2", 40000, "10.0.0.1", 9, struct.pack("!I", k).ljust(272, b"b"), k)
        for k in range(BULK)
    ]
    sparse = udp_packet("10.0.0.2", 40001, "10.0.0.1", 53, struct.pack("!I", 9999).ljust(32, b"s"), 9999)
    return bulk, sparse


def rounds_of(fq_on: int) -> list[list[bytes]]:
    """The bulk packets, then the sparse one, into the inner side; the send
    rounds until one returns 0: the packets of each, in the round's order."""
    table = new_table("native")
    pid = table.add_peer()
    table.route_add(pid, "10.0.0.1/32")
    table.set_endpoint(pid, ("127.0.0.1", 9))  # (without one the packets would be dropped, not wait)
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        far.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        near.setblocking(False)
        sock.bind(("127.0.0.1", 0))
        inner = TunBatch(near.fileno(), mtu=1500, batch=64)
        udp = UdpBatchSocket(sock, batch=64)
        batch = table.batch(64, 2048, fair_queue=bool(fq_on))  # the queue is opt-in
        assert batch._round.fq_on == fq_on
        bulk, sparse = packets()
        for p in bulk:  # 300-byte packets of one flow, then one of another
            far.send(p)
        far.send(sparse)
        rounds = []
        while True:
            n = batch.send(inner, udp, 1.0)
            if n == 0:
                STATS[fq_on] = batch.fair_queue_stats()
                return rounds
            got = [p for _peer, p in batch.waiting()]
            assert len(got) == n
            rounds.append(got)
    finally:
        for s in (near, far, sock):
            s.close()


def test_a_sparse_packet_behind_a_bulk_backlog_goes_out_in_the_first_batch():
    bulk, sparse = packets()
    rounds = rounds_of(1)
    assert [len(r) for r in rounds] == [64, 64, BULK + SPARSE - 128]
    # RFC 8290 with a quantum of 1514: the bulk flow (new first) is served
    # until its deficit is spent, 6 packets of 300 bytes (1514 - 6 x 300 < 0);
    # then the sparse flow, a new one too, before the bulk flow's next turn
    assert rounds[0].index(sparse) == 6
    out = [p for r in rounds for p in r]
    assert [p for p in out if p != sparse] == bulk  # the bulk flow in order, all of it
    assert out.count(sparse) == 1


def test_without_the_queue_the_round_keeps_the_tuns_order():
    bulk, sparse = packets()
    assert [p for r in rounds_of(0) for p in r] == bulk + [sparse]


def test_the_queues_counters_say_what_it_carried():
    rounds_of(1)
    st = STATS[1]
    assert st["enqueued"] == st["dequeued"] == BULK + SPARSE
    assert st["bytes_in"] == st["bytes_out"] == BULK * 300 + 60
    assert st["codel_drops"] == st["overlimit_drops"] == st["too_big"] == 0
    assert st["backlog_packets"] == 0
    rounds_of(0)
    assert set(STATS[0].values()) == {0}  # no queue: nothing in it, nothing dropped


def test_release_is_safe_without_a_queue_and_frees_one():
    """vc_wg_round_release (the Batch's round's destructor, ffi.gc): a no-op
    on a round that never made a queue, and the queue's end on one that
    did; twice is harmless."""
    from vpncrypt._native import ffi, lib

    r = ffi.new("vc_wg_round *")
    lib.vc_wg_round_release(r)
    lib.vc_wg_round_release(r)
    assert r.fq == ffi.NULL
    table = new_table("native")
    batch = table.batch(8, 2048, fair_queue=True)
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        near.setblocking(False)
        sock.bind(("127.0.0.1", 0))
        inner, udp = TunBatch(near.fileno(), mtu=1500, batch=8), UdpBatchSocket(sock, batch=8)
        far.send(packets()[1])
        assert batch.send(inner, udp, 1.0) == 1
        assert batch._round.fq != ffi.NULL and batch.fair_queue_stats()["enqueued"] == 1
        lib.vc_wg_round_release(batch._round)
        assert batch._round.fq == ffi.NULL and batch.fair_queue_stats()["enqueued"] == 0
        lib.vc_wg_round_release(batch._round)
    finally:
        for s in (near, far, sock):
            s.close()
