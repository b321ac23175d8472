"""A vpncrypt daemon with four queues (VPNCRYPT_QUEUES=4: a multi-queue TUN
and four SO_REUSEPORT sockets) against the newest wireguard-go and against
a vpncrypt of one queue: several TCP flows each way and UDP streams at once,
every byte checked (vpncrypt.bench.streamcheck); more than one queue carried
them; the ListenPort changed over the UAPI moves every socket; a persistent
TUN made without multi_queue is a clear startup error.

B is the daemon with four queues.  One peer sends from one UDP port, so
what B receives comes in on one socket (SO_REUSEPORT hashes the outer
addresses); what B sends leaves through the TUN queue the kernel picks for
each inner flow, which is where the queues show.  Two namespaces joined
by a veth (tests/interop/lab.py), removed at the end."""

import contextlib
import json
import os
import signal
import sys
import threading

import pytest

from tests.e2e.conftest import binary
from tests.interop.lab import PORT, Lab

QUEUES = {"VPNCRYPT_QUEUES": "4"}
NEW_PORT = 51977


@pytest.fixture
def lab():
    assert os.geteuid() == 0, "the end-to-end tests run as root"
    with contextlib.closing(Lab()) as lab:  # everything it made removed, whatever happened
        yield lab


def _tunnel(lab, peer_kind, env=QUEUES):
    """A (the peer: "wggo" or "vpncrypt" of one queue) and B (four queues,
    `env` its environment); A has B's endpoint."""
    a = lab.node("A", "wggo" if peer_kind == "wireguard-go" else "vpncrypt")
    if peer_kind == "wireguard-go":
        a.binary = binary("wireguard-go")  # the newest (unstable's)
    b = lab.node("B", "vpncrypt")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}]))
    b.start(b.conf([{"public": a.public, "inner": a.inner}]), env=env)
    a.ping(b)
    return a, b


def _streams(lab, a, b, seed):
    """At once: two TCP flows each way and UDP streams from B (six, each its
    own flow) and from A (one); every byte checked at the receiver."""
    check = (sys.executable, "-m", "vpncrypt.bench.streamcheck")
    jobs = []
    for k, (src, dst, proto, n) in enumerate(
        [(a, b, "tcp", 2 << 20)] * 2
        + [(b, a, "tcp", 2 << 20)] * 2
        + [(b, a, "udp", 400)] * 6
        + [(a, b, "udp", 400)]
    ):
        args = [proto, dst.inner, str(7100 + k), str(n), str(seed + k)]
        recv = lab.popen_in(dst.side, *check, "recv", *args)
        assert "listening" in recv.stdout.readline(), recv.stderr.read()
        jobs.append((src, args, recv))
    errors = []

    def send(src, args):
        try:
            lab.run_in(src.side, *check, "send", *args, timeout=120)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    senders = [threading.Thread(target=send, args=(src, args)) for src, args, _ in jobs]
    for t in senders:
        t.start()
    for t in senders:
        t.join(150)
    assert not errors, errors
    for _src, args, recv in jobs:
        out, err = recv.communicate(timeout=120)
        res = json.loads(out.strip().splitlines()[-1])
        assert res["ok"] and res["corrupt"] == 0 and res["duplicates"] == 0, (args, res, err)
        if args[0] == "tcp":
            assert res["checked"] == int(args[3]) and res["lost"] == 0, (args, res)
        else:
            assert res["lost"] <= 20, (args, res)  # paced: next to nothing lost on a veth
            assert res["reordered"] == 0, (args, res)  # one flow keeps to one queue: in order


def _queues(c):
    """{queue: (received, sent)} from the daemon's per-queue counters `c` (one
    reading: the totals compared with them must come from the same one)."""
    return c.get("queues"), {
        k: (c[f"queue_{k}_rx_packets"], c[f"queue_{k}_tx_packets"]) for k in range(c.get("queues", 0))
    }


def _udp_sockets(lab, side, port):
    """The UDP sockets bound to `port` in the namespace (/proc/net/udp, udp6)."""
    found = 0
    for table in ("udp", "udp6"):
        out = lab.run_in(side, "cat", f"/proc/net/{table}").stdout.splitlines()[1:]
        found += sum(1 for line in out if int(line.split()[1].rsplit(":", 1)[1], 16) == port)
    return found


def _path_drops(node):
    """Drops on the tunnel's path (no_route counts the interface's own IPv6
    multicast chatter, which has no peer)."""
    return {k: v for k, v in node.counters().items() if k.startswith("drop_") and v and k != "drop_no_route"}


@pytest.mark.parametrize("peer_kind", ["wireguard-go", "vpncrypt"])
def test_four_queues_carry_every_byte(lab, peer_kind):
    a, b = _tunnel(lab, peer_kind)
    assert _udp_sockets(lab, "B", PORT) == 4
    _streams(lab, a, b, seed=1)
    c = b.counters()
    n, per_queue = _queues(c)
    assert n == 4, c
    sent_by = [k for k, (_rx, tx) in per_queue.items() if tx]
    assert len(sent_by) > 1, per_queue  # the inner flows were spread over the TUN queues
    assert sum(rx for rx, _tx in per_queue.values()) == c["engine_rx_batch_packets"], (per_queue, c)
    assert sum(tx for _rx, tx in per_queue.values()) == c["engine_tx_batch_packets"], (per_queue, c)
    assert _path_drops(b) == {}, c
    if peer_kind == "vpncrypt":
        assert a.counters().get("queues") is None  # one queue: no per-queue lines
        assert _path_drops(a) == {}, a.counters()


