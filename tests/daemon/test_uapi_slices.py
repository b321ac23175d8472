"""Big UAPI requests never hold the event loop, which carries the data plane
(issue 17, F4): a set=1 body is parsed on a worker thread and applied in
slices, a get=1 answer is read and written in slices; requests stay one at a
time, so another client sees a request whole or not at all, and the answers
are what they were.  The debug trace of one request costs what the request
holds, not what the peers already have.

The slices are counted here, never timed: each server runs with
slice_seconds=0, so it lets the loop run after every piece of work.  How
long the loop is held is measured by the benchmark (python3 -m
tests.benchlab.uapi_load)."""

import asyncio
import errno
import ipaddress
import logging
import os
import secrets
import socket
import subprocess
import threading

import pytest

from tests.daemon.fakes import FakeControl, stub_host, uapi_server
from vpncrypt.daemon import uapi, uapi_framing
from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.daemon.control import ControlError, InterfaceSnapshot, PeerSnapshot
from vpncrypt.daemon.uapiclient import parse_get, read_answer, request
from vpncrypt.protocol import keys

PRIV = bytes(range(1, 33))
PSK = bytes([0x42] * 32)


def _pub(n: int) -> bytes:
    return keys.public_from_private(bytes([5, n % 256, n // 256 % 256, n // 65536] + [5] * 28))


@pytest.fixture
def host():
    with stub_host(PRIV) as h:
        yield h


@pytest.fixture
def served(loop_thread, host, tmp_path):
    """A UAPI server over a real Device that lets the loop run after every
    piece of work (slice_seconds=0)."""
    path = str(tmp_path / "slices.sock")
    control = DeviceControl(host)
    with uapi_server(loop_thread, path, control, slice_seconds=0.0) as server:
        yield path, control, server


def _nets(n, base=10):
    return [f"{base}.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}/32" for i in range(n)]


# ---------------------------------------------------------------- set=1


def test_set_is_applied_in_slices_and_whole_to_other_clients(served, host):
    path, control, server = served
    big = _pub(1)
    n = 12_000  # a dozen steps of the table's work at least
    body = f"set=1\npublic_key={big.hex()}\n" + "".join(f"allowed_ip={a}\n" for a in _nets(n))
    body += f"public_key={_pub(2).hex()}\nallowed_ip=192.168.0.0/16\n"
    before = request(path, "get=1")
    answers, done = [], threading.Event()

    def reader():
        while True:  # at least one, however the threads are scheduled
            answers.append(request(path, "get=1", timeout=30))
            if done.is_set():
                return

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert request(path, body, timeout=60) == "errno=0\n\n"
    finally:
        done.set()
        t.join(30)
    after = request(path, "get=1")
    assert len(parse_get(after)["peers"]) == 2
    assert len(parse_get(after)["peers"][0]["allowed_ips"]) == n
    # every answer read meanwhile is the device before or after, never between
    assert answers and set(answers) <= {before, after}
    assert server.yields >= n // 1024  # the loop ran between the pieces


def _watch_parse(monkeypatch, probe) -> list:
    """What probe() says each time the server parses a set body."""
    seen = []
    real = uapi.parse_set

    def parse(text):
        seen.append(probe())
        return real(text)

    monkeypatch.setattr(uapi, "parse_set", parse)
    return seen


def test_set_is_parsed_off_the_event_loop(served, loop_thread, monkeypatch):
    path, _, _ = served
    threads = _watch_parse(monkeypatch, threading.get_ident)
    assert request(path, f"set=1\npublic_key={_pub(3).hex()}\n") == "errno=0\n\n"
    assert threads and loop_thread.thread.ident not in threads


def test_a_refused_set_changes_nothing_even_after_slices(served, host):
    # the last line is wrong: nothing of the 5,000 networks before it is applied
    path, _, _ = served
    body = (
        f"set=1\npublic_key={_pub(4).hex()}\n"
        + "".join(f"allowed_ip={a}\n" for a in _nets(5000))
        + "allowed_ip=10.0.0.0/33\n"
    )
    assert request(path, body) == "errno=-22\n\n"
    assert host.device.peers == {}


def test_reload_waits_for_another_time_while_a_request_is_applied(host):
    """daemon.reload() calls apply_operations on the loop: between two slices
    of a UAPI request it is refused (EBUSY), not mixed into it."""
    control = DeviceControl(host)
    seen = []

    class Probe(DeviceControl):
        def upsert_peer_steps(self, update):
            for step in super().upsert_peer_steps(update):
                try:
                    uapi.apply_operations([], self)
                except ControlError as e:
                    seen.append(e.errno)
                yield step

    probe = Probe(host)
    ops = uapi.prepare_operations(
        uapi.parse_set(f"public_key={_pub(5).hex()}\n" + "".join(f"allowed_ip={a}\n" for a in _nets(3000))),
        probe,
    )
    asyncio.run(uapi.apply_operations_async(ops, probe, slice_seconds=0.0))
    assert seen and set(seen) == {errno.EBUSY}
    assert not probe.busy and not control.busy
    uapi.apply_operations([], probe)  # and accepted again once done


# ---------------------------------------------------------------- the debug trace


class _CountingRoutes:
    """Counts the allowed IPs the table lists (what the trace reads)."""

    def __init__(self, table):
        self.listed = 0
        self._routes = table.routes

    def __call__(self, pid, **kw):
        out = self._routes(pid, **kw)
        self.listed += len(out)
        return out


@pytest.mark.parametrize("replace", [False, True], ids=["append", "replace"])
def test_debug_trace_of_repeated_blocks_is_linear(host, caplog, replace):
    """2,000, 4,000 and 8,000 blocks `public_key=X allowed_ip=...` took 5.4,
    20.5 and 78 s at debug level: each block listed all the peer had.  Now
    a block reads at most what it replaces."""
    control = DeviceControl(host)
    pub, n = _pub(6), 400
    counter = host.device.table.routes = _CountingRoutes(host.device.table)
    extra = "replace_allowed_ips=true\n" if replace else ""
    body = f"public_key={pub.hex()}\n" + "".join(
        f"public_key={pub.hex()}\n{extra}allowed_ip={a}\n" for a in _nets(n)
    )
    with caplog.at_level(logging.DEBUG, logger="vpncrypt.daemon"):
        assert uapi.handle_request("set=1", body, control) == b"errno=0\n\n"
    assert counter.listed <= 2 * n, counter.listed  # was about n * n
    lines = [r.getMessage() for r in caplog.records if "allowed IPs" in r.getMessage()]
    if replace:
        assert len(host.device.peers[pub].allowed_ips) == 1
        assert lines[-1].endswith(f"allowed IPs {_nets(n)[-1]}")
    else:
        assert len(host.device.peers[pub].allowed_ips) == n
        assert lines[-1].endswith(f"allowed IPs added: {_nets(n)[-1]}")
    assert len(lines) == n  # one for each block


def test_debug_trace_shows_twenty_and_a_count(host, caplog):
    control = DeviceControl(host)
    pub = _pub(7)
    uapi.handle_request("set=1", f"public_key={pub.hex()}\nallowed_ip=10.9.0.0/16\n", control)
    body = f"public_key={pub.hex()}\nreplace_allowed_ips=true\n" + "".join(
        f"allowed_ip={a}\n" for a in reversed(_nets(30))
    )
    with caplog.at_level(logging.DEBUG, logger="vpncrypt.daemon"):
        assert uapi.handle_request("set=1", body, control) == b"errno=0\n\n"
    line = next(r.getMessage() for r in caplog.records if "allowed IPs" in r.getMessage())
    shown = sorted(_nets(30))[:20]
    assert line.endswith("allowed IPs " + ", ".join(shown) + ", ... (30 in all)"), line


# ---------------------------------------------------------------- get=1


def _expected_get(dev, listen_port) -> str:
    """The answer as the table and the peers hold it, written out here."""
    out = [f"private_key={dev.private_key.hex()}", f"listen_port={listen_port}"]
    for p in dev.peers.values():
        st = p.stats(0.0)
        out.append(f"public_key={p.public_key.hex()}")
        if p.preshared_key:
            out.append(f"preshared_key={p.preshared_key.hex()}")
        out.append("protocol_version=1")
        if st.endpoint is not None:
            host, port = st.endpoint[0], st.endpoint[1]
            scope = st.endpoint[3] if len(st.endpoint) > 3 else 0
            if ":" in host:
                host = f"[{host}%{scope}]" if scope else f"[{host}]"
            out.append(f"endpoint={host}:{port}")
        out += [
            "last_handshake_time_sec=0",
            "last_handshake_time_nsec=0",
            "tx_bytes=0",
            "rx_bytes=0",
            f"persistent_keepalive_interval={p.persistent_keepalive}",
        ]
        out += [f"allowed_ip={a}" for a in dev.table.routes(p.pid, text=True)]
    return "\n".join(out) + "\nerrno=0\n\n"


def _fill(dev, peers=300, big=5000):
    lo = socket.if_nametoindex("lo")
    for i in range(peers):
        ep = (
            ("192.0.2.9", 1000 + i)
            if i % 3 == 0
            else ("2001:db8::9", 2000 + i)
            if i % 3 == 1
            else ("fe80::9", 3000 + i, 0, lo)
        )
        dev.add_peer(
            _pub(100 + i),
            preshared_key=PSK if i % 2 else None,
            allowed_ips=[
                ipaddress.ip_network(f"10.200.{i // 256}.{i % 256}/32"),
                ipaddress.ip_network(f"fd00::{i:x}/128"),
            ],
            endpoint=ep,
            persistent_keepalive=i % 30,
        )
    nets = [ipaddress.ip_network(a) for a in _nets(big // 2, base=11)]
    nets += [ipaddress.ip_network(f"fd01::{i:x}:0/112") for i in range(big - big // 2)]
    dev.add_peer(_pub(99), allowed_ips=nets)


def test_get_in_slices_is_the_device(served, host):
    path, control, server = served
    _fill(host.device)
    yields = server.yields
    answer = request(path, "get=1", timeout=60)
    assert answer == _expected_get(host.device, host.listen_port)
    assert answer == uapi.handle_request("get=1", "", control).decode()
    assert server.yields - yields >= 5000 // 1024  # the big peer alone takes several
    dev = parse_get(answer)
    assert len(dev["peers"]) == 301 and len(dev["peers"][-1]["allowed_ips"]) == 5000


def test_wg_reads_an_answer_written_in_slices(loop_thread, host, wg_tool):
    assert os.geteuid() == 0, "the UAPI tests need root to create /var/run/wireguard"
    name = "vct" + secrets.token_hex(4)
    with uapi_server(loop_thread, uapi.socket_path(name), DeviceControl(host), slice_seconds=0.0):
        _fill(host.device)
        dump = subprocess.run([wg_tool, "show", name, "dump"], capture_output=True, text=True, timeout=60)
        assert dump.returncode == 0, dump.stderr
        rows = dump.stdout.splitlines()
        assert len(rows) == 1 + 301
        big = next(r for r in rows if r.startswith(keys.encode(_pub(99))))
        assert len(big.split("\t")[3].split(",")) == 5000


def test_a_get_that_fails_midway_ends_in_its_errno(loop_thread, tmp_path):
    """Lines already written, then the device fails: the answer ends in
    errno=-5 (the client sees the request fail), with no blank line before."""

    class Failing(FakeControl):
        def snapshot_parts(self, *, counters=True):
            yield InterfaceSnapshot(listen_port=7)
            yield [PeerSnapshot(public_key=bytes(32))]
            raise RuntimeError("the device went away")

    path = str(tmp_path / "f.sock")
    with uapi_server(loop_thread, path, Failing(), slice_seconds=0.0):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(path)
            s.sendall(b"get=1\n\n")
            answer = read_answer(s)
        assert answer.startswith(b"listen_port=7\npublic_key=" + b"00" * 32 + b"\n")
        assert answer.endswith(b"\nerrno=-5\n\n") and answer.count(b"\n\n") == 1


@pytest.mark.parametrize(
    "addr",
    [
        ("192.0.2.1", 1),
        ("192.0.2.1", 65535),
        ("2001:db8::1", 51820),
        ("fe80::1", 7, 0, 2),
        ("fe80::1", 7, 0, 4294967295),
        ("::ffff:192.0.2.9", 9),
        ("::", 1),
    ],
)
def test_packed_endpoint_text_is_the_tuple_text(addr):
    from vpncrypt.endpoints import format_endpoint, format_packed_endpoint, pack_endpoint, unpack_endpoint

    raw = pack_endpoint(addr)
    assert format_packed_endpoint(raw) == format_endpoint(unpack_endpoint(raw))


def test_get_formats_one_piece_per_slice(served, host, monkeypatch):
    """With slice_seconds=0 the loop runs after every piece of the answer:
    a peer with 20,000 allowed IPs is never formatted whole in one slice."""
    path, control, server = served
    host.device.add_peer(_pub(98), allowed_ips=[ipaddress.ip_network(a) for a in _nets(20_000)])
    events = []
    real_pieces, real_pause = uapi.format_pieces, server._pause

    def pieces(peers):
        for piece in real_pieces(peers):
            events.append(piece.count("\n"))
            yield piece

    async def pause():
        events.append("pause")
        await real_pause()

    monkeypatch.setattr(uapi, "format_pieces", pieces)
    monkeypatch.setattr(server, "_pause", pause)
    answer = request(path, "get=1", timeout=60)
    assert answer.count("\nallowed_ip=") == 20_000
    lines_between = [0]
    for e in events:
        if e == "pause":
            lines_between.append(0)
        else:
            lines_between[-1] += e
    assert max(lines_between) <= 4096, max(lines_between)


def test_get_of_many_middling_peers_is_cut_by_lines(served, host, monkeypatch):
    """Peers of 1,000 allowed IPs each (under a big peer's threshold): parts
    and pieces are cut by the lines they hold, not only by peers."""
    path, control, server = served
    for i in range(12):
        host.device.add_peer(
            _pub(200 + i),
            allowed_ips=[ipaddress.ip_network(f"10.{100 + i}.{k // 256}.{k % 256}/32") for k in range(1000)],
        )
    sizes = []
    real = uapi.format_pieces

    def pieces(peers):
        for piece in real(peers):
            sizes.append(piece.count("\n"))
            yield piece

    monkeypatch.setattr(uapi, "format_pieces", pieces)
    answer = request(path, "get=1", timeout=60)
    assert answer.count("\nallowed_ip=") == 12_000
    assert max(sizes) <= 4096 + 1010, sizes  # a piece ends past 4,096 lines by a peer at most
    assert len(sizes) >= 12_000 // 5000


def test_exclusive_holds_off_requests(served, loop_thread):
    """UAPIServer.exclusive(): what the reload can take so that it never meets
    a request in slices; a request sent meanwhile is answered after it."""
    path, control, server = served
    order = []
    client = threading.Thread(target=lambda: order.append(request(path, "get=1", timeout=10)))

    async def hold():
        async with server.exclusive():
            order.append("held")
            client.start()
            await asyncio.sleep(0.2)  # (the request arrives meanwhile, or after)
            order.append("released")

    loop_thread.run(hold())
    client.join(10)
    assert order[:2] == ["held", "released"] and order[2].endswith("errno=0\n\n")


def test_big_set_is_parsed_with_the_cyclic_collector_paused(served, monkeypatch):
    """A full collection over a million networks held the interpreter (and
    the data plane) for about a second; a body of 1 MiB or more is parsed
    and applied with the cyclic collector paused, which resumes after, and
    with a shorter switch interval."""
    import gc
    import sys

    path, _, _ = served
    seen = _watch_parse(monkeypatch, lambda: (gc.isenabled(), sys.getswitchinterval()))
    assert gc.isenabled()
    interval = sys.getswitchinterval()
    big = f"set=1\npublic_key={_pub(8).hex()}\n" + "".join(
        f"allowed_ip={a}\n" for a in _nets(60_000)
    )  # 1.4 MB
    assert len(big) > 1 << 20
    assert request(path, big, timeout=60) == "errno=0\n\n"
    assert request(path, f"set=1\npublic_key={_pub(9).hex()}\n") == "errno=0\n\n"
    # and the interpreter lock passes to the loop thread sooner meanwhile
    assert [on for on, _ in seen] == [False, True] and gc.isenabled()
    assert seen[0][1] < interval and seen[1][1] == interval == sys.getswitchinterval()


class _LibProxy:
    """vpncrypt._native.lib, recording the thread of each route listing that
    fills a buffer of more than 1,024 entries."""

    def __init__(self, lib, calls):
        self._lib, self._calls = lib, calls

    def __getattr__(self, name):
        attr = getattr(self._lib, name)
        if name != "vc_wg_route_list":
            return attr

        def listing(table, pid, buf, cap):
            if cap > 1024:
                self._calls.append(threading.get_ident())
            return attr(table, pid, buf, cap)

        return listing


def test_a_big_listing_runs_off_the_event_loop(served, host, loop_thread, monkeypatch):
    import vpncrypt._native as native

    path, _, _ = served
    host.device.add_peer(_pub(97), allowed_ips=[ipaddress.ip_network(a) for a in _nets(3000)])
    calls = []
    monkeypatch.setattr(native, "lib", _LibProxy(native.lib, calls))
    answer = request(path, "get=1", timeout=60)
    assert answer.count("\nallowed_ip=") == 3000
    assert calls and loop_thread.thread.ident not in calls


def test_reading_a_buffered_body_lets_the_loop_run():
    """Lines already in the buffer are read without waiting: a body of
    10,000 of them pauses on the way (a callback scheduled before runs
    before the body is read)."""

    async def main():
        reader = asyncio.StreamReader()
        reader.feed_data(b"allowed_ip=10.0.0.0/8\n" * 10_000 + b"\n")
        ran = []
        asyncio.get_running_loop().call_soon(ran.append, "loop")
        body = await uapi_framing.read_body(reader)
        return list(ran), body  # as it was when the body was read

    ran, body = asyncio.run(main())
    assert body.count(b"\n") == 10_000 and ran == ["loop"]


def test_get_is_read_with_the_cyclic_collector_paused(served, host, loop_thread, monkeypatch):
    """Each PeerSnapshot of a get made the collector run, over every peer of
    the device: a third of the time of a get of 50,000."""
    import gc

    path, control, _ = served
    _fill(host.device, peers=20, big=0)
    seen = []
    real = DeviceControl.snapshot_parts

    def parts(self, **kw):
        for part in real(self, **kw):
            seen.append(gc.isenabled())
            yield part

    monkeypatch.setattr(DeviceControl, "snapshot_parts", parts)
    assert request(path, "get=1").endswith("errno=0\n\n")
    # the answer can arrive before the server's task has finished its step
    loop_thread.run(asyncio.sleep(0))
    assert seen and not any(seen) and gc.isenabled()


def test_a_get_during_a_big_set_is_answered_from_the_device_before_it(served, host, monkeypatch):
    """Issue 31 item 9: a 100,000-peer setconf held every other client's get
    (`wg show IFACE listen-port` too) until it was applied, 5.9 s.  Here the
    set stops halfway until the get is answered: the get is answered
    meanwhile (it waited for the set before: it never was), and with the
    device as it was before the set, not half of it."""
    path, _, server = served
    assert request(path, f"set=1\nlisten_port=0\npublic_key={_pub(40).hex()}\nallowed_ip=10.9.0.0/16\n") == (
        "errno=0\n\n"
    )
    before = request(path, "get=1")
    halfway, go_on = threading.Event(), threading.Event()
    real = uapi.apply_operations_async

    async def gated(ops, control, **kw):
        n = await real(ops[: len(ops) // 2], control, **kw)
        halfway.set()
        while not go_on.is_set():  # the loop runs meanwhile
            await asyncio.sleep(0.01)
        return n + await real(ops[len(ops) // 2 :], control, **kw)

    monkeypatch.setattr(uapi, "apply_operations_async", gated)
    # 3,000 peers (more work than a set applied before a get is answered)
    body = "set=1\nreplace_peers=true\n" + "".join(
        f"public_key={_pub(100 + i).hex()}\nallowed_ip={a}\n" for i, a in enumerate(_nets(3000))
    )
    answer = []
    setter = threading.Thread(target=lambda: answer.append(request(path, body, timeout=120)))
    setter.start()
    try:
        assert halfway.wait(60)
        assert len(host.device.peers) > 1  # half of the set is in the device
        during = request(path, "get=1", timeout=30)
    finally:
        go_on.set()
        setter.join(120)
    assert during == before
    assert answer == ["errno=0\n\n"]
    assert len(parse_get(request(path, "get=1"))["peers"]) == 3000


def test_a_get_vpncrypt_during_a_big_set_waits_for_it_and_frees_the_lock(served, host, monkeypatch):
    """get=vpncrypt reads its drop counters live, so it waits for a set and
    answers with the whole of it, never half; and it takes the lock it
    gives back (it gave back a lock it never took: RuntimeError in the log
    on every `vpncrypt show`, and during a set, the set's own lock)."""
    path, _, server = served
    halfway, go_on = threading.Event(), threading.Event()
    real = uapi.apply_operations_async

    async def gated(ops, control, **kw):
        n = await real(ops[: len(ops) // 2], control, **kw)
        halfway.set()
        while not go_on.is_set():
            await asyncio.sleep(0.01)
        return n + await real(ops[len(ops) // 2 :], control, **kw)

    monkeypatch.setattr(uapi, "apply_operations_async", gated)
    body = "set=1\nreplace_peers=true\n" + "".join(
        f"public_key={_pub(100 + i).hex()}\nallowed_ip={a}\n" for i, a in enumerate(_nets(3000))
    )
    answers: list = []
    setter = threading.Thread(target=lambda: answers.append(request(path, body, timeout=120)))
    setter.start()
    got: list = []
    try:
        assert halfway.wait(60)
        getter = threading.Thread(target=lambda: got.append(request(path, "get=vpncrypt", timeout=60)))
        getter.start()
        getter.join(1.0)
        assert not got, "get=vpncrypt was answered from half of a set"
    finally:
        go_on.set()
        setter.join(120)
    getter.join(60)
    assert answers == ["errno=0\n\n"]
    assert len(parse_get(got[0])["peers"]) == 3000
    assert not server._lock.locked()
    assert len(parse_get(request(path, "get=vpncrypt"))["peers"]) == 3000
