"""Batch.receive / send / seal_send, the data plane's rounds: one call into C
each (native/wg_rounds.c) for the data plane's own socket and TUN objects,
checked against the same round composed in Python (what a subclass that
overrides recv/send/read/write gets) on twin tables fed the same input: the
same return values, the same bytes out, the same statuses, touches, queue
counts and RoundIO, and a forged datagram never delivered.

The inner side is a datagram socketpair here (TunBatch without a vnet
header: one packet per read and write); tests/transport/rounds_tun_child.py
runs the rounds through a real TUN with offloads in a namespace of its own."""

import errno
import os
import shutil
import socket
import subprocess
import sys

import pytest

from vpncrypt._native import ffi
from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket
from vpncrypt.transport import new_table, status as S

from tests.transport.helpers import KEY_AB, KEY_BA, install, ipv4, message
from tests.transport.test_admission import PUB, SEED, body, signed

LOCAL = "127.0.0.1"


class ComposedUdp(UdpBatchSocket):
    """The same socket, but its rounds are composed in Python (as for a
    tracing socket: it overrides recv and send)."""

    def recv(self):
        return super().recv()

    def send(self, buf, off, lens, ep, n):
        return super().send(buf, off, lens, ep, n)


class ComposedTun(TunBatch):
    def read(self):
        return super().read()

    def write(self, buf, off, lens, n):
        return super().write(buf, off, lens, n)


def udp_socket():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOCAL, 0))
    return s


class Side:
    """A table with one peer (10.0.0.1/32 behind it, its endpoint `peer_addr`),
    a UDP socket, and an inner side: a datagram socketpair, whose far end
    (self.far) is what the TUN's kernel side would be."""

    def __init__(self, composed, *, responder=True, peer_addr=None, batch=64, **cfg):
        from vpncrypt.transport import TableConfig

        self.table = new_table("native", TableConfig(**cfg))
        self.table.set_public_key(PUB)
        self.table.seed(SEED)
        self.pid = self.table.add_peer()
        self.table.route_add(self.pid, "10.0.0.1/32")
        self.sock = udp_socket()
        self.addr = self.sock.getsockname()
        if peer_addr is not None:
            self.table.set_endpoint(self.pid, peer_addr)
        if responder:  # B: peer A's session, A initiated (local 7, remote 5)
            install(self.table, self.pid, 7, 5, KEY_BA, KEY_AB, False)
        else:  # A: the initiator's side of the same session
            install(self.table, self.pid, 5, 7, KEY_AB, KEY_BA, True)
        self.near, self.far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.near.setblocking(False)
        self.far.setblocking(False)
        self.udp = (ComposedUdp if composed else UdpBatchSocket)(self.sock, batch=batch)
        self.inner = (ComposedTun if composed else TunBatch)(self.near.fileno(), mtu=1500, batch=batch)
        self.batch = self.table.batch(batch, 2048)

    def inner_packets(self):
        out = []
        while True:
            try:
                out.append(self.far.recv(65536))
            except BlockingIOError:
                return out

    def close(self):
        for s in (self.sock, self.near, self.far):
            s.close()


@pytest.fixture
def twins():
    made = []

    def make(**kw):
        pair = (Side(False, **kw), Side(True, **kw))
        made.extend(pair)
        return pair

    yield make
    for s in made:
        s.close()


def datagrams_from(sender, dests, items):
    for d in items:
        for addr in dests:
            sender.sendto(d, addr)


def received(sock):
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recvfrom(65536))
        except BlockingIOError:
            return out


def round_state(side):
    b, io = side.batch, side.batch.io
    return {
        "io": {f: getattr(io, f) for f in ("received", "delivered", "written", "sealed", "sent")}
        | {f: getattr(io, f) for f in ("replies", "replies_sent", "send_errno", "write_errno", "gso_off")},
        "status": [b.status[i] for i in range(io.received)],
        "touches": b.touches(),
        "n_queued": b.n_queued,
        "gso": side.udp.gso,
    }


