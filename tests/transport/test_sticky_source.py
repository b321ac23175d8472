"""The local source address of a peer's endpoint (the address its datagrams
arrived at, which replies leave from), in both tables alike: it is learned
with the endpoint from authenticated data, a change of source alone is no
roam, sealed messages carry it, and the UAPI's endpoint has none; the
send rounds send from it, and give up one the kernel refuses."""

from tests.transport.helpers import A_ADDR, KEY_AB, b_side, ipv4, message
from tests.transport.test_rounds import received, twins, udp_socket  # noqa: F401  (twins: a fixture)
from vpncrypt.sourced import SourcedAddr, source_of
from vpncrypt.transport import status as S

INNER = ipv4("10.0.0.1", "10.0.0.2", b"hello")


def _open(t, counter, addr, now):
    res = t.open([(message(KEY_AB, 7, counter, INNER), addr)], now)
    assert res.status == [S.OK]
    (touch,) = res.touched
    return touch.flags


def _sealed_to(t, pid, now):
    res = t.seal([INNER], now, peer=pid)
    ((_data, addr),) = res.datagrams
    return addr


def test_the_source_goes_with_the_endpoint(backend):
    t, pid = b_side(backend)
    assert source_of(t.endpoint(pid)) is None  # set as the UAPI does: routing picks
    flags = _open(t, 0, SourcedAddr(A_ADDR, ("203.0.113.7", 3)), 1.0)
    assert not flags & S.EV_ROAMED  # the same peer address
    assert t.endpoint(pid) == A_ADDR and source_of(t.endpoint(pid)) == ("203.0.113.7", 3)
    assert source_of(_sealed_to(t, pid, 1.0)) == ("203.0.113.7", 3)

    flags = _open(t, 1, SourcedAddr(A_ADDR, ("203.0.113.8", 3)), 2.0)
    assert not flags & S.EV_ROAMED  # another local address only
    assert source_of(t.endpoint(pid)) == ("203.0.113.8", 3)
    assert source_of(_sealed_to(t, pid, 2.0)) == ("203.0.113.8", 3)

    moved = SourcedAddr(("192.0.2.99", 4000), ("203.0.113.7", 3))
    flags = _open(t, 2, moved, 3.0)
    assert flags & S.EV_ROAMED
    assert t.endpoint(pid) == ("192.0.2.99", 4000) and source_of(t.endpoint(pid)) == ("203.0.113.7", 3)

    t.set_endpoint(pid, ("192.0.2.50", 51820))  # `wg set endpoint=`: no source
    assert source_of(t.endpoint(pid)) is None
    assert source_of(_sealed_to(t, pid, 3.0)) is None


def test_an_ipv6_source(backend):
    t, pid = b_side(backend)
    peer = ("2001:db8::1", 51820)
    _open(t, 0, SourcedAddr(peer, ("2001:db8::aa", 0)), 1.0)
    assert t.endpoint(pid) == peer and source_of(t.endpoint(pid)) == ("2001:db8::aa", 0)
    _open(t, 1, SourcedAddr(peer, ("fe80::1", 5)), 2.0)  # link-local: with its interface
    assert source_of(t.endpoint(pid)) == ("fe80::1", 5)


def test_a_handshake_source_is_kept_by_set_endpoint(backend):
    """The protocol core sets the endpoint of an initiation's sender to the
    address it came from: its source stays (the response and what follows
    leave from the address the initiation came to)."""
    t, pid = b_side(backend)
    t.set_endpoint(pid, SourcedAddr(A_ADDR, ("198.51.100.9", 2)))
    assert source_of(t.endpoint(pid)) == ("198.51.100.9", 2)


# ---------------------------------------------------------------- rounds


def _send_round(side):
    packets = [ipv4("10.0.0.2", "10.0.0.1", bytes([i]) * 100) for i in range(5)]
    for p in packets:
        side.far.send(p)
    n = side.batch.send(side.inner, side.udp, 2.0)
    io = side.batch.io
    return n, io.sealed, io.sent, io.send_errno


def test_a_round_sends_from_the_source(twins):  # noqa: F811
    """The send round, in C and composed in Python, sends a peer's messages
    from its endpoint's source: 127.0.0.2 (lo holds all of 127/8), where the
    kernel would pick 127.0.0.1 for 127.0.0.1."""
    sink = udp_socket()
    for side in twins(responder=False, peer_addr=SourcedAddr(sink.getsockname(), ("127.0.0.2", 0))):
        assert _send_round(side) == (5, 5, 5, 0)
        assert [addr[0] for _d, addr in received(sink)] == ["127.0.0.2"] * 5
        assert source_of(side.table.endpoint(side.pid)) == ("127.0.0.2", 0)
        assert side.table.sources_forgotten == 0
    sink.close()


def test_a_round_gives_up_a_refused_source(twins):  # noqa: F811
    """A source the host does not have (192.0.2.77, TEST-NET-1: the address
    was removed): the kernel refuses it, the round sends every message from
    the routed address instead, reports no error, and the peer gives the
    source up (counted once); the next round sends without a retry."""
    sink = udp_socket()
    for side in twins(responder=False, peer_addr=SourcedAddr(sink.getsockname(), ("192.0.2.77", 0))):
        assert _send_round(side) == (5, 5, 5, 0)
        assert [addr[0] for _d, addr in received(sink)] == ["127.0.0.1"] * 5
        assert source_of(side.table.endpoint(side.pid)) is None
        assert side.table.endpoint(side.pid) == sink.getsockname()
        assert side.table.sources_forgotten == 1
        assert _send_round(side) == (5, 5, 5, 0)
        assert len(received(sink)) == 5 and side.table.sources_forgotten == 1
    sink.close()
