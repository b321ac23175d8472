"""The data plane engine on its own: two devices on real UDP sockets over
127.0.0.1, an in-memory inner side, a real event loop.  On both backends
(native: the session table's batch calls; pynacl: the Device's list form)."""

import asyncio
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Executor, Future

import pytest

from vpncrypt._native import ffi, lib
from vpncrypt.dataplane.engine import Engine
from vpncrypt.dataplane.io import UdpBatchSocket
from vpncrypt.dataplane.sockopts import force_buffers
from vpncrypt.protocol import Device, ProtocolConfig, keys
from vpncrypt.protocol.events import HandshakeCompleted, KeepaliveSent

from tests.packets import checksum, ipv6, tcp
from tests.packets import ipv4 as ipv4_header
from tests.protocol.helpers import ipv4

A_IP, B_IP = "10.0.0.1", "10.0.0.2"


class Inner:
    """The inner side: keeps what the engine delivers."""

    fd = None

    def __init__(self):
        self.packets = []
        self.arrived = asyncio.Event()

    def write(self, buf, off, lens, n):
        self.packets.extend(ffi.buffer(buf + off[i], lens[i])[:] for i in range(n))
        self.arrived.set()
        return n, 0

    def write_packets(self, packets):
        self.packets.extend(packets)
        self.arrived.set()
        return len(packets), 0  # (written, errno), as TunBatch.write_packets


def slab(packets, stride=2048):
    n = len(packets)
    buf = ffi.new("uint8_t[]", max(1, n) * stride)
    off = ffi.new("uint32_t[]", [i * stride for i in range(n)])
    lens = ffi.new("uint32_t[]", [len(p) for p in packets])
    for i, p in enumerate(packets):
        ffi.memmove(buf + i * stride, p, len(p))
    return buf, memoryview(ffi.buffer(buf)), off, lens


class Side:
    def __init__(self, name, backend, loop, seed, batch, timers, threads=1, table_guard=False, **engine_kw):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        self.addr = s.getsockname()
        self.udp = UdpBatchSocket(s, batch=batch, mtu=2048)
        self.dev = Device(
            keys.clamp(random.Random(seed).randbytes(32)),
            backend=backend,
            rng=random.Random(seed + 10).randbytes,
            protocol_config=timers,
        )
        if table_guard:
            self.dev.table = GuardedTable(self.dev.table)
        self.inner = Inner()
        self.events = []
        self.sent_at = []  # (loop time, event)
        self.engine = Engine(
            self.dev,
            self.udp,
            self.inner,
            loop=loop,
            max_packet=2048,
            threads=threads,
            on_events=self._events,
            **engine_kw,
        )
        self.loop = loop

    def _events(self, events):
        self.events.extend(events)
        self.sent_at.extend((self.loop.time(), e) for e in events)

    def send(self, packets):
        buf, view, off, lens = slab(packets)
        self.engine.send_inner(buf, view, off, lens, len(packets))


async def world(backend, batch=64, timers=None, **kw):
    """backend: "native", "pynacl", "native-threads" (the receive side on a
    thread) or "native-hsworkers" (handshake work on two worker threads);
    kw: for each Side."""
    loop = asyncio.get_running_loop()
    threads = 2 if backend.endswith("-threads") else 1
    if backend.endswith("-hsworkers"):
        kw["handshake_threads"] = 2
    backend = backend.split("-")[0]
    a = Side("A", backend, loop, 1, batch, timers, threads, **kw)
    b = Side("B", backend, loop, 2, batch, timers, threads, **kw)
    a.dev.add_peer(b.dev.public_key, allowed_ips=[B_IP + "/32"], endpoint=b.addr)
    b.dev.add_peer(a.dev.public_key, allowed_ips=[A_IP + "/32"])
    a.engine.start()
    b.engine.start()
    return a, b


async def until(cond, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.002)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(params=["native", "native-threads", "pynacl"])
def backend(request):
    return request.param


class GuardedTable:
    """A session table that refuses any access from the engine's module and
    counts its list-form calls (seal/open) from anywhere."""

    def __init__(self, table):
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "list_calls", 0)

    def __getattr__(self, name):
        caller = sys._getframe(1).f_code.co_filename
        if caller.endswith(os.path.join("dataplane", "engine.py")):
            raise AssertionError(f"the engine touched the session table ({name})")
        if name in ("seal", "open"):
            object.__setattr__(self, "list_calls", self.list_calls + 1)
        return getattr(self._table, name)