def receive_on_both(sides, now=1.0):
    """One receive round on each side: (received, round_state, inner packets written)."""
    return [
        (side.batch.receive(side.udp, side.inner, now), round_state(side), side.inner_packets())
        for side in sides
    ]


def c_calls(fn):
    """(result, [names of the C functions fn called from Python])."""
    calls = []

    def prof(frame, event, arg):
        if event == "c_call":
            calls.append(getattr(arg, "__name__", str(arg)))

    sys.setprofile(prof)
    try:
        res = fn()
    finally:
        sys.setprofile(None)
    return res, [c for c in calls if c.startswith("vc_")]


TO_B = [ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * (40 + i)) for i in range(6)]


def test_receive_round_is_one_native_call(twins):
    """One receive round (datagrams in, opened, written to the TUN) crosses
    into C once; composed in Python it takes one call per step."""
    native, composed = twins()
    src = udp_socket()
    datagrams_from(src, [native.addr, composed.addr], [message(KEY_AB, 7, c, p) for c, p in enumerate(TO_B)])
    n, calls = c_calls(lambda: native.batch.receive(native.udp, native.inner, 1.0))
    assert (n, calls) == (6, ["vc_wg_receive_round"])
    n, calls = c_calls(lambda: composed.batch.receive(composed.udp, composed.inner, 1.0))
    assert (n, calls) == (6, ["vc_udp_recv_batch_segs", "vc_wg_round_open", "vc_tun_write_batch"])
    assert native.inner_packets() == composed.inner_packets() == TO_B
    src.close()


def test_receive_matches_composition_forged_replayed_and_junk(twins):
    """Good data, a forged tag, a replay, a keepalive, junk and a handshake:
    the same statuses, deliveries (the forged datagram never) and touches."""
    native, composed = twins()
    good = [message(KEY_AB, 7, c, p) for c, p in enumerate(TO_B[:3])]
    forged = bytearray(message(KEY_AB, 7, 3, TO_B[3]))
    forged[-1] ^= 1
    items = good + [bytes(forged), good[1], message(KEY_AB, 7, 4, b""), b"\x04junk", signed(body(1, 1))]
    src = udp_socket()
    datagrams_from(src, [native.addr, composed.addr], items)
    results = receive_on_both((native, composed))
    assert results[0] == results[1]
    n, state, packets = results[0]
    assert n == len(items)
    assert state["status"] == [S.OK] * 3 + [S.BAD_TAG, S.REPLAY, S.KEEPALIVE, S.MALFORMED, S.HANDSHAKE]
    assert packets == TO_B[:3]
    assert state["n_queued"] == 1
    assert state["io"]["delivered"] == state["io"]["written"] == 3
    # nothing waiting: a round of none
    for side in (native, composed):
        assert side.batch.receive(side.udp, side.inner, 1.0) == 0
        assert side.batch.io.received == 0 and side.batch.n_touched == 0
    src.close()


def test_cookie_replies_under_load(twins):
    """Under load (1 waiting is enough here) initiations without mac2 get a
    cookie reply each, sent back by the round itself: the same replies
    (the tables are seeded alike) reach the sender from both paths."""
    native, composed = twins(under_load_depth=1)
    senders = [udp_socket() for _ in range(3)]
    for i, s in enumerate(senders):
        for k in range(4):
            datagrams_from(s, [native.addr, composed.addr], [signed(body(1, 10 * i + k))])
    results = []
    for side in (native, composed):
        n = side.batch.receive(side.udp, side.inner, 1.0)
        st = round_state(side)
        results.append((n, st, [[d for d, a in received(s) if a == side.addr] for s in senders]))
    assert results[0] == results[1]
    n, st, replies = results[0]
    assert n == 12
    assert st["io"]["replies"] == st["io"]["replies_sent"] == st["status"].count(S.COOKIE_SENT) >= 11
    assert all(len(r) == 64 and r[0] == 3 for per in replies for r in per)  # cookie replies
    assert sum(len(per) for per in replies) == st["io"]["replies"]
    for s in senders:
        s.close()


