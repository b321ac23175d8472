"""Rounds looped in C (Batch.receive_rounds / send_rounds, through the
engine's Worker.rounds and the Device's fold): the same traffic run through
twin Devices, one round per call (Worker.round, a fold after each) and
looped (one call and one fold for each run of routine rounds), must leave
the same counters (batch sizes included), the same bytes delivered, the
same sessions touched and held with the same flags and data counts, and
the same Outputs; and the loop must stop where a round stops being
routine (two peers touched) or full.

The inner side is a datagram socketpair (TunBatch without a vnet header);
the traffic is queued before the rounds run, so both ways see the same
rounds."""

import random
import socket

import pytest

from vpncrypt.dataplane.engine import MAX_ROUNDS, Worker
from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket
from vpncrypt.protocol import Device, keys
from vpncrypt.protocol.events import NOTHING, Output

from tests.transport.helpers import KEY_AB, KEY_BA, install, ipv4, message
from tests.transport.test_rounds import received

LOCAL = "127.0.0.1"
BATCH = 8
NOW = 5.0
PEER_KEYS = [keys.public_from_private(keys.clamp(bytes([i]) * 32)) for i in (11, 12)]
# (our index, theirs) of the two peers' sessions
INDEXES = [(7, 5), (9, 6)]
SECOND_KEY_IN, SECOND_KEY_OUT = bytes(range(51, 83)), bytes(range(151, 183))


class Twin:
    """A Device with two peers (10.0.0.1 and 10.0.0.3 behind them), a
    session installed with each, a UDP socket and a socketpair as the TUN,
    and one Worker (receiving or sending)."""

    def __init__(self, sending, dest=None):
        self.dev = Device(
            keys.clamp(random.Random(3).randbytes(32)), backend="native", rng=random.Random(4).randbytes
        )
        self.peers = []
        for i, pub in enumerate(PEER_KEYS):
            peer = self.dev.add_peer(pub, allowed_ips=[f"10.0.0.{1 + 2 * i}/32"], endpoint=dest)
            local, remote = INDEXES[i]
            k_in, k_out = (KEY_AB, KEY_BA) if i == 0 else (SECOND_KEY_IN, SECOND_KEY_OUT)
            if sending:  # we initiated: the session is current at once
                install(self.dev.table, peer.pid, local, remote, k_out, k_in, True, NOW)
            else:
                install(self.dev.table, peer.pid, local, remote, k_out, k_in, False, NOW)
            self.peers.append(peer)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOCAL, 0))
        self.addr = self.sock.getsockname()
        self.near, self.far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.near.setblocking(False)
        self.far.setblocking(False)
        self.udp = UdpBatchSocket(self.sock, batch=BATCH)
        self.inner = TunBatch(self.near.fileno(), mtu=1500, batch=BATCH)
        self.path = self.dev.batch_path(BATCH, 2048)
        self.worker = Worker(self.udp, self.inner, self.path, sending)
        self.outputs = []
        self.calls = []  # rounds per call

    def one_by_one(self):
        """A turn as the engine ran it before the loop: a fold per round."""
        w = self.worker
        for _ in range(MAX_ROUNDS):
            n = w.round(NOW)
            if not n:
                return
            self.calls.append(1)
            self.outputs.append(_plain(self.dev.fold(self.path, NOW)))
            if not w.more(n):
                return

    def looped(self, on_a_thread=False):
        """A turn as the engine runs it now: on the loop (Engine._on_readable)
        a fold after each call; on a data thread (Engine._worker_thread) the
        calls' results merged and folded once."""
        w, left, merged = self.worker, MAX_ROUNDS, None
        while left > 0:
            n = w.rounds(NOW, left)
            used = self.path.rounds
            if not n and used == 1:
                break
            left -= used
            self.calls.append(used)
            if not on_a_thread:
                self.outputs.append(_plain(self.dev.fold(self.path, NOW)))
            elif (res := self.path.results()) is not None:
                merged = res if merged is None else merged.merge(res) or merged
            if not n or not w.more(n):
                break
        if merged is not None:
            self.dev.fold_results(merged, NOW)

    def seen(self):
        """What the counters, the Device and the far ends saw."""
        c = self.worker.counters
        return {
            "counters": c.as_dict(),
            "batch_sizes": c.batch_sizes(),
            "held": {pid: list(h) for pid, h in self.dev.datapath._held.items()},
            "outputs": [o for o in self.outputs if o is not None],  # (what the engine emits)
            "rounds": sum(self.calls),
            "inner": _drain(self.far),
        }

    def close(self):
        for s in (self.sock, self.near, self.far):
            s.close()


def _plain(out):
    """An Output as plain values (NOTHING: None)."""
    if out is NOTHING:
        return None
    return (len(out.datagrams), len(out.packets), [type(e).__name__ for e in out.events], out.handshakes)


def _drain(sock):
    return [d for d, _ in received(sock)]