@pytest.mark.parametrize("backend", ["native", "native-threads", "native-hsworkers", "pynacl"])
def test_handshake_then_data_both_ways(backend):
    """A session: a handshake with packets staged for it, data both ways, a
    keepalive.  On the native backend (issue 19: the Device owns the batch
    interface) the engine cannot reach the session table at all, and nothing
    is sealed or opened in the table's list form: handshake messages,
    staged packets and keepalives take the batch path too."""
    native = backend.startswith("native")

    async def main():
        a, b = await world(backend, timers=ProtocolConfig(keepalive_timeout=0.2), table_guard=native)
        first = [ipv4(A_IP, B_IP, bytes([i]) * 100) for i in range(3)]
        a.send(first)  # staged until the handshake completes
        await until(lambda: len(b.inner.packets) == 3)
        assert b.inner.packets == first
        back = [ipv4(B_IP, A_IP, bytes([i]) * 1400) for i in range(40)]
        b.send(back)
        await until(lambda: len(a.inner.packets) == 40)
        assert a.inner.packets == back
        # with threads=2 a batch's results reach the Device after its packets
        # were written (the receive thread hands them to the loop), so the
        # responder's completion may come a moment after the data
        await until(lambda: any(isinstance(e, HandshakeCompleted) for e in a.events))
        await until(lambda: any(isinstance(e, HandshakeCompleted) for e in b.events))
        # A received data and sends nothing back: it owes B a keepalive
        await until(lambda: any(isinstance(e, KeepaliveSent) for e in a.events))
        for s in (a, b):
            s.engine.stop()
        assert a.dev.drops() == {} and b.dev.drops() == {}
        if native:
            assert a.dev.table.list_calls == 0 and b.dev.table.list_calls == 0

    run(main())


def test_a_burst_past_one_wakeups_rounds_is_delivered_whole(backend):
    """More datagrams at once than one wakeup's rounds take (4 batches of 64
    on the loop, 16 on a worker's thread): the socket object keeps the GRO
    segments past a batch in its own state, which does not make the fd
    readable.  They were once left there until the next datagram came."""

    async def main():
        a, b = await world(backend)
        for s in (a, b):
            force_buffers(s.udp.sock, 8 << 20)
        burst = [ipv4(A_IP, B_IP, i.to_bytes(4, "big") * 150) for i in range(1500)]
        # one call on the loop: all of it sealed and sent before B reads
        await first_then(a, b, burst)

    run(main())


async def first_then(a, b, pkts):
    """One packet from A (its handshake), then `pkts` in one call: B gets
    every one, in order; both engines stop."""
    a.send([ipv4(A_IP, B_IP, b"first")])
    await until(lambda: len(b.inner.packets) == 1)
    a.send(pkts)
    await until(lambda: len(b.inner.packets) == 1 + len(pkts))
    assert b.inner.packets[1:] == pkts
    for s in (a, b):
        s.engine.stop()


def test_a_round_that_ends_a_burst_is_the_last_of_its_turn():
    """Three datagrams waiting on B's socket (A sends them on the same loop,
    before B's reader runs): one receive system call takes them, and the
    turn ends there: the readiness is level-triggered, so no second,
    empty receive is spent to learn that nothing waits (it once was, on
    every turn)."""

    async def main():
        a, b = await world("native")
        a.send([ipv4(A_IP, B_IP, b"first")])  # the handshake
        await until(lambda: len(b.inner.packets) == 1)
        await asyncio.sleep(0.05)  # what the handshake left (B's keepalive) comes and goes
        before = b.udp.state.syscalls
        burst = [ipv4(A_IP, B_IP, bytes([i]) * 200) for i in range(3)]
        a.send(burst)
        await until(lambda: len(b.inner.packets) == 4)
        assert b.inner.packets[1:] == burst
        assert b.udp.state.syscalls - before == 1
        for s in (a, b):
            s.engine.stop()

    run(main())