def test_send_round_matches_composition(twins):
    """TUN packets read, sealed and sent in one call: the same datagrams
    (byte for byte: the same keys and counters), statuses, peers and
    touches; a packet with no route is not sent; one peer without a key
    leaves its packets in waiting()."""
    sink = udp_socket()
    native, composed = twins(responder=False, peer_addr=sink.getsockname())
    packets = [ipv4("10.0.0.2", "10.0.0.1", bytes([i]) * 100) for i in range(5)]
    packets.insert(2, ipv4("10.0.0.2", "10.9.9.9", b"nowhere"))
    out = []
    for side in (native, composed):
        for p in packets:
            side.far.send(p)
        n, calls = c_calls(lambda s=side: s.batch.send(s.inner, s.udp, 2.0))
        st = round_state(side)
        st["peer_of"] = [side.batch.peer_of[i] for i in range(n)]
        out.append((n, st, [d for d, _ in received(sink)], side.batch.waiting(), calls))
    assert out[0][:4] == out[1][:4]
    n, st, datagrams, waiting, calls = out[0]
    assert calls == ["vc_wg_send_round"]
    assert out[1][4] == ["vc_tun_read_batch", "vc_wg_round_seal", "vc_udp_send_batch", "vc_wg_forget_sources"]
    assert n == 6 and st["io"]["sealed"] == st["io"]["sent"] == 5 and len(datagrams) == 5
    assert st["status"] == [S.OK, S.OK, S.NO_ROUTE, S.OK, S.OK, S.OK]
    assert st["peer_of"] == [0, 0, -1, 0, 0, 0]
    assert waiting == []
    # B opens what was sent
    b = new_table("native")
    pid = b.add_peer()
    b.route_add(pid, "10.0.0.2/32")
    install(b, pid, 7, 5, KEY_BA, KEY_AB, False)
    assert b.open([(d, ("127.0.0.1", 1)) for d in datagrams], 2.0).packets == [
        p for i, p in enumerate(packets) if i != 2
    ]
    # no key: the peer zeroed; the packets wait for a handshake
    for side in (native, composed):
        side.table.zero(side.pid)
        side.far.send(packets[0])
        assert side.batch.send(side.inner, side.udp, 3.0) == 1
        assert side.batch.status[0] == S.NO_KEY and side.batch.io.sealed == 0
        assert side.batch.waiting() == [(side.pid, packets[0])]
        assert side.batch.send(side.inner, side.udp, 3.0) == 0
        assert side.batch.waiting() == []  # an empty round leaves nothing waiting (not the last round's)
    sink.close()


def test_seal_send_with_a_peer_and_refusal(twins):
    """seal_send to a given peer (keepalives: empty packets) in one call;
    more packets than the batch holds is refused before any is sealed."""
    sink = udp_socket()
    native, composed = twins(responder=False, peer_addr=sink.getsockname(), batch=4)
    slab = ffi.new("uint8_t[]", 16)
    off = ffi.new("uint32_t[]", 5)
    lens = ffi.new("uint32_t[]", 5)
    view = memoryview(ffi.buffer(slab))
    res = []
    for side in (native, composed):
        k, calls = c_calls(lambda s=side: s.batch.seal_send(slab, view, off, lens, 2, s.udp, 2.0, peer=s.pid))
        res.append((k, round_state(side), [d for d, _ in received(sink)], calls[-1:]))
        with pytest.raises(ValueError):
            side.batch.seal_send(slab, view, off, lens, 5, side.udp, 2.0)
    assert res[0][:3] == res[1][:3]
    assert res[0][3] == ["vc_wg_seal_send"]
    assert res[0][0] == 2 and [len(d) for d in res[0][2]] == [32, 32]  # two keepalives
    sink.close()


