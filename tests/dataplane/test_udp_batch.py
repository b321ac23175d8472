"""Batch UDP I/O: vc_udp_recv_batch / vc_udp_send_batch and UdpBatchSocket."""

import errno
import select
import socket

import pytest

from tests.dataplane.offload_helpers import recv_datagrams
from vpncrypt._native import ffi, lib
from vpncrypt.dataplane import UdpBatchSocket, endpoint_from_addr, endpoint_to_addr
from vpncrypt.dataplane.sockopts import force_buffers

HAVE_V6 = socket.has_ipv6
try:
    _s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    _s.bind(("::1", 0))
    _s.close()
except OSError:
    HAVE_V6 = False


def udp(family=socket.AF_INET, host="127.0.0.1", dual=False):
    s = socket.socket(family, socket.SOCK_DGRAM)
    if dual:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    force_buffers(s, 16 << 20)
    s.bind((host, 0))
    s.setblocking(False)
    return s


def payload(i, n):
    return bytes((i * 7 + j) & 0xFF for j in range(n)) if n else b""


def wait_readable(s, timeout=1.0):
    select.select([s], [], [], timeout)


def recv_all(rx, expect, rounds=200):
    """Receive until `expect` datagrams arrived (or nothing more comes)."""
    out = []
    for _ in range(rounds):
        got = recv_datagrams(rx)
        out += got
        if len(out) >= expect:
            break
        if not got:
            wait_readable(rx.sock, 0.2)
    return out


def addr_of(s):
    a = s.getsockname()
    return (a[0], a[1])


def norm(addr):
    return (addr[0], addr[1])


SIZES = {
    "equal": [1200] * 150,
    "mixed": [(i * 137) % 1400 + 1 for i in range(150)],
    "runs": [1000] * 10 + [400] + [1000] * 70 + [999, 1000, 1000, 0, 5, 5, 5] + [1400] * 60,
}


@pytest.mark.parametrize("fam", ["v4", "v6", "dual"])
@pytest.mark.parametrize("gso", [False, True])
@pytest.mark.parametrize("gro", [False, True])
@pytest.mark.parametrize("sizes", sorted(SIZES))
def test_roundtrip(fam, gso, gro, sizes):
    assert fam == "v4" or HAVE_V6, "this machine has no IPv6 loopback"
    if fam == "v4":
        a, b = udp(), udp()
    elif fam == "v6":
        a, b = udp(socket.AF_INET6, "::1"), udp(socket.AF_INET6, "::1")
    else:  # dual-stack receiver, v4 sender; and the dual-stack socket sends back to v4
        a, b = udp(), udp(socket.AF_INET6, "::", dual=True)
    try:
        tx = UdpBatchSocket(a, batch=64, gro=False, gso=gso, mtu=1500)
        rx = UdpBatchSocket(b, batch=64, gro=gro, gso=False, mtu=1500)
        dst = ("127.0.0.1", addr_of(b)[1]) if fam == "dual" else addr_of(b)
        data = [payload(i, n) for i, n in enumerate(SIZES[sizes])]
        sent, err = tx.send_datagrams([(d, dst) for d in data])
        assert (sent, err) == (len(data), 0)
        got = recv_all(rx, len(data))
        assert [len(g[0]) for g in got] == [len(d) for d in data]
        assert [g[0] for g in got] == data
        assert {norm(g[1]) for g in got} == {addr_of(a)}
        assert rx.dropped == 0
        assert rx.recv()[0] == 0
        if fam == "dual":  # v4 endpoint from a dual-stack socket: v4-mapped on the wire
            back = UdpBatchSocket(b, batch=8, gro=False, gso=gso, mtu=1500)
            assert back.send_datagrams([(d, addr_of(a)) for d in data[:20]]) == (20, 0)
            a.setblocking(False)
            for d in data[:20]:
                wait_readable(a)
                m, src = a.recvfrom(2000)
                assert m == d and src[1] == addr_of(b)[1]
    finally:
        a.close()
        b.close()


def gso_groups(lens, eps=None):
    """Expected super-datagram sizes for a send batch (the documented rules)."""
    groups, i = [], 0
    while i < len(lens):
        g, seg, total = 1, lens[i], lens[i]
        if seg > 0:
            while i + g < len(lens) and g < 64:
                n = lens[i + g]
                if n == 0 or n > seg or total + n > 65000:
                    break
                if eps and eps[i + g] != eps[i]:
                    break
                total += n
                g += 1
                if n < seg:
                    break
        groups.append(g)
        i += g
    return groups


