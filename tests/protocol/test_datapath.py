"""The Device's side of the native data path (issue 19): batch results held
in the Device and flushed by handle_timers at the deadline it gives,
results of the other direction applied in order, staged packets and
keepalives handed out as Output.sealing for the caller's batch path (never
the table's list form), and the trace's events made only while tracing."""

import pytest

from vpncrypt._native import ffi
from vpncrypt.crypto import get_backend
from vpncrypt.protocol.datapath import RoundResults
from vpncrypt.protocol.events import KeepaliveSent, MessageReceived, MessageSent
from vpncrypt.protocol.messages import KEEPALIVE, MALFORMED, MSG_INITIATION, MSG_RESPONSE, MSG_TRANSPORT
from vpncrypt.protocol.timers import KEEPALIVE as KEEPALIVE_TIMER
from vpncrypt.protocol.timers import NEW_HANDSHAKE, TimerQueue
from vpncrypt.transport import status as S
from vpncrypt.transport.model import Touch

from tests.protocol.helpers import A_ADDR, B_ADDR, a2b, b2a, established, make_pair

NATIVE = get_backend("native")
# the flags of a routine result (native/vc_wg.h): data received, data sent
RECEIVED = S.EV_AUTH | S.EV_DATA
SENT = S.EV_SENT | S.EV_DATA_SENT


class Wire:
    """A UdpBatchSocket's send() without a socket: keeps the datagrams."""

    gso = False  # as a UdpBatchSocket on a route that cannot segment

    def __init__(self):
        self.datagrams = []

    def send(self, buf, off, lens, ep, n):
        self.datagrams.extend(ffi.buffer(buf + off[i], lens[i])[:] for i in range(n))
        return n, 0


class ListFormSpy:
    """The table, counting calls of its list form (seal/open)."""

    def __init__(self, table):
        self._table = table
        self.calls = 0

    def __getattr__(self, name):
        if name in ("seal", "open"):
            self.calls += 1
        return getattr(self._table, name)


def test_routine_results_are_held_until_handle_timers_at_the_deadline(clock):
    a, b, net = established(NATIVE, clock)
    peer = a.peers[b.public_key]
    TimerQueue.disarm(peer, NEW_HANDSHAKE)
    now = clock.now
    a.fold_results(RoundResults([Touch(peer.pid, SENT, 1, 100)]), now)
    assert not peer.timers.pending(NEW_HANDSHAKE)  # held, not applied
    assert a.next_deadline() == pytest.approx(now + 0.01)  # the hold: 10 ms
    # more of the same merges into what is held: the deadline stays
    a.fold_results(RoundResults([Touch(peer.pid, SENT, 2, 200)]), now + 0.005)
    assert a.next_deadline() == pytest.approx(now + 0.01)
    a.handle_timers(now + 0.01)
    assert peer.timers.pending(NEW_HANDSHAKE)  # data sent: the new-handshake timer runs
    assert a.next_deadline() > now + 1  # nothing held any more


def test_a_result_of_the_other_direction_first_applies_what_is_held(clock):
    # sending stops the keepalive timer and receiving data starts it: the
    # order of the two must survive the hold
    a, b, net = established(NATIVE, clock)
    peer = a.peers[b.public_key]
    TimerQueue.disarm(peer, NEW_HANDSHAKE)
    TimerQueue.disarm(peer, KEEPALIVE_TIMER)
    now = clock.now
    a.fold_results(RoundResults([Touch(peer.pid, SENT, 1, 100)]), now)
    a.fold_results(RoundResults([Touch(peer.pid, RECEIVED, 1, 100)]), now + 0.002)
    assert peer.timers.pending(NEW_HANDSHAKE)  # the send, applied before the receive was held
    assert not peer.timers.pending(KEEPALIVE_TIMER)  # the receive, held
    assert a.next_deadline() == pytest.approx(now + 0.012)
    a.handle_timers(now + 0.012)
    assert peer.timers.pending(KEEPALIVE_TIMER)


def test_an_urgent_result_is_applied_at_once_after_what_is_held(clock):
    a, b, net = established(NATIVE, clock)
    peer = a.peers[b.public_key]
    TimerQueue.disarm(peer, NEW_HANDSHAKE)
    now = clock.now + 6  # past REKEY_TIMEOUT (5 s) since the last initiation
    a.fold_results(RoundResults([Touch(peer.pid, SENT, 1, 100)]), now)
    n = len(net.log)
    # a packet found no key: a handshake now, and the held send applied first
    out = a.fold_results(RoundResults([Touch(peer.pid, S.EV_NEED_KEY, 0, 0)], [(peer.pid, a2b(7))]), now)
    assert peer.timers.pending(NEW_HANDSHAKE)
    assert [d[0] for d, _ in out.datagrams] == [MSG_INITIATION]
    assert list(peer.staged) == [a2b(7)]
    assert len(net.log) == n


def _seal_through(dev, path, out, wire, now):
    """What the engine does with an Output's sealing items."""
    for item in out.sealing:
        path.seal_staged(item, wire, now)
        out.events.extend(dev.fold(path, now).events)