def test_partial_write_to_a_full_inner(twins):
    """The TUN side cannot take more (EAGAIN): the round writes what it can
    and says so (written < delivered, write_errno EAGAIN), like the
    composition; the rest is dropped, not retried."""
    native, composed = twins()
    src = udp_socket()
    for side in (native, composed):
        side.near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        side.far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    big = [ipv4("10.0.0.1", "10.0.0.2", bytes([i]) * 1000) for i in range(40)]
    datagrams_from(src, [native.addr, composed.addr], [message(KEY_AB, 7, c, p) for c, p in enumerate(big)])
    res = receive_on_both((native, composed))
    assert res[0] == res[1]
    n, st, got = res[0]
    assert n == 40 and st["io"]["delivered"] == 40
    assert 0 < st["io"]["written"] < 40 and st["io"]["write_errno"] == errno.EAGAIN
    assert got == big[: st["io"]["written"]]
    src.close()


def test_send_errors_bad_endpoint(twins):
    """A peer whose endpoint the socket cannot reach (an IPv6 endpoint on an
    IPv4 socket): nothing sent, the errno reported, the batch goes on."""
    native, composed = twins(responder=False, peer_addr=("::1", 9))
    res = []
    for side in (native, composed):
        side.far.send(ipv4("10.0.0.2", "10.0.0.1", b"x" * 64))
        n = side.batch.send(side.inner, side.udp, 2.0)
        res.append((n, round_state(side)))
    assert res[0] == res[1]
    assert res[0][1]["io"]["sealed"] == 1 and res[0][1]["io"]["sent"] == 0
    assert res[0][1]["io"]["send_errno"] in (errno.EAFNOSUPPORT, errno.EINVAL)


def test_a_socket_error_from_icmp_is_read_like_the_composition(twins):
    """A pending ICMP error on a connected socket (port unreachable): with
    the error queue on (IP_RECVERR, for the path MTU) the receive reads it
    from the queue and goes on (it used to raise ECONNREFUSED, which the
    data plane ignored), the same from both paths; the table refuses it as
    a path MTU (no EMSGSIZE), and a datagram behind it still arrives."""
    native, composed = twins()
    closed = udp_socket()
    port = closed.getsockname()
    closed.close()
    for side in (native, composed):
        side.sock.connect(port)
        side.sock.send(b"x")
    for side in (native, composed):
        for _ in range(100):  # the ICMP error arrives at once on loopback; allow for a slow one
            assert side.batch.receive(side.udp, side.inner, 1.0) == 0
            if side.table.pmtu_counts != (0, 0):
                break
        assert side.table.pmtu_counts == (0, 1)
        assert side.udp.read_errors() == 0  # nothing left in the queue
    for side in (native, composed):
        probe = udp_socket()
        probe.connect(side.addr)
        side.sock.connect(probe.getsockname())
        probe.send(b"\x09" * 8)  # a datagram of no known type: received, then dropped as malformed
        assert side.batch.receive(side.udp, side.inner, 2.0) == 1
        probe.close()


def test_tun_rounds_in_a_namespace():
    """The rounds through a real TUN with offloads (coalescing on write,
    splitting on read), in a network namespace of the child's own."""
    missing = [tool for tool in ("unshare", "ip", "tc") if shutil.which(tool) is None]
    assert not missing, f"tools needed for the TUN rounds test are missing: {missing} (util-linux, iproute2)"
    child = os.path.join(os.path.dirname(__file__), "rounds_tun_child.py")
    r = subprocess.run(
        ["unshare", "--net", sys.executable, child],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(child))),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_more_datagrams_than_the_batch_holds_are_refused(twins):
    """A socket that reads more per round than the batch holds: received,
    then refused with ValueError before any is opened, on both paths alike."""
    native, composed = twins(batch=8)
    src = udp_socket()
    datagrams_from(src, [native.addr, composed.addr], [message(KEY_AB, 7, c, TO_B[0]) for c in range(6)])
    seen = []
    for side in (native, composed):
        side.batch = side.table.batch(4, 2048)
        with pytest.raises(ValueError):
            side.batch.receive(side.udp, side.inner, 1.0)
        seen.append((side.batch.io.received, side.udp.nbufs, side.batch.n_touched, side.inner_packets()))
    assert seen[0] == seen[1]
    assert seen[0][0] == 6 and seen[0][1] >= 1 and seen[0][2:] == (0, [])
    src.close()