def test_more_packets_than_a_batch_holds(backend):
    """A batch larger than the engine's arrays is taken in pieces (a larger
    one once overflowed the native arrays)."""

    async def main():
        a, b = await world(backend, batch=2)
        await first_then(a, b, [ipv4(A_IP, B_IP, bytes([i]) * 50) for i in range(9)])

    run(main())


def test_keepalive_deadline_armed_after_a_quick_second_batch(backend):
    """B sends data (a new-handshake deadline 1 s + jitter later), then data
    arrives 2 ms later: B owes a keepalive 0.5 s after it, and sends it then,
    not at the next event (a deadline set shortly after another batch was
    once armed only at the following event, 5 s late)."""
    timers = ProtocolConfig(keepalive_timeout=0.5, rekey_timeout=0.5, rekey_timeout_jitter=0.0)

    async def main():
        loop = asyncio.get_running_loop()
        a, b = await world(backend, timers=timers)
        a.send([ipv4(A_IP, B_IP, b"hello")])
        await until(lambda: len(b.inner.packets) == 1)
        await until(lambda: any(isinstance(e, KeepaliveSent) for e in b.events))  # the first one
        b.events.clear()
        b.sent_at.clear()
        b.send([ipv4(B_IP, A_IP, b"data")])
        await asyncio.sleep(0.002)
        t0 = loop.time()
        a.send([ipv4(A_IP, B_IP, b"more")])
        await until(lambda: len(b.inner.packets) == 2)
        await until(lambda: any(isinstance(e, KeepaliveSent) for _, e in b.sent_at), timeout=3.0)
        at = next(t for t, e in b.sent_at if isinstance(e, KeepaliveSent))
        # due 0.5 s after the data arrived; the new-handshake timer would be 1.0 s
        assert t0 + 0.45 <= at < t0 + 0.9, at - t0
        for s in (a, b):
            s.engine.stop()

    run(main())


def test_handshake_messages_in_a_data_batch_and_roaming(backend):
    """A moves to another socket: its next data roams B's endpoint; B's
    answer goes to the new address."""

    async def main():
        loop = asyncio.get_running_loop()
        a, b = await world(backend)
        a.send([ipv4(A_IP, B_IP, b"1")])
        await until(lambda: len(b.inner.packets) == 1)
        s2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s2.bind(("127.0.0.1", 0))
        udp2 = UdpBatchSocket(s2, batch=64, mtu=2048)
        a.engine.replace_udp(udp2)
        a.udp.sock.close()
        a.send([ipv4(A_IP, B_IP, b"2")])
        await until(lambda: len(b.inner.packets) == 2)
        assert b.dev.peers[a.dev.public_key].endpoint == s2.getsockname()
        b.send([ipv4(B_IP, A_IP, b"back")])
        await until(lambda: len(a.inner.packets) == 1)
        for s in (a, b):
            s.engine.stop()
        del loop

    run(main())


def _teach_path_mtu(table, pid, endpoint, mtu):
    """The table takes `mtu` as the peer's path MTU, as from this host's own
    EMSGSIZE for a datagram to `endpoint` (SO_EE_ORIGIN_LOCAL)."""
    import ipaddress

    e = ffi.new("vc_udp_error *")
    e.ep.family, e.ep.port = 4, endpoint[1]
    ffi.memmove(e.ep.addr, ipaddress.IPv4Address(endpoint[0]).packed, 4)
    e.err, e.info, e.origin = 90, mtu, 1  # EMSGSIZE
    now = table.clock(time.monotonic())
    assert lib.vc_wg_pmtu_learn(table.ptr, e, now) == pid


