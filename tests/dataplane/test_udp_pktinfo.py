"""Sticky source addresses in the batch UDP I/O: vc_udp_recv_batch_segs
reports each datagram's destination (IP_PKTINFO / IPV6_PKTINFO) as its
endpoint's source, GRO buffers included, and vc_udp_send_batch sends from
it (single datagrams and GSO batches, on a dual-stack IPv6 socket and on an
IPv4 one), or from the address routing picks when the kernel refuses it,
marking those endpoints VC_EP_SRC_REFUSED.

Each test runs in a network namespace of its own (unshare --net) whose lo
holds two IPv4 and two IPv6 addresses: without a source, the kernel answers
a client on 10.9.0.1 from 10.9.0.1 (and one on fd00:aa::1 from fd00:aa::1),
so a datagram from 10.9.0.2 (fd00:aa::2) shows the source was used."""

import itertools
import os
import select
import shutil
import socket
import struct
import subprocess
import sys

from tests.dataplane.offload_helpers import recv_datagrams
from vpncrypt._native import ffi, lib
from vpncrypt.dataplane import UdpBatchSocket
from vpncrypt.endpoints import pack_endpoint
from vpncrypt.sourced import SourcedAddr, source_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UDP_SEGMENT = 103  # <linux/udp.h>
LO = 1  # the loopback interface's index in a new namespace
SRC_SET, SRC_REFUSED = 1, 2  # VC_EP_SRC_SET, VC_EP_SRC_REFUSED (native/vc_io.h)


def in_namespace(child: str) -> None:
    """Run tests.dataplane.test_udp_pktinfo.<child>() under unshare --net."""
    missing = [tool for tool in ("unshare", "ip") if shutil.which(tool) is None]
    assert not missing, f"tools the test needs are missing: {missing} (util-linux, iproute2)"
    r = subprocess.run(
        [
            "unshare",
            "--net",
            sys.executable,
            "-c",
            f"from tests.dataplane.test_udp_pktinfo import {child}; {child}()",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def _setup() -> None:
    def ip(*args):
        subprocess.run(["ip", *args], check=True)

    ip("link", "set", "lo", "up")
    for a in ("10.9.0.1/32", "10.9.0.2/32"):
        ip("address", "add", a, "dev", "lo")
    for a in ("fd00:aa::1/128", "fd00:aa::2/128"):
        ip("address", "add", a, "dev", "lo", "nodad")
    for src, dst in (("10.9.0.1", "10.9.0.2"), ("fd00:aa::1", "fd00:aa::2")):
        _wait_reachable(src, dst)


def _wait_reachable(src, dst):
    """Until a datagram from src reaches dst: a new namespace's lo may drop
    the first IPv6 ones while its addresses settle (seen once in three runs)."""
    rx, tx = _client(dst), _client(src)
    for _ in range(100):
        tx.sendto(b"?", rx.getsockname())
        if select.select([rx], [], [], 0.05)[0]:
            break
    else:
        raise AssertionError(f"{src} never reached {dst}")
    rx.close()
    tx.close()


def _server(dual=True, **kw):
    if dual:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", 0))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", 0))
    return UdpBatchSocket(s, batch=64, **kw)


def _client(host):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def _receive(udp, expect):
    out = []
    for _ in range(50):
        out += recv_datagrams(udp)
        if len(out) >= expect:
            return out
        select.select([udp.sock], [], [], 0.2)
    raise AssertionError(f"{len(out)} of {expect} datagrams")


def _from(client, expect):
    """The (data, sender host) of `expect` datagrams at a client socket."""
    out = []
    for _ in range(expect):
        assert select.select([client], [], [], 2.0)[0], f"{len(out)} of {expect} datagrams"
        data, addr = client.recvfrom(65536)
        out.append((data, addr[0]))
    return out


def _send(udp, datagrams, endpoints):
    """vc_udp_send_batch of [bytes] to [addr] (SourcedAddr: from its source);
    returns (sent, errno, the endpoints' src_set after)."""
    n, lens = len(datagrams), [len(d) for d in datagrams]
    offs = [0, *itertools.accumulate(lens)][:n]
    ep = ffi.new("vc_endpoint[]", n)
    for i, a in enumerate(endpoints):
        ffi.memmove(ep + i, pack_endpoint(a), ffi.sizeof("vc_endpoint"))
    sent, err = udp.send(b"".join(datagrams), ffi.new("uint32_t[]", offs), ffi.new("uint32_t[]", lens), ep, n)
    return sent, err, [ep[i].src_set for i in range(n)]


# ---------------------------------------------------------------- receive


def test_receive_reports_the_destination():
    in_namespace("child_receive")


def child_receive():
    _setup()
    for dual in (True, False):
        srv = _server(dual)
        port = srv.sock.getsockname()[1]
        c4 = _client("10.9.0.1")
        c4.sendto(b"a" * 40, ("10.9.0.2", port))
        c4.sendto(b"b" * 40, ("10.9.0.1", port))
        expect = [("10.9.0.2", LO), ("10.9.0.1", LO)]
        if dual:
            c6 = _client("fd00:aa::1")
            c6.sendto(b"c" * 40, ("fd00:aa::2", port))
            expect.append(("fd00:aa::2", 0))  # a global address: no interface kept
        got = _receive(srv, len(expect))
        assert [source_of(a) for _d, a in got] == expect, got
        assert got[0][1] == ("10.9.0.1", c4.getsockname()[1])
    # without pktinfo there is no source: routing picks
    srv = _server(sticky=False)
    _client("10.9.0.1").sendto(b"x", ("10.9.0.2", srv.sock.getsockname()[1]))
    ((_d, a),) = _receive(srv, 1)
    assert source_of(a) is None and srv.sticky is False
    print("ok")


