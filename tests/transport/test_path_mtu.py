"""Each peer's path MTU in the native session table (native/wg_pmtu.c): what
an error of the socket's error queue must be to be taken (tailscale#311:
outer ICMP is not authenticated), the floor, the expiry, a roam starting
afresh, and the seal's refusal of a message that exceeds it.  Sizes are the
RFCs': IPv4 header 20, IPv6 40, UDP 8, WireGuard 32 (header 16, tag 16),
padding to 16."""

import errno

import pytest

from tests.transport.helpers import KEY_AB, KEY_BA, install, ipv4, ipv6, table_with_peer
from vpncrypt._native import ffi, lib
from vpncrypt.transport import status as S

A4 = ("192.0.2.1", 51820)
A6 = ("2001:db8::1", 51820)
REMOTE_INDEX = 5  # the peer's index for our keypair: what our data messages carry


def _side(endpoint=A4):
    t, pid = table_with_peer("native", endpoint=endpoint)
    install(t, pid, 7, REMOTE_INDEX, KEY_BA, KEY_AB, True)  # ours: current at once
    return t, pid


def _error(to, mtu, *, origin=2, kind=3, code=4, err=errno.EMSGSIZE, quote=None):
    e = ffi.new("vc_udp_error *")
    host, port = to
    if ":" in host:
        import ipaddress

        e.ep.family, e.ep.port = 6, port
        ffi.memmove(e.ep.addr, ipaddress.IPv6Address(host).packed, 16)
    else:
        import ipaddress

        e.ep.family, e.ep.port = 4, port
        ffi.memmove(e.ep.addr, ipaddress.IPv4Address(host).packed, 4)
    e.err, e.info, e.origin, e.type, e.code = err, mtu, origin, kind, code
    if quote is None:
        quote = b"\x04\x00\x00\x00" + REMOTE_INDEX.to_bytes(4, "little") + bytes(8)
    e.quoted_len = len(quote)
    ffi.memmove(e.quoted, quote, len(quote))
    return e


def _learn(t, e, now=1.0):
    return lib.vc_wg_pmtu_learn(t.ptr, e, now)


def _mtu(t, pid, now=1.0):
    st = t.stats(pid, now)
    return st.path_mtu, st.inner_mtu


def test_frag_needed_for_the_current_endpoint_is_taken():
    t, pid = _side()
    assert _mtu(t, pid) == (0, 0)
    assert _learn(t, _error(A4, 1280)) == pid
    # 1280 - 20 - 8 - 32 = 1220, down to a multiple of 16
    assert _mtu(t, pid) == (1280, 1216)
    assert t.pmtu_counts == (1, 0)


def test_ipv6_packet_too_big_and_its_inner_mtu():
    t, pid = _side(A6)
    assert _learn(t, _error(A6, 1280, origin=3, kind=2, code=0)) == pid
    assert _mtu(t, pid) == (1280, 1200)  # 1280 - 40 - 8 - 32


@pytest.mark.parametrize(
    "kw, code",
    [
        ({"err": errno.ECONNREFUSED, "kind": 3, "code": 3}, -1),  # port unreachable
        ({"kind": 3, "code": 1}, -1),  # host unreachable that says EMSGSIZE: no
        ({"kind": 11, "code": 0}, -1),  # time exceeded
        ({"origin": 3, "kind": 1, "code": 4}, -1),  # ICMPv6 port unreachable
        ({"origin": 4}, -1),  # SO_EE_ORIGIN_TXSTATUS: no path's word
        ({"quote": b"\x04\x00\x00\x00" + (99).to_bytes(4, "little") + bytes(8)}, -3),  # another index
        ({"quote": b"\x01\x00\x00\x00" + REMOTE_INDEX.to_bytes(4, "little")}, -3),  # a handshake message
    ],
)
def test_errors_that_are_not_ours_are_refused(kw, code):
    t, pid = _side()
    assert _learn(t, _error(A4, 1280, **kw)) == code
    assert _mtu(t, pid) == (0, 0)
    assert t.pmtu_counts == (0, 1)


def test_only_the_current_endpoint():
    t, pid = _side()
    assert _learn(t, _error(("192.0.2.1", 51821), 1280)) == -2  # another port
    assert _learn(t, _error(("192.0.2.9", 51820), 1280)) == -2  # another address
    assert _mtu(t, pid) == (0, 0)


def test_a_quote_of_only_the_udp_header_is_taken():
    """RFC 792 asks a router to quote 8 bytes past the IP header: the UDP
    header alone, nothing to check the index with."""
    t, pid = _side()
    assert _learn(t, _error(A4, 1400, quote=b"")) == pid
    assert _mtu(t, pid)[0] == 1400


def test_floor_only_lower_and_local_errors():
    t, pid = _side()
    assert _learn(t, _error(A4, 1400, origin=1, kind=0, code=0)) == pid  # this host's EMSGSIZE
    assert _mtu(t, pid)[0] == 1400
    assert _learn(t, _error(A4, 1400)) == -4  # not lower
    assert _learn(t, _error(A4, 1500)) == -4
    assert _learn(t, _error(A4, 300)) == pid  # below the floor: raised to 576
    assert _mtu(t, pid) == (576, 512)  # 576 - 60 = 516 -> 512
    t6, pid6 = _side(A6)
    assert _learn(t6, _error(A6, 1000, origin=3, kind=2, code=0)) == pid6
    assert _mtu(t6, pid6) == (1280, 1200)