def _receive_traffic(second_at):
    """27 datagrams, batch 8: rounds of 8, 8, 8 and 3.  The first peer's data
    and a keepalive; at second_at one message of the second peer (two peers
    touched: that round is not routine)."""
    items, first, second = [], 0, 0
    for i in range(27):
        if i == second_at:
            items.append(message(SECOND_KEY_IN, 9, second, ipv4("10.0.0.3", "10.0.0.2", b"second")))
            second += 1
            continue
        body = b"" if i == 4 else ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * (60 + i))
        items.append(message(KEY_AB, 7, first, body))
        first += 1
    return items


def _warm_up(twin, src):
    """The first message of each session confirms it (not routine): taken
    before the comparison, on both twins alike."""
    src.sendto(message(KEY_AB, 7, 1000, ipv4("10.0.0.1", "10.0.0.2", b"warm")), twin.addr)
    src.sendto(message(SECOND_KEY_IN, 9, 1000, ipv4("10.0.0.3", "10.0.0.2", b"warm")), twin.addr)
    twin.one_by_one()
    twin.dev.datapath.flush_held(twin.dev.table.clock(NOW), Output())
    _drain(twin.far)
    twin.outputs.clear()
    twin.calls.clear()
    twin.worker.counters = type(twin.worker.counters)()


@pytest.mark.parametrize(("second_at", "calls"), [(20, [3, 1]), (25, [4])])
def test_receive_rounds_looped_as_one_by_one(second_at, calls):
    """27 datagrams for two peers: the same counters, bytes delivered and
    sessions held one round per call, looped on the loop, and looped on a
    data thread (results merged, then folded).  The loop stops after the
    round that touched two peers (the third, or the last)."""
    single, looped, threaded = Twin(False), Twin(False), Twin(False)
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    src.bind((LOCAL, 0))
    try:
        for t in (single, looped, threaded):
            _warm_up(t, src)
        items = _receive_traffic(second_at)
        for t in (single, looped, threaded):
            for d in items:
                src.sendto(d, t.addr)
        single.one_by_one()
        looped.looped()
        threaded.looped(on_a_thread=True)
        for t in (single, looped, threaded):
            assert not _readable(t.sock)  # one turn took it all
        a, b, c = single.seen(), looped.seen(), threaded.seen()
        assert a == b
        del a["outputs"], c["outputs"]  # (a thread's turn is folded once)
        assert a == c
        assert looped.calls == threaded.calls == calls
        # the run was the one the traffic makes: 8, 8, 8, 3 datagrams
        assert a["batch_sizes"]["rx"][1] == 27
        assert a["rounds"] == 4
        assert len(a["inner"]) == 26  # the first peer's 26 but its keepalive, and the second's
        assert single.calls == [1, 1, 1, 1]
        # both peers held (received), the first with data from all four rounds
        assert b["held"] == {single.peers[0].pid: [True, 3, 4], single.peers[1].pid: [True, 3, 1]}
    finally:
        src.close()
        for t in (single, looped, threaded):
            t.close()


def _readable(sock):
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True
    except BlockingIOError:
        return False


def test_send_rounds_looped_as_one_by_one():
    """19 packets for the first peer read from the TUN (rounds of 8, 8 and
    3): the same datagrams sent (the same counters and nonces), the same
    counters and held sessions; one call runs the three rounds."""
    dest = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dest.bind((LOCAL, 0))
    single, looped = Twin(True, dest.getsockname()), Twin(True, dest.getsockname())
    try:
        packets = [ipv4("10.0.0.2", "10.0.0.1", bytes([i]) * (80 + i)) for i in range(19)]
        sent = []
        for t in (single, looped):
            for p in packets:
                t.far.send(p)
            t.one_by_one() if t is single else t.looped()
            sent.append([d for d, _ in received(dest)])
        a, b = single.seen(), looped.seen()
        assert a == b
        assert sent[0] == sent[1] and len(sent[0]) == 19
        assert a["batch_sizes"]["tx"][1] == 19
        assert single.calls == [1, 1, 1]
        assert looped.calls == [3]
        pid = single.peers[0].pid
        assert b["held"][pid][0] is False
    finally:
        dest.close()
        single.close()
        looped.close()


@pytest.mark.parametrize("direction", ["receive", "send"])
def test_a_deferred_failure_is_raised_by_its_own_directions_next_call(direction):
    """An errno in a looped call after routine rounds is kept for the next
    call (so those rounds are counted first).  That call may be a one-round
    one (Worker.round, a tracing socket): it raises it too, once; the other
    direction's calls never see it (outside review: only the looped calls
    looked, and both directions shared one slot)."""
    t = Twin(sending=direction == "send")
    try:
        p = t.path
        calls = {
            "receive": (
                lambda: p.receive(t.udp, t.inner, NOW),
                lambda: p.receive_rounds(t.udp, t.inner, NOW, 4, BATCH),
            ),
            "send": (
                lambda: p.send(t.inner, t.udp, NOW),
                lambda: p.send_rounds(t.inner, t.udp, NOW, 4, BATCH),
            ),
        }
        other = calls["send" if direction == "receive" else "receive"]
        for call in calls[direction]:
            slot = "_deferred_rx" if direction == "receive" else "_deferred_tx"
            setattr(p.batch, slot, -5)  # EIO, as C returns it
            assert other[0]() == 0 and other[1]() == 0  # nothing waiting, and no error
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == 5
            assert call() == 0  # raised once
    finally:
        t.close()