@pytest.mark.parametrize(
    "lens",
    [
        [100] * 200,  # 64-segment cap: 64, 64, 64, 8
        [1400] * 100,  # byte cap: 46 per super-datagram
        [100] * 5 + [50] + [100] * 3 + [101, 101],  # shorter ends a run; longer starts one
        [300, 300, 0, 300, 300, 200, 200],
    ],
)
def test_gso_runs_seen_by_gro(lens):
    a, b = udp(), udp()
    try:
        tx = UdpBatchSocket(a, batch=256, gro=False, gso=True, mtu=1500)
        rx = UdpBatchSocket(b, batch=256, gro=True, slots=256)
        assert tx.gso and rx.gro, "the kernel has no UDP GSO/GRO"
        data = [payload(i, n) for i, n in enumerate(lens)]
        assert tx.send_datagrams([(d, addr_of(b)) for d in data]) == (len(data), 0)
        wait_readable(b)
        n, view, off, ln, ep = rx.recv()
        assert n == len(data)
        assert [bytes(view[off[i] : off[i] + ln[i]]) for i in range(n)] == data
        assert list(rx.segs[0 : rx.nbufs]) == gso_groups(lens)
    finally:
        a.close()
        b.close()


def test_gso_runs_split_at_endpoint_change():
    a, b, c = udp(), udp(), udp()
    try:
        tx = UdpBatchSocket(a, batch=64, gso=True, gro=False, mtu=1500)
        rb = UdpBatchSocket(b, batch=64, gro=True)
        rc = UdpBatchSocket(c, batch=64, gro=True)
        assert tx.gso and rb.gro, "the kernel has no UDP GSO/GRO"
        dsts = [addr_of(b)] * 5 + [addr_of(c)] * 3 + [addr_of(b)] * 4
        data = [payload(i, 500) for i in range(len(dsts))]
        assert tx.send_datagrams(list(zip(data, dsts))) == (len(data), 0)
        wait_readable(b)
        wait_readable(c)
        assert [d for d, _ in recv_datagrams(rb)] == data[:5] + data[8:]
        assert list(rb.segs[0 : rb.nbufs]) == [5, 4]
        assert [d for d, _ in recv_datagrams(rc)] == data[5:8]
        assert list(rc.segs[0 : rc.nbufs]) == [3]
    finally:
        for s in (a, b, c):
            s.close()


def test_empty_socket_returns_zero():
    for gro in (0, 1):
        b = udp()
        slab = ffi.new("uint8_t[]", 65536 * 2)
        off, ln = ffi.new("uint32_t[4]"), ffi.new("uint32_t[4]")
        ep = ffi.new("vc_endpoint[4]")
        st = ffi.new("vc_udp_rx *")
        assert lib.vc_udp_recv_batch(b.fileno(), st, slab, len(slab), 1500, off, ln, ep, 4, gro) == 0
        b.close()


GUARD = 64


class Guarded:
    """cffi arrays with a canary after the usable part."""

    def __init__(self, slab_size, max_):
        self.slab_size, self.max = slab_size, max_
        self.slab = ffi.new("uint8_t[]", slab_size + GUARD)
        self.off = ffi.new("uint32_t[]", max_ + 4)
        self.len = ffi.new("uint32_t[]", max_ + 4)
        self.ep = ffi.new("vc_endpoint[]", max_ + 4)
        self.segs = ffi.new("uint32_t[]", max_ + 4)
        self.nbufs = ffi.new("int *")
        self.st = ffi.new("vc_udp_rx *")
        ffi.memmove(self.slab + slab_size, b"\xa5" * GUARD, GUARD)
        for arr in (self.off, self.len, self.segs):
            for k in range(max_, max_ + 4):
                arr[k] = 0xDEADBEEF
        ffi.memmove(self.ep + max_, b"\x5a" * (4 * 24), 4 * 24)

    def recv(self, fd, mtu, gro, st=True):
        n = lib.vc_udp_recv_batch_segs(
            fd,
            self.st if st else ffi.NULL,
            self.slab,
            self.slab_size,
            mtu,
            self.off,
            self.len,
            self.ep,
            self.max,
            gro,
            self.segs,
            self.nbufs,
        )
        self.check()
        if n > 0:
            assert sum(self.segs[k] for k in range(self.nbufs[0])) == n
        return n, [bytes(ffi.buffer(self.slab + self.off[i], self.len[i])) for i in range(max(n, 0))]

    def check(self):
        assert ffi.buffer(self.slab + self.slab_size, GUARD)[:] == b"\xa5" * GUARD
        for arr in (self.off, self.len, self.segs):
            assert list(arr[self.max : self.max + 4]) == [0xDEADBEEF] * 4
        assert ffi.buffer(self.ep + self.max, 4 * 24)[:] == b"\x5a" * (4 * 24)