def test_the_learned_mtu_expires_after_600_seconds():
    t, pid = _side()
    assert _learn(t, _error(A4, 1280), now=10.0) == pid
    assert _mtu(t, pid, 609.9)[0] == 1280
    assert _mtu(t, pid, 610.0) == (0, 0)  # net.ipv4.route.mtu_expires
    assert _learn(t, _error(A4, 1400), now=611.0) == pid  # a higher one is news again


def test_a_new_endpoint_starts_afresh():
    t, pid = _side()
    assert _learn(t, _error(A4, 1280)) == pid
    t.set_endpoint(pid, A4)  # the same address and port: kept
    assert _mtu(t, pid)[0] == 1280
    t.set_endpoint(pid, ("192.0.2.77", 51820))
    assert _mtu(t, pid) == (0, 0)


def test_a_roam_starts_afresh():
    from tests.transport.helpers import message

    t, pid = _side()
    assert _learn(t, _error(A4, 1280)) == pid
    res = t.open([(message(KEY_AB, 7, 0, ipv4("10.0.0.1", "10.0.0.2")), ("192.0.2.50", 4000))], 2.0)
    assert res.status == [S.OK] and res.touched[0].flags & S.EV_ROAMED
    assert _mtu(t, pid, 2.0) == (0, 0)


@pytest.mark.parametrize(
    "endpoint, fits, too_big",
    [
        (A4, 1216, 1217),  # 1280 - 28 = 1252 for the message: 1216 + 32 = 1248; 1217 pads to 1232
        (A6, 1200, 1201),  # 1280 - 48 = 1232: 1200 + 32
    ],
)
def test_the_seal_refuses_what_exceeds_the_path(endpoint, fits, too_big):
    t, pid = _side(endpoint)
    assert _learn(t, _error(endpoint, 1280, origin=1, kind=0, code=0)) == pid
    v4 = [ipv4("10.0.0.2", "10.0.0.1", bytes(fits - 20)), ipv4("10.0.0.2", "10.0.0.1", bytes(too_big - 20))]
    res = t.seal(v4, 3.0)
    assert res.status == [S.OK, S.PATH_MTU] and len(res.datagrams) == 1
    # IPv6 inner: up to 1280 bytes always goes (RFC 8200 5: every link carries
    # it; a sender told less still sends it, RFC 8201 4), in outer fragments
    v6 = [ipv6("fd00::2", "fd00::1", bytes(n - 40)) for n in (fits + 1, 1280, 1281)]
    res = t.seal(v6, 3.0)
    assert res.status == [S.OK, S.OK, S.PATH_MTU] and len(res.datagrams) == 2
    assert t.stats(pid, 3.0).drops == {"packet_too_big": 2}
    # a peer without a learned MTU: only the interface MTU counts (as before)
    t2, pid2 = _side(endpoint)
    res = t2.seal([ipv4("10.0.0.2", "10.0.0.1", bytes(1400))], 3.0)
    assert res.status == [S.OK]


def test_inner_mtu_arithmetic():
    assert lib.vc_wg_inner_mtu(1500, 4) == 1440  # 1500 - 60
    assert lib.vc_wg_inner_mtu(1492, 4) == 1424  # PPPoE: 1432 -> 1424
    assert lib.vc_wg_inner_mtu(1500, 6) == 1408  # 1500 - 80 = 1420, down to 1408
    assert lib.vc_wg_inner_mtu(60, 4) == 0


def test_a_big_message_goes_alone_every_15_seconds_until_a_path_mtu_is_known():
    """While the peer has no path MTU, its first message above 1280 bytes
    (outer) in a batch is sent on its own (VC_EP_ALONE: in no GSO batch, so
    the kernel gives it DF), at most once every 15 s (RFC 8899's
    PROBE_TIMER); small messages never; none once a path MTU is known."""
    from vpncrypt.transport.native import _slab_of

    t, pid = _side()
    b = t.batch(16, 2048)

    def flags(sizes, now):
        slab, off, lens = _slab_of([ipv4("10.0.0.2", "10.0.0.1", bytes(n - 20)) for n in sizes])
        k = b.seal(slab, off, lens, len(sizes), now)
        return [b.tx_ep[i].flags for i in range(k)]

    assert flags([100, 1400, 1400, 1400], 100.0) == [0, 1, 0, 0]  # 1400 + 32 + 28 > 1280; 100 is not
    assert flags([1400, 1400], 114.9) == [0, 0]
    assert flags([1200, 1400], 115.0) == [0, 1]  # 1200 + 32 + 28 = 1260: not above 1280
    assert _learn(t, _error(A4, 1400), now=116.0) == pid
    assert flags([1300, 1300], 131.0) == [0, 0]  # (fits the learned 1400)