@pytest.mark.parametrize("backend", ["native", "native-threads"])
def test_packets_above_the_path_mtu(backend):
    """A peer whose path MTU is 1280 (IPv4 endpoint): a 1400-byte packet
    with DF is refused and its sender told "fragmentation needed", next-hop
    MTU 1216 (1280 - 20 - 8 - 32 = 1220, down to a multiple of 16), quoting
    it; one without DF goes in fragments that fit; a TCP segment goes cut
    into segments that fit (its sender told too); an IPv6 packet of 1280
    bytes goes whole (outer fragments are the kernel's)."""

    async def main():
        a, b = await world(backend)
        a.send([ipv4(A_IP, B_IP, b"first")])  # the handshake, then this one
        await until(lambda: len(b.inner.packets) == 1)
        pid = a.dev.peers[b.dev.public_key].pid
        _teach_path_mtu(a.dev.table, pid, b.addr, 1280)
        big = ipv4_header(A_IP, B_IP, bytes(1380), df=True, header_checksum=True)
        a.send([big])
        await until(lambda: len(a.inner.packets) == 1)
        err = a.inner.packets[0]
        assert err[9] == 1 and err[20:22] == bytes([3, 4])  # ICMP, fragmentation needed
        assert int.from_bytes(err[26:28], "big") == 1216  # next-hop MTU
        assert err[12:16] == bytes([10, 0, 0, 2]) and err[16:20] == bytes([10, 0, 0, 1])
        assert err[28:48] == big[:20]  # the packet quoted
        payload = bytes(range(256)) * 5 + bytes(120)
        loose = ipv4_header(A_IP, B_IP, payload, ident=77, header_checksum=True)
        a.send([loose])  # no DF: in fragments (1216 is the most each may be)
        await until(lambda: len(b.inner.packets) == 3)
        frags = b.inner.packets[1:]
        assert [len(f) for f in frags] == [1212, 228]  # 20 + 1192 (8 x 149), 20 + 208
        assert frags[0][20:] + frags[1][20:] == loose[20:]
        assert all(f[4:6] == (77).to_bytes(2, "big") for f in frags)
        assert (frags[0][6:8], frags[1][6:8]) == (b"\x20\x00", (1192 // 8).to_bytes(2, "big"))
        data = bytes(range(256)) * 6  # 1536 bytes: 1176 + 360 at an MSS of 1216 - 40
        seg = tcp(A_IP, B_IP, 40000, 5001, data, seq=1000, flags=0x18, df=True, ident=5)
        a.send([seg])
        await until(lambda: len(b.inner.packets) == 5 and len(a.inner.packets) == 2)
        cut = b.inner.packets[3:]
        assert [len(x) for x in cut] == [1216, 400]
        assert cut[0][40:] + cut[1][40:] == data
        assert int.from_bytes(cut[1][24:28], "big") == 1000 + 1176  # the second one's sequence number
        assert cut[0][33] == 0x10 and cut[1][33] == 0x18  # PSH on the last only
        for x in cut:  # each a valid TCP segment
            assert checksum(_pseudo(x) + x[20:]) == 0
        a.dev.table.route_add(pid, "fd00::2/128")
        b.dev.table.route_add(b.dev.peers[a.dev.public_key].pid, "fd00::1/128")
        v6 = ipv6("fd00::1", "fd00::2", bytes(1240))  # 1280 bytes in all
        a.send([v6])
        await until(lambda: len(b.inner.packets) == 6)
        assert b.inner.packets[5] == v6
        c = a.engine.counters
        assert (c.pmtu_errors_sent, c.pmtu_refit_packets, c.pmtu_refit_pieces) == (2, 2, 4)
        assert a.dev.table.stats(pid, a.dev.table.clock(a.loop.time())).drops == {"packet_too_big": 3}
        for s in (a, b):
            s.engine.stop()

    asyncio.run(main())


def test_a_socket_error_under_uvloop_does_not_stop_the_receive_side():
    """An ICMP error on the daemon's socket (here port unreachable, for a
    datagram to a closed port) makes the kernel report the socket POLLERR
    (IP_RECVERR is on, for the path MTU), and libuv (uvloop) stops
    watching an fd on POLLERR after one last call of its reader: the engine
    watches it again (Engine._rearm).  Without that, everything the peer
    sent afterwards stayed unread in the socket (a TCP transfer stalled
    after its first "fragmentation needed")."""
    import uvloop

    async def main():
        a, b = await world("native")
        a.send([ipv4(A_IP, B_IP, b"first")])
        await until(lambda: len(b.inner.packets) == 1)
        closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()
        closed.close()
        for round_ in range(3):  # each error stops libuv's watch once
            a.udp.sock.sendto(b"\x09" * 8, port)  # answered with ICMP port unreachable
            await until(lambda: a.dev.table.pmtu_counts[1] > round_)  # read from the error queue
            b.send([ipv4(B_IP, A_IP, bytes([round_]) * 100)])
            await until(lambda: len(a.inner.packets) == round_ + 1)
        for s in (a, b):
            s.engine.stop()

    uvloop.run(main())


def _pseudo(p):
    return p[12:20] + bytes([0, 6]) + (len(p) - 20).to_bytes(2, "big")


def test_gso_turned_off_by_a_round_is_logged():
    """A batch of datagrams larger than the outer MTU (loopback at 1280
    bytes, in a network namespace of the child's own): the UDP_SEGMENT send
    is refused (the kernel fragments single datagrams, never GSO segments),
    every datagram still goes, one by one, and the engine says once that
    GSO is off for the socket.  It once never said so: the round turned GSO
    off (its io.gso_off) and the engine did not look."""
    missing = [tool for tool in ("unshare", "ip") if shutil.which(tool) is None]
    assert not missing, f"tools needed for the GSO test are missing: {missing} (util-linux, iproute2)"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(
        [
            "unshare",
            "--net",
            sys.executable,
            "-c",
            "from tests.dataplane.test_engine import gso_child; gso_child()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def gso_child():
    """test_gso_turned_off_by_a_round_is_logged's part in the namespace: on
    the loop and with the data threads."""
    subprocess.run(["ip", "link", "set", "lo", "up", "mtu", "1280"], check=True)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("vpncrypt.dataplane")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    for backend in ("native", "native-threads"):
        records.clear()

        async def main():
            a, b = await world(backend)
            a.send([ipv4(A_IP, B_IP, b"first")])  # the handshake, then this one
            await until(lambda: len(b.inner.packets) == 1)
            assert a.udp.gso, "the kernel offers UDP GSO on loopback"
            # sealed: 1420 + 32 bytes each, past the 1280-byte MTU
            big = [ipv4(A_IP, B_IP, bytes([i]) * 1400) for i in range(8)]
            a.send(big)
            await until(lambda: len(b.inner.packets) == 9)
            assert b.inner.packets[1:] == big
            assert not a.udp.gso
            a.send(big[:2])  # and on without GSO, without another word
            await until(lambda: len(b.inner.packets) == 11)
            for s in (a, b):
                s.engine.stop()
            assert a.engine.counters.tx_dropped == 0

        asyncio.run(main())
        said = [r.getMessage() for r in records if "UDP GSO disabled" in r.getMessage()]
        assert len(said) == 1, (backend, [r.getMessage() for r in records])
    print("ok")


def _stranger_initiations(victim_pub, n):
    """n initiations from a static key the victim does not know, with a valid
    mac1 and no mac2 (what a flood sends)."""
    from vpncrypt.crypto import get_backend
    from vpncrypt.protocol.cookie import CookieState
    from vpncrypt.protocol.noise_ik import wg_create_initiation

    rng = random.Random(99)
    priv = keys.clamp(rng.randbytes(32))
    ss = keys.dh(priv, victim_pub)
    out = []
    for i in range(n):
        body, _ = wg_create_initiation(
            get_backend("native"),
            priv,
            keys.public_from_private(priv),
            victim_pub,
            ss,
            1000 + i,
            keys.clamp(rng.randbytes(32)),
            1_700_000_000.0 + i,
            0.0,
        )
        st = CookieState(victim_pub)
        out.append((st.add_macs(body, 0.0), st))
    return out


@pytest.mark.parametrize("backend", ["native", "native-threads"])
def test_handshake_flood_is_checked_in_c_and_served_in_slices(backend):
    """200 initiations from a stranger reach B at once, with data: the open
    batch queues 127 (under load from 128 waiting) and answers the other 73
    with cookie replies made in C, which the engine sends at once; the
    Device serves the queue in slices of at most 16 messages, one per turn of
    the loop; the established session's data keeps flowing."""

    async def main():
        a, b = await world(backend)
        a.send([ipv4(A_IP, B_IP, b"first")])
        await until(lambda: len(b.inner.packets) == 1)
        slices = []
        serve = b.dev.serve_handshakes

        def spy(now, limit):
            out, left = serve(now, limit)
            slices.append((limit, left))
            return out, left

        b.dev.serve_handshakes = spy
        flood = _stranger_initiations(b.dev.public_key, 200)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        for msg, _ in flood:
            s.sendto(msg, b.addr)
        a.send([ipv4(A_IP, B_IP, b"during")])
        await until(lambda: len(b.inner.packets) == 2)
        await until(lambda: sum(b.dev.drops().get(k, 0) for k in ("unknown_peer", "cookie_sent")) == 200)
        replies = []
        while True:
            try:
                replies.append(s.recv(2048))
            except BlockingIOError:
                if len(replies) == b.dev.drops().get("cookie_sent", 0):
                    break
                await asyncio.sleep(0.002)
        s.close()
        # every reply is a cookie reply the stranger's own code opens (with the
        # receive side on a thread, the loop may serve slices while the thread
        # still queues, so the queue need not reach 128: then there are none)
        by_sender = {m[4:8]: st for m, st in flood}
        assert all(len(r) == 64 and r[:4] == b"\x03\x00\x00\x00" for r in replies)
        from vpncrypt.crypto import get_backend

        assert all(by_sender[r[4:8]].consume_reply(r, 0.0, get_backend("native")) for r in replies)
        if backend == "native":  # one thread: the whole flood is in one readable callback
            assert len(replies) == 73 and b.dev.drops()["unknown_peer"] == 127
        assert slices and all(limit == 16 for limit, _ in slices)
        assert len(slices) >= -(-b.dev.drops()["unknown_peer"] // 16)
        assert b.inner.packets[1] == ipv4(A_IP, B_IP, b"during")
        for side in (a, b):
            side.engine.stop()

    run(main())


class Synchronous(Executor):
    """An executor that runs each call at once, on the caller's thread: the
    handshake workers' path, deterministic."""

    def __init__(self):
        self.calls = 0

    def submit(self, fn, *args, **kwargs):
        self.calls += 1
        f = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:
            f.set_exception(e)
        return f


@pytest.mark.parametrize("workers", ["synchronous", "threads"])
def test_reconnect_storm_served_by_handshake_workers(workers):
    """60 peers reconnect at once, each with two initiations (the older
    first), from one socket, to an engine whose handshake work runs on
    workers: every peer's newest initiation is answered and completes its
    handshake, the 60 it replaced get no response, and the established
    session's data still flows."""
    from vpncrypt.protocol import Output
    from vpncrypt.protocol.events import HandshakeResponded

    async def main():
        loop = asyncio.get_running_loop()
        ex = Synchronous() if workers == "synchronous" else None
        kw = {"handshake_executor": ex} if ex else {"handshake_threads": 2}
        a = Side("A", "native", loop, 1, 64, None, 1, **kw)
        b = Side("B", "native", loop, 2, 64, None, 1, **kw)
        a.dev.add_peer(b.dev.public_key, allowed_ips=[B_IP + "/32"], endpoint=b.addr)
        b.dev.add_peer(a.dev.public_key, allowed_ips=[A_IP + "/32"])
        a.engine.start()
        b.engine.start()
        a.send([ipv4(A_IP, B_IP, b"first")])
        await until(lambda: len(b.inner.packets) == 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        peers = []
        for i in range(60):
            d = Device(
                keys.clamp(random.Random(500 + i).randbytes(32)),
                backend="native",
                rng=random.Random(900 + i).randbytes,
            )
            d.add_peer(b.dev.public_key, endpoint=b.addr)
            b.dev.add_peer(d.public_key)
            peers.append(d)
        sent = []
        for round_ in range(2):
            for d in peers:
                p = d.peers[b.dev.public_key]
                p.last_sent_handshake = float("-inf")
                out = Output()
                d.handshakes.initiate(p, 1000.0, out)
                sent.append(out.datagrams[0][0])
            await asyncio.sleep(0.05)  # past the 16.8 ms timestamp whitening
        by_sender = {m[4:8]: d for m, d in zip(sent[60:], peers)}
        for m in sent:
            s.sendto(m, b.addr)
        a.send([ipv4(A_IP, B_IP, b"during")])
        answered = []
        end = loop.time() + 20
        while len(answered) < 60 or b.dev.drops().get("replay", 0) < 60:
            assert loop.time() < end, (len(answered), b.dev.drops())
            try:
                answered.append(s.recv(2048))
            except BlockingIOError:
                await asyncio.sleep(0.002)
        await asyncio.sleep(0.05)
        while True:
            try:
                answered.append(s.recv(2048))
            except BlockingIOError:
                break
        s.close()
        assert len(answered) == 60 and all(r[0] == 2 for r in answered)
        assert sorted(r[8:12] for r in answered) == sorted(by_sender)  # the newest ones
        for r in answered:
            d = by_sender[r[8:12]]
            d.receive_datagram(r, b.addr, 1000.0)
            assert d.has_session(d.peers[b.dev.public_key])
        storm = {d.public_key for d in peers}
        assert sum(isinstance(e, HandshakeResponded) and e.peer.public_key in storm for e in b.events) == 60
        await until(lambda: len(b.inner.packets) == 2)
        assert b.inner.packets[1] == ipv4(A_IP, B_IP, b"during")
        assert b.dev.drops() == {"replay": 60}
        if ex is not None:
            assert ex.calls >= 120 // 16  # the work went through the executor
        for side in (a, b):
            side.engine.stop()

    run(main())


class QueueInner:
    """One queue of a multi-queue inner side, as a TUN queue looks to a
    worker: an fd that is readable while packets wait (put()), read() in
    batches into a slab of its own, and what the worker writes kept."""

    def __init__(self, batch=64, stride=2048):
        self.fd, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._todo = deque()
        self.batch, self.stride = batch, stride
        self.slab = ffi.new("uint8_t[]", batch * stride)
        self.view = memoryview(ffi.buffer(self.slab))
        self.off = ffi.new("uint32_t[]", [i * stride for i in range(batch)])
        self.len = ffi.new("uint32_t[]", batch)
        self.packets = []

    def put(self, packets):
        with self._lock:
            self._todo.extend(packets)
        os.write(self._w, b"x")

    def read(self):
        with self._lock:
            n = min(self.batch, len(self._todo))
            for i in range(n):
                p = self._todo.popleft()
                self.view[i * self.stride : i * self.stride + len(p)] = p
                self.len[i] = len(p)
            if not self._todo:
                try:
                    while os.read(self.fd, 4096):
                        pass
                except BlockingIOError:
                    pass
        return n, self.view, self.off, self.len

    def write(self, buf, off, lens, n):
        self.packets.extend(ffi.buffer(buf + off[i], lens[i])[:] for i in range(n))
        return n, 0

    def write_packets(self, packets):
        self.packets.extend(packets)

    def twin(self):
        return self  # reads (the sending worker) and writes (the receiving one) touch different fields

    def close(self):
        os.close(self.fd)
        os.close(self._w)


def _flow_packet(src, dst, flow, seq, size=600):
    head = flow.to_bytes(2, "big") + seq.to_bytes(4, "big")
    return ipv4(src, dst, head + bytes([(flow * 31 + seq + i) % 256 for i in range(size - len(head))]))


def _flows(packets):
    """{flow: [seq, ...] in the order they came}; also checks each packet
    byte for byte against the one that was sent."""
    out = {}
    for p in packets:
        flow, seq = int.from_bytes(p[20:22], "big"), int.from_bytes(p[22:26], "big")  # after the IPv4 header
        assert p == _flow_packet(socket.inet_ntoa(p[12:16]), socket.inet_ntoa(p[16:20]), flow, seq), (
            flow,
            seq,
        )
        out.setdefault(flow, []).append(seq)
    return out


def test_four_queues_keep_each_flow_in_order_and_never_reuse_a_nonce():
    """Issue 22's shape: B serves four (SO_REUSEPORT socket, inner queue)
    pairs, each with a receiving and a sending worker on threads of their
    own.  Four sending workers seal for one peer at once: every packet
    arrives once (a nonce used twice would be dropped as a replay), each
    flow in order, every byte as sent.  Four peers send to B: the kernel
    hashes each flow to one socket, and each flow arrives whole and in
    order in one queue."""
    queues, per_flow = 4, 300

    async def main():
        loop = asyncio.get_running_loop()
        socks = []
        for _ in range(queues):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            force_buffers(s, 8 << 20)
            s.bind(("127.0.0.1", socks[0].getsockname()[1] if socks else 0))
            socks.append(s)
        port = socks[0].getsockname()[1]
        inners = [QueueInner() for _ in range(queues)]
        udps = [UdpBatchSocket(s, batch=64, mtu=2048) for s in socks]
        b_dev = Device(keys.clamp(random.Random(50).randbytes(32)), rng=random.Random(51).randbytes)
        b = Engine(
            b_dev,
            udps[0],
            inners[0],
            loop=loop,
            max_packet=2048,
            threads=2,
            queues=list(zip(udps, inners))[1:],
        )
        peers = []  # Side A1..A4, each at 10.0.1.k
        for k in range(1, queues + 1):
            a = Side(f"A{k}", "native", loop, 100 + k, 64, None)
            force_buffers(a.udp.sock, 8 << 20)  # four senders at once, one reader on a loop
            a.dev.add_peer(b_dev.public_key, allowed_ips=["10.0.0.0/24"], endpoint=("127.0.0.1", port))
            b_dev.add_peer(a.dev.public_key, allowed_ips=[f"10.0.1.{k}/32"])
            peers.append(a)
        b.start()
        for a in peers:
            a.engine.start()
        try:
            # a handshake for each peer: its first packet waits for it
            for k, a in enumerate(peers, 1):
                a.send([_flow_packet(f"10.0.1.{k}", "10.0.0.2", 99, 0)])
            await until(lambda: sum(len(q.packets) for q in inners) == queues, timeout=10)
            # B -> A1 from the four sending workers at once, a flow each
            for q, inner in enumerate(inners):
                inner.put([_flow_packet("10.0.0.2", "10.0.1.1", q, i) for i in range(per_flow)])
            a1 = peers[0]
            await until(lambda: len(a1.inner.packets) == queues * per_flow, timeout=20)
            got = _flows(a1.inner.packets)
            assert got == {q: list(range(per_flow)) for q in range(queues)}
            assert a1.dev.drops() == {}  # no replay: no nonce was used twice
            # A1..A4 -> B: each flow whole, in order, in one queue
            for k, a in enumerate(peers, 1):
                a.send([_flow_packet(f"10.0.1.{k}", "10.0.0.2", k, i) for i in range(per_flow)])
            await until(lambda: sum(len(q.packets) for q in inners) == queues * (per_flow + 1), timeout=20)
            for k in range(1, queues + 1):
                holders = [_flows(q.packets).get(k) for q in inners]
                assert [h for h in holders if h] == [list(range(per_flow))], k
            assert b_dev.drops() == {}
            c = b.counters
            assert c.rx_batch_packets >= queues * per_flow and c.tx_batch_packets == queues * per_flow
        finally:
            for s in peers:
                s.engine.stop()
            b.stop()
            for inner in inners:
                inner.close()
            for s in socks:
                s.close()

    run(main())


def test_a_turn_on_the_loop_takes_at_most_four_rounds():
    """With threads=1 both directions and the timers share the loop: a
    readable fd gets at most 4 rounds a turn, then the loop's other callbacks
    run.  (It got 16, 2-3 ms of opening or sealing at full speed, while an ACK
    or a ping's reply waited in the other direction's socket.)"""

    async def main():
        a, b = await world("native")
        for s in (a, b):
            force_buffers(s.udp.sock, 8 << 20)
        a.send([ipv4(A_IP, B_IP, b"first")])  # the handshake
        await until(lambda: len(b.inner.packets) == 1)
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        log = []
        w = b.engine.rx
        rounds = w.rounds

        def counted(now, k):
            n = rounds(now, k)
            log.append(w.path.rounds)
            return n

        def tick():  # once a turn of the loop, while B takes the burst
            log.append("turn")
            if len(b.inner.packets) < 1501:
                loop.call_soon(tick)

        w.rounds = counted
        burst = [ipv4(A_IP, B_IP, i.to_bytes(4, "big") * 150) for i in range(1500)]
        a.send(burst)  # sealed and sent in this call: 24 batches of 64 wait for B
        loop.call_soon(tick)
        await until(lambda: len(b.inner.packets) == 1501)
        assert b.inner.packets[1:] == burst
        between, per_turn = 0, []
        for x in log:
            if x == "turn":
                per_turn.append(between)
                between = 0
            else:
                between += x
        per_turn.append(between)
        assert sum(per_turn) >= 24
        assert max(per_turn) == 4, per_turn
        for s in (a, b):
            s.engine.stop()

    run(main())