@pytest.mark.parametrize("gso", [False, True])
@pytest.mark.parametrize(
    "gro,slab_size,max_",
    [
        (False, 1500 * 3 + 7, 64),  # the slab fits 3 slots
        (False, 1504 * 100, 5),  # the arrays fit 5
        (True, 65536 * 2 + 100, 64),  # 2 GRO slots
        (True, 65536 * 8, 10),  # GRO buffers larger than the arrays: carried over
        (True, 65536, 1),
    ],
)
def test_small_slab_and_arrays(gso, gro, slab_size, max_):
    a, b = udp(), udp()
    try:
        tx = UdpBatchSocket(a, batch=64, gso=gso, gro=False, mtu=1500)
        assert not gro or lib.vc_udp_set_gro(b.fileno(), 1) == 0, "the kernel has no UDP GRO"
        data = [payload(i, 1000 + i % 3 * 100 if i % 20 else 1500) for i in range(130)]
        assert tx.send_datagrams([(d, addr_of(b)) for d in data]) == (len(data), 0)
        g = Guarded(slab_size, max_)
        got = []
        for _ in range(1000):
            n, msgs = g.recv(b.fileno(), 1500, gro)
            assert 0 <= n <= max_
            got += msgs
            if len(got) == len(data):
                break
            if n == 0:
                wait_readable(b, 0.2)
        assert got == data
        assert g.recv(b.fileno(), 1500, gro)[0] == 0
        assert g.st.npend == 0 and g.st.dropped == 0
    finally:
        a.close()
        b.close()


def test_slab_smaller_than_one_slot():
    b = udp()
    g = Guarded(1000, 4)
    assert g.recv(b.fileno(), 1500, 0)[0] == -errno.EINVAL
    g = Guarded(65535, 4)
    assert g.recv(b.fileno(), 1500, 1)[0] == -errno.EINVAL
    assert (
        lib.vc_udp_recv_batch(b.fileno(), g.st, g.slab, 65535, 1500, g.off, g.len, g.ep, 0, 0)
        == -errno.EINVAL
    )
    b.close()


def test_gro_overflow_without_state_drops_rest():
    a, b = udp(), udp()
    try:
        tx = UdpBatchSocket(a, gso=True, gro=False, mtu=1500)
        assert tx.gso and lib.vc_udp_set_gro(b.fileno(), 1) == 0, "the kernel has no UDP GSO/GRO"
        data = [payload(i, 700) for i in range(40)]
        tx.send_datagrams([(d, addr_of(b)) for d in data])
        wait_readable(b)
        g = Guarded(65536 * 4, 8)
        n, msgs = g.recv(b.fileno(), 1500, 1, st=False)
        assert n == 8 and msgs == data[:8]
        assert g.recv(b.fileno(), 1500, 1, st=False)[0] == 0
    finally:
        a.close()
        b.close()


def test_truncated_datagrams_are_dropped_and_counted():
    a, b = udp(), udp()
    try:
        tx = UdpBatchSocket(a, gso=False, gro=False, mtu=4000)
        data = [b"a" * 100, b"b" * 3000, b"c" * 512, b"d" * 513, b"e" * 10]
        tx.send_datagrams([(d, addr_of(b)) for d in data])
        wait_readable(b)
        g = Guarded(512 * 8, 8)
        n, msgs = g.recv(b.fileno(), 512, 0)
        assert msgs == [data[0], data[2], data[4]]
        assert g.st.dropped == 2
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("pmtu", [False, True])
def test_connection_refused_reported(pmtu):
    """A pending ICMP error (port unreachable).  Without the error queue
    (pmtu=False) the receive raises it; with it (the data plane's sockets:
    IP_RECVERR, for the path MTU) the receive reads it from the queue
    (errors_read, vc_udp_error: ECONNREFUSED from ICMP type 3 code 3) and
    finds nothing."""
    x = udp()
    port = addr_of(x)[1]
    x.close()
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.connect(("127.0.0.1", port))
    try:
        s = UdpBatchSocket(a, gro=False, gso=True, mtu=1500, pmtu=pmtu)
        assert s.pmtu == pmtu
        assert s.send_datagrams([(b"x" * 10, None)] * 5, connected=True) == (5, 0)
        # the ICMP error is pending: the next send reports it and still sends everything
        assert s.send_datagrams([(b"x" * 10, None)] * 5, connected=True) == (5, errno.ECONNREFUSED)
        wait_readable(a, 0.5)
        if not pmtu:
            with pytest.raises(ConnectionRefusedError):
                s.recv()
        else:
            assert s.recv()[0] == 0 and s.errors_read >= 1
            e = s.errors[0]
            assert (e.err, e.origin, e.type, e.code) == (errno.ECONNREFUSED, 2, 3, 3)
            assert (e.ep.family, e.ep.port) == (4, port)
        assert s.recv()[0] == 0
    finally:
        a.close()