@pytest.mark.parametrize("threads", ["1", "2"])
def test_listen_port_change_moves_every_queue(lab, threads):
    """`wg set IFACE listen-port P` on four queues (their workers on the
    loop, or on threads of their own): all four sockets on P, none left on
    the old port or open, `get` says P, the fwmark set after is on the new
    sockets, and the tunnel carries every byte again over more than one
    queue, the counters going on from where they were."""
    a, b = _tunnel(lab, "vpncrypt", env={**QUEUES, "VPNCRYPT_THREADS": threads})
    first = b.counters()
    first_queues = _queues(first)[1]
    b.wg("set", b.iface, "listen-port", str(NEW_PORT))
    assert b.wg("show", b.iface, "listen-port").stdout.strip() == str(NEW_PORT)
    assert _udp_sockets(lab, "B", NEW_PORT) == 4 and _udp_sockets(lab, "B", PORT) == 0
    assert b.counters()["open_fds"] == first["open_fds"]  # the old sockets closed, nothing more held
    b.wg("set", b.iface, "fwmark", "0x77")
    assert b.wg("show", b.iface, "fwmark").stdout.strip() == "0x77"
    marks = lab.run_in("B", "ss", "-u", "-a", "-n", "-e", "sport", "=", f":{NEW_PORT}").stdout
    assert marks.count("fwmark:0x77") == 4, marks
    a.wg("set", a.iface, "peer", b.public, "endpoint", f"{b.outer}:{NEW_PORT}")
    a.ping(b)
    before = _queues(b.counters())[1]
    _streams(lab, a, b, seed=20)
    last = b.counters()
    after = _queues(last)[1]
    assert len([k for k in after if after[k][1] > before[k][1]]) > 1, (before, after)
    for k in ("engine_rx_batch_packets", "engine_tx_batch_packets"):
        # the queues keep their workers and counters across the change: each
        # queue's count goes on from where it was, and they still add up
        side = k == "engine_tx_batch_packets"
        assert all(after[q][side] >= first_queues[q][side] for q in after), (k, first_queues, after)
        total = sum(after[q][side] for q in after)
        assert last[k] == total and total > first[k], (k, first[k], total, last[k])
    assert _path_drops(b) == {}, b.counters()
    assert b.stop(signal.SIGTERM) == 0
    assert not lab.link_exists("B", b.iface)


def test_a_persistent_single_queue_tun_is_a_clear_error(lab):
    """`ip tuntap add IFACE mode tun` (one queue) and VPNCRYPT_QUEUES=4: the
    daemon exits 1 with one line that says how to make a multi-queue
    device, leaving the device, and no UAPI socket; with one queue it
    attaches and carries traffic."""
    a = lab.node("A", "vpncrypt")
    b = lab.node("B", "vpncrypt")
    lab.run_in("B", "ip", "tuntap", "add", "dev", b.iface, "mode", "tun")
    a.start(a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}]))
    b.write_conf(b.conf([{"public": a.public, "inner": a.inner}]))
    proc = lab.spawn_vpncrypt("B", b.iface, b.conf_path, env=QUEUES, wait_ready=False)
    assert proc.popen.wait(30) == 1, proc.log()
    log = proc.log()
    assert f"cannot open 4 queues on interface {b.iface}" in log and "multi_queue" in log, log
    assert "Traceback" not in log, log
    assert lab.link_exists("B", b.iface) and not os.path.exists(b.sock)
    b.start(b.conf([{"public": a.public, "inner": a.inner}]), env={"VPNCRYPT_QUEUES": "1"})
    a.ping(b)
    assert b.stop(signal.SIGTERM) == 0
    assert lab.link_exists("B", b.iface)  # the administrator's device stays


@pytest.mark.parametrize("queues", ["1", "4"])
def test_socket_drops_survive_a_listen_port_change(lab, queues):
    """Datagrams the kernel dropped at a full receive buffer stay counted
    after `wg set IFACE listen-port P` closed those sockets: the daemon is
    stopped (SIGSTOP) while 20,000 datagrams arrive, more than its buffers
    hold; drop_socket_overflow counts them and never goes back."""
    a, b = _tunnel(lab, "vpncrypt", env={"VPNCRYPT_QUEUES": queues})
    pid = b.proc.popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        flood = (
            "import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for i in range(20000): s.sendto(b'\\x04' + bytes(1400), ({b.outer!r}, {PORT}))\n"
        )
        lab.run_in("A", sys.executable, "-c", flood)
    finally:
        os.kill(pid, signal.SIGCONT)
    before = b.counters()["drop_socket_overflow"]
    assert before > 0, b.counters()
    b.wg("set", b.iface, "listen-port", str(NEW_PORT))
    assert b.wg("show", b.iface, "listen-port").stdout.strip() == str(NEW_PORT)
    assert b.counters()["drop_socket_overflow"] >= before, (before, b.counters())
    assert b.stop(signal.SIGTERM) == 0