def test_staged_packets_leave_as_sealing_for_the_batch_path(clock):
    a, b, net = make_pair(NATIVE, clock)
    path = a.batch_path(4, 2048)  # from now on A's staged packets are the caller's to seal
    spy = a.table = ListFormSpy(a.table)
    out = a.send_packets([a2b(i) for i in range(6)], clock.now)  # no session: staged
    assert [d[0] for d, _ in out.datagrams] == [MSG_INITIATION]
    calls = spy.calls
    resp = b.receive_datagram(out.datagrams[0][0], A_ADDR, clock.now)
    done = a.receive_datagram(resp.datagrams[0][0], B_ADDR, clock.now)
    # the handshake completed: what waited is handed out, not sealed here
    assert [d[0] for d, _ in done.datagrams] == []
    assert [(s.peer, s.packets) for s in done.sealing] == [
        (a.peers[b.public_key].pid, [a2b(i) for i in range(6)])
    ]
    assert not a.peers[b.public_key].staged
    wire = Wire()
    _seal_through(a, path, done, wire, clock.now)
    assert spy.calls == calls + 1  # only the list-form open of the response, not a seal
    assert [d[0] for d in wire.datagrams] == [MSG_TRANSPORT] * 6
    got = [b.receive_datagram(d, A_ADDR, clock.now).packets for d in wire.datagrams]
    assert got == [[a2b(i)] for i in range(6)]


def test_a_keepalive_is_sealed_through_the_batch_path_and_then_reported(clock):
    a, b, net = make_pair(NATIVE, clock)
    path = a.batch_path(4, 2048)
    init = a.handle_timers(clock.now)  # nothing staged, no session: nothing
    assert not init.sealing
    peer = a.peers[b.public_key]
    out = a.send_packets([a2b(1)], clock.now)
    resp = b.receive_datagram(out.datagrams[0][0], A_ADDR, clock.now)
    done = a.receive_datagram(resp.datagrams[0][0], B_ADDR, clock.now)
    wire = Wire()
    _seal_through(a, path, done, wire, clock.now)
    b.receive_datagram(wire.datagrams[0], A_ADDR, clock.now)  # B now sends data back to A
    back = b.send_packets([b2a(2)], clock.now)
    a.receive_datagram(back.datagrams[0][0], B_ADDR, clock.now)
    # A owes B a keepalive 10 s later (KEEPALIVE_TIMEOUT); it goes out as sealing
    clock.now += 10.5
    due = a.handle_timers(clock.now)
    assert [(s.peer, s.packets, s.keepalive) for s in due.sealing] == [(peer.pid, [b""], False)]
    assert not [e for e in due.events if isinstance(e, KeepaliveSent)]  # not sealed yet
    wire = Wire()
    _seal_through(a, path, due, wire, clock.now)
    assert [len(d) for d in wire.datagrams] == [32]  # header 16 + tag 16: a keepalive
    assert [e for e in due.events if isinstance(e, KeepaliveSent)] == [KeepaliveSent(peer, False)]


def test_without_a_batch_path_the_device_seals_in_list_form(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    out = a.send_packets([a2b(1)], clock.now)
    resp = b.receive_datagram(out.datagrams[0][0], A_ADDR, clock.now)
    done = a.receive_datagram(resp.datagrams[0][0], B_ADDR, clock.now)
    assert not done.sealing
    assert [d[0] for d, _ in done.datagrams] == [MSG_TRANSPORT]


def test_the_trace_events_come_only_while_tracing(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    quiet = a.send_packets([a2b(1)], clock.now)
    assert not [e for e in quiet.events if isinstance(e, (MessageSent, MessageReceived))]
    b.tracing = True
    got = b.receive_datagrams(
        [(quiet.datagrams[0][0], A_ADDR), (b"\x02", A_ADDR), (b"\x01\xff\xff\xff" + bytes(144), A_ADDR)],
        clock.now,
    )
    traced = [e for e in got.events if isinstance(e, (MessageSent, MessageReceived))]
    assert MessageReceived(MSG_INITIATION, 148, A_ADDR) in traced
    assert MessageReceived(MALFORMED, 1, A_ADDR) in traced
    assert MessageReceived(MALFORMED, 148, A_ADDR) in traced  # reserved bytes set: no initiation
    assert MessageSent(MSG_RESPONSE, A_ADDR) in traced
    # A answers with its data (not traced) after the response: then a keepalive from B
    a.tracing = True
    done = a.receive_datagram(got.datagrams[0][0], B_ADDR, clock.now)
    assert MessageReceived(MSG_RESPONSE, 92, B_ADDR) in done.events
    assert not [e for e in done.events if isinstance(e, MessageReceived) and e.kind == KEEPALIVE]
    data = [d for d, _ in done.datagrams if d[0] == MSG_TRANSPORT]
    seen = b.receive_datagrams([(d, A_ADDR) for d in data], clock.now)
    assert not [e for e in seen.events if isinstance(e, MessageReceived)]  # data is never traced