def test_bad_endpoints_dropped_rest_sent():
    a, b = udp(), udp()
    try:
        tx = UdpBatchSocket(a, batch=16, gso=True, gro=False, mtu=1500)
        rx = UdpBatchSocket(b, batch=16, gro=False, mtu=1500)
        data = [payload(i, 200) for i in range(6)]
        buf = b"".join(data)
        off = ffi.new("uint32_t[]", [200 * i for i in range(6)])
        ln = ffi.new("uint32_t[]", [200] * 6)
        eps = ffi.new("vc_endpoint[6]")
        for i in range(6):
            endpoint_from_addr(addr_of(b), eps + i)
        eps[1].family = 9  # no such family: EAFNOSUPPORT, not sent
        endpoint_from_addr(("::1", addr_of(b)[1]), eps + 3)  # IPv6 on an IPv4 socket
        sent, err = tx.send(buf, off, ln, eps, 6)
        assert sent == 4 and err == errno.EAFNOSUPPORT
        got = recv_all(rx, 4)
        assert [d for d, _ in got] == [data[0], data[2], data[4], data[5]]
        # an oversized datagram: EMSGSIZE, the others still go
        big = UdpBatchSocket(a, batch=4, gso=False, gro=False, mtu=70000)
        sent, err = big.send_datagrams([(b"1", addr_of(b)), (b"x" * 66000, addr_of(b)), (b"3", addr_of(b))])
        assert (sent, err) == (2, errno.EMSGSIZE)
        assert [d for d, _ in recv_all(rx, 2)] == [b"1", b"3"]
    finally:
        a.close()
        b.close()


def test_eagain_stops_the_batch():
    # AF_UNIX datagram sockets apply back-pressure, UDP on loopback does not.
    s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s1.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        u = UdpBatchSocket(s1, batch=64, gro=False, gso=False, mtu=1500)
        sent, err = u.send_datagrams([(bytes([i]) * 1000, None) for i in range(200)], connected=True)
        assert 0 < sent < 200 and err == errno.EAGAIN
        s2.setblocking(False)
        got = []
        while True:
            try:
                got.append(s2.recv(2000))
            except BlockingIOError:
                break
        assert got[:sent] == [bytes([i]) * 1000 for i in range(sent)]
    finally:
        s1.close()
        s2.close()


def test_send_errors_on_closed_fd():
    a = udp()
    fd = a.fileno()
    UdpBatchSocket(a, gso=False, gro=False)  # sets the socket up as the data plane does
    a.close()
    err = ffi.new("int *")
    eps = ffi.new("vc_endpoint[1]")
    endpoint_from_addr(("127.0.0.1", 9), eps)
    assert (
        lib.vc_udp_send_batch(
            fd, ffi.new("uint8_t[4]"), ffi.new("uint32_t[1]"), ffi.new("uint32_t[1]", [4]), eps, 1, 0, err
        )
        == 0
    )
    assert err[0] == errno.EBADF
    g = Guarded(4096, 2)
    assert g.recv(fd, 1500, 0)[0] == -errno.EBADF


@pytest.mark.parametrize(
    "addr,family",
    [
        (("127.0.0.1", 51820), 4),
        (("10.1.2.3", 0), 4),
        (("::1", 65535), 6),
        (("fe80::1", 5, 0, 3), 6),
        (("2001:db8::42", 443), 6),
    ],
)
def test_endpoint_conversion(addr, family):
    ep = endpoint_from_addr(addr)
    assert ep.family == family
    assert endpoint_to_addr(ep) == addr
    # through the C converters and the sockaddr layout
    sa = ffi.new("uint8_t[28]")
    n = lib.vc_endpoint_to_sockaddr(ep, sa, 28, 1)
    assert n == 28
    back = ffi.new("vc_endpoint *")
    assert lib.vc_endpoint_from_sockaddr(back, sa, n) == 0
    assert endpoint_to_addr(back) == addr
    assert endpoint_to_addr(endpoint_from_addr(("::ffff:192.0.2.7", 80))) == ("192.0.2.7", 80)
    assert lib.vc_endpoint_to_sockaddr(ffi.new("vc_endpoint *"), sa, 28, 0) == 0