def test_a_gro_buffer_shares_its_destination():
    in_namespace("child_gro")


def child_gro():
    """A GSO send of 8 segments reaches a UDP_GRO socket as one buffer (one
    control message): each of its datagrams reports the destination."""
    _setup()
    srv = _server()
    assert srv.gro
    c = _client("10.9.0.1")
    c.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 100)
    c.sendto(bytes(range(100)) * 8, ("10.9.0.2", srv.sock.getsockname()[1]))
    got = _receive(srv, 8)
    assert srv.nbufs == 1 and srv.segs[0] == 8
    assert [len(d) for d, _a in got] == [100] * 8
    assert {source_of(a) for _d, a in got} == {("10.9.0.2", LO)}
    print("ok")


# ---------------------------------------------------------------- send


def test_send_leaves_from_the_source():
    in_namespace("child_send")


def child_send():
    _setup()
    for dual in (True, False):
        srv = _server(dual)
        c4 = _client("10.9.0.1")
        to4 = ("10.9.0.1", c4.getsockname()[1])
        # one datagram from each address, then a GSO batch of 10 from the
        # second, then sources alternating (no GSO batch spans two sources)
        sent, err, st = _send(srv, [b"1", b"2"], [SourcedAddr(to4, ("10.9.0.2", LO)), to4])
        assert (sent, err, st) == (2, 0, [SRC_SET, 0])
        assert _from(c4, 2) == [(b"1", "10.9.0.2"), (b"2", "10.9.0.1")]
        batch = [bytes([i]) * 500 for i in range(10)]
        sent, err, _st = _send(srv, batch, [SourcedAddr(to4, ("10.9.0.2", LO))] * 10)
        assert (sent, err) == (10, 0)
        assert _from(c4, 10) == [(d, "10.9.0.2") for d in batch]
        alternate = [SourcedAddr(to4, (f"10.9.0.{1 + i % 2}", LO)) for i in range(6)]
        sent, err, _st = _send(srv, batch[:6], alternate)
        assert (sent, err) == (6, 0)
        assert _from(c4, 6) == [(d, f"10.9.0.{1 + i % 2}") for i, d in enumerate(batch[:6])]
        if dual:
            c6 = _client("fd00:aa::1")
            to6 = ("fd00:aa::1", c6.getsockname()[1])
            sent, err, _st = _send(srv, batch[:4], [SourcedAddr(to6, ("fd00:aa::2", 0))] * 4)
            assert (sent, err) == (4, 0)
            assert _from(c6, 4) == [(d, "fd00:aa::2") for d in batch[:4]]
    print("ok")


def test_a_refused_source_falls_back_to_routing():
    in_namespace("child_refused")


def child_refused():
    """A source the host does not have (removed): the kernel refuses it
    (EINVAL); the datagrams go from the routed address, no error is
    reported, and their endpoints say VC_EP_SRC_REFUSED (the others keep
    theirs)."""
    _setup()
    srv = _server()
    c4, c6 = _client("10.9.0.1"), _client("fd00:aa::1")
    to4, to6 = ("10.9.0.1", c4.getsockname()[1]), ("fd00:aa::1", c6.getsockname()[1])
    gone4, gone6 = SourcedAddr(to4, ("10.9.0.99", LO)), SourcedAddr(to6, ("fd00:aa::99", 0))
    good = SourcedAddr(to4, ("10.9.0.2", LO))
    batch = [bytes([i]) * 300 for i in range(4)]
    eps = [gone4, gone4, good, gone6, gone6]
    sent, err, st = _send(srv, [*batch[:2], b"ok", *batch[2:]], eps)
    assert (sent, err) == (5, 0)
    assert st == [SRC_REFUSED, SRC_REFUSED, SRC_SET, SRC_REFUSED, SRC_REFUSED]
    assert _from(c4, 3) == [(batch[0], "10.9.0.1"), (batch[1], "10.9.0.1"), (b"ok", "10.9.0.2")]
    assert _from(c6, 2) == [(batch[2], "fd00:aa::1"), (batch[3], "fd00:aa::1")]
    print("ok")


def test_endpoint_layout():
    """vc_endpoint is 48 bytes: the peer's 24 (family, source flag, port,
    scope, address), then the source (16 address bytes, interface, pad)."""
    assert ffi.sizeof("vc_endpoint") == 48
    raw = pack_endpoint(SourcedAddr(("192.0.2.1", 51820), ("198.51.100.7", 9)))
    assert raw[:4] == bytes([4, SRC_SET]) + struct.pack("=H", 51820)
    assert raw[24:28] == bytes([198, 51, 100, 7]) and struct.unpack_from("=I", raw, 40) == (9,)
    a, b = ffi.new("vc_endpoint *"), ffi.new("vc_endpoint *")
    ffi.memmove(a, raw, 48)
    ffi.memmove(b, pack_endpoint(("192.0.2.1", 51820)), 48)
    assert not lib.vc_endpoint_equal(a, b)
    a.src_set = SRC_REFUSED  # a refused source counts as none
    assert lib.vc_endpoint_equal(a, b)
