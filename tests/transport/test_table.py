"""The session table's interface, on both backends: indices, installing and
rotating keypairs, key confirmation, expiry, message limits, padding, the
clock, endpoints and stats.  The numbers are WireGuard's."""

import pytest

from vpncrypt.transport import Session, TableConfig, new_table, status as S

from tests.transport.helpers import (
    PADDING_CASES,
    A_ADDR,
    B_ADDR,
    KEY_AB,
    KEY_BA,
    b_side,
    install,
    ipv4,
    ipv6,
    message,
    table_with_peer,
)

PKT = ipv4("10.0.0.1", "10.0.0.2")
TO_A = ipv4("10.0.0.2", "10.0.0.1")


def opened(t, datagram, now=1.0, src=A_ADDR):
    return t.open([(datagram, src)], now)


def test_indices_are_reserved_once(backend):
    t, pid = table_with_peer(backend)
    other = t.add_peer()
    assert t.reserve_index(42, pid)
    assert not t.reserve_index(42, other)
    assert t.index_peer(42) == pid and t.index_peer(43) is None
    assert t.release_index(42) and not t.release_index(42)
    assert t.reserve_index(42, other) and t.index_count() == 1
    with pytest.raises(ValueError):
        t.install(pid, Session(42, 1, KEY_AB, KEY_BA, True), 0.0)  # not reserved for pid
    with pytest.raises(ValueError):
        t.install(pid, Session(99, 1, KEY_AB, KEY_BA, True), 0.0)  # not reserved at all


def test_responder_keypair_waits_for_confirmation(backend):
    t, pid = b_side(backend)
    st = t.stats(pid, 0.0)
    assert st.current is None and st.next is not None and st.next.local_index == 7
    # nothing is sealed on an unconfirmed keypair
    res = t.seal([TO_A], 0.5)
    assert res.status == [S.NO_KEY] and res.datagrams == []
    assert res.touched[0].flags & S.EV_NEED_KEY
    # the initiator's first message confirms it: current now
    res = opened(t, message(KEY_AB, 7, 0, PKT))
    assert res.status == [S.OK] and res.packets == [PKT]
    flags = res.touched[0].flags
    assert flags & S.EV_CONFIRMED and flags & S.EV_AUTH and flags & S.EV_DATA
    st = t.stats(pid, 1.0)
    assert st.current.local_index == 7 and st.next is None
    # only once
    assert not opened(t, message(KEY_AB, 7, 1, PKT)).touched[0].flags & S.EV_CONFIRMED
    res = t.seal([TO_A], 1.0)
    ((d, ep),) = res.datagrams
    assert ep == A_ADDR and d[4:8] == (5).to_bytes(4, "little") and d[8:16] == bytes(8)


def test_rotation_as_wireguard(backend):
    """Initiator: new -> current, current -> previous (next, if any, -> previous);
    responder: new -> next, previous retired; confirmation retires the old previous."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 101, KEY_AB, KEY_BA, True)
    install(t, pid, 2, 102, KEY_AB, KEY_BA, True)
    st = t.stats(pid, 0.0)
    assert (st.current.local_index, st.previous.local_index, st.next) == (2, 1, None)
    install(t, pid, 3, 103, KEY_AB, KEY_BA, False)  # responder: previous retired
    st = t.stats(pid, 0.0)
    assert (st.current.local_index, st.previous, st.next.local_index) == (2, None, 3)
    assert t.index_peer(1) is None and t.index_count() == 2
    install(t, pid, 4, 104, KEY_AB, KEY_BA, True)  # initiator with a next: next -> previous
    st = t.stats(pid, 0.0)
    assert (st.current.local_index, st.previous.local_index, st.next) == (4, 3, None)
    assert t.index_peer(2) is None
    install(t, pid, 5, 105, KEY_AB, KEY_BA, False)
    res = opened(t, message(bytes(32), 5, 0, PKT))  # a forgery confirms nothing
    assert res.status == [S.BAD_TAG]
    assert t.stats(pid, 1.0).next.local_index == 5
    res = opened(t, message(KEY_BA, 5, 0, PKT))
    assert res.status == [S.OK] and res.touched[0].flags & S.EV_CONFIRMED
    t.maintain()
    st = t.stats(pid, 1.0)
    assert (st.current.local_index, st.previous.local_index, st.next) == (5, 4, None)
    assert sorted(i for i in range(1, 6) if t.index_peer(i) is not None) == [4, 5]


def test_zero_and_remove(backend):
    t, pid = b_side(backend)
    assert t.reserve_index(9, pid)
    t.zero(pid)
    st = t.stats(pid, 0.0)
    assert (st.current, st.previous, st.next) == (None, None, None) and t.index_count() == 0
    assert opened(t, message(KEY_AB, 7, 0, PKT)).status == [S.UNKNOWN_INDEX]
    install(t, pid, 7, 5, KEY_BA, KEY_AB, False)
    t.remove_peer(pid)
    assert t.index_count() == 0 and t.peer_count() == 0
    with pytest.raises(KeyError):
        t.stats(pid, 0.0)


def test_sealed_bytes_are_wireguard_transport_messages(backend):
    """Type 4, the peer's index, the counter, then the padded packet sealed
    with ChaCha20-Poly1305 under the sending key and a nonce of 32 zero bits
    and the 64-bit little-endian counter (libsodium opens it)."""
    from nacl import bindings as nb

    t, pid = table_with_peer(backend)
    install(t, pid, 1, 0x0A0B0C0D, KEY_AB, KEY_BA, True)
    pkt = ipv4("10.0.0.2", "10.0.0.1", b"q" * 21)
    res = t.seal([TO_A, pkt], 0.0)
    (_, _), (d, _) = res.datagrams
    assert d[:4] == b"\x04\x00\x00\x00" and d[4:8] == bytes([0x0D, 0x0C, 0x0B, 0x0A])
    assert d[8:16] == (1).to_bytes(8, "little") and len(d) == 16 + 48 + 16
    plain = nb.crypto_aead_chacha20poly1305_ietf_decrypt(d[16:], None, bytes(4) + d[8:16], KEY_AB)
    assert plain == pkt + bytes(7)


def test_counters_only_move_forward(backend):
    """No call sets a counter: it starts at 0 and each sealed message takes
    the next one."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    res = t.seal([TO_A] * 5, 0.0)
    assert [int.from_bytes(d[8:16], "little") for d, _ in res.datagrams] == [0, 1, 2, 3, 4]
    assert res.status == [S.OK] * 5
    assert not any(hasattr(t, n) for n in ("set_counter", "tx_set_counter", "set_send_counter"))
    assert t.stats(pid, 0.0).current.send_counter == 5
    res = t.seal([b""], 0.0, peer=pid)  # a keepalive takes one too
    assert int.from_bytes(res.datagrams[0][0][8:16], "little") == 5 and len(res.datagrams[0][0]) == 32


def test_reject_after_time(backend):
    """A keypair seals nothing and opens nothing from 180 s after install."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True, now=100.0)
    assert t.seal([TO_A], 279.999).status == [S.OK]
    assert t.seal([TO_A], 280.0).status == [S.NO_KEY]
    assert opened(t, message(KEY_BA, 1, 0, PKT), 279.999).status == [S.OK]
    assert opened(t, message(KEY_BA, 1, 1, PKT), 280.0).status == [S.STALE_KEYPAIR]
    assert t.stats(pid, 280.0).drops == {"stale_keypair": 1}


def test_message_limits_and_rekey_flags(backend):
    t, pid = table_with_peer(backend, reject_after_messages=10, rekey_after_messages=6)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    res = t.seal([TO_A] * 6, 0.0)
    assert not res.touched[0].flags & S.EV_REKEY_TX  # next counter 6: not past 6
    res = t.seal([TO_A], 0.0)
    assert res.touched[0].flags & S.EV_REKEY_TX  # next counter 7 > 6
    res = t.seal([TO_A] * 5, 0.0)
    assert res.status == [S.OK] * 3 + [S.NO_KEY] * 2  # counters 7, 8, 9; 10 is refused
    assert res.touched[0].flags & S.EV_NEED_KEY
    assert not t.stats(pid, 0.0).current.usable
    # rekey after time: only the initiator, from 120 s
    assert not t.seal([b""], 119.9, peer=pid).touched[0].flags & S.EV_REKEY_TX
    t2, p2 = table_with_peer(backend)
    install(t2, p2, 1, 9, KEY_AB, KEY_BA, True)
    assert not t2.seal([TO_A], 119.9).touched[0].flags & S.EV_REKEY_TX
    assert t2.seal([TO_A], 120.0).touched[0].flags & S.EV_REKEY_TX
    t3, p3 = b_side(backend)
    opened(t3, message(KEY_AB, 7, 0, PKT))
    assert not t3.seal([TO_A], 150.0).touched[0].flags & S.EV_REKEY_TX


def test_rekey_on_receive_flag(backend):
    """Any authenticated message while current is ours and 165 s old."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    assert not opened(t, message(KEY_BA, 1, 0, b""), 164.9).touched[0].flags & S.EV_REKEY_RX
    assert opened(t, message(KEY_BA, 1, 1, b""), 165.0).touched[0].flags & S.EV_REKEY_RX
    t2, p2 = b_side(backend)  # the responder never does
    assert not opened(t2, message(KEY_AB, 7, 0, PKT), 170.0).touched[0].flags & S.EV_REKEY_RX


@pytest.mark.parametrize("mtu, size, plain", PADDING_CASES)
def test_padding_to_sixteen_never_past_the_mtu(backend, mtu, size, plain):
    t, pid = table_with_peer(backend, mtu=mtu)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    pkt = ipv4("10.0.0.2", "10.0.0.1", bytes(size - 20))
    ((d, _),) = t.seal([pkt], 0.0).datagrams
    assert len(d) == 16 + plain + 16


def test_keepalive_and_inner_checks(backend):
    t, pid = b_side(backend)
    res = t.open(
        [
            (message(KEY_AB, 7, 0, b""), A_ADDR),
            (message(KEY_AB, 7, 1, ipv4("10.9.9.9", "10.0.0.2")), A_ADDR),  # not A's source
            (message(KEY_AB, 7, 2, b"\x45" + bytes(10)), A_ADDR),  # not an IP packet
            (message(KEY_AB, 7, 3, ipv6("fd00::1", "fd00::2")), A_ADDR),
            (b"\x01\x00\x00\x00" + bytes(144), A_ADDR),  # an initiation (no key set)
            (b"\x04\x00\x00\x00" + bytes(20), A_ADDR),  # too short
            (message(KEY_AB, 8, 4, PKT), A_ADDR),
        ],
        1.0,
    )  # unknown index
    assert res.status == [
        S.KEEPALIVE,
        S.NOT_ALLOWED,
        S.MALFORMED,
        S.OK,
        S.UNKNOWN_PEER,
        S.MALFORMED,
        S.UNKNOWN_INDEX,
    ]
    assert res.packets == [ipv6("fd00::1", "fd00::2")] and res.queued == 0 and res.replies == []
    st = t.stats(pid, 1.0)
    assert st.rx_packets == 1 and st.drops == {"source_not_allowed": 1, "malformed": 1}
    assert t.drops() == {"malformed": 1, "unknown_index": 1, "unknown_peer": 1}


def test_padding_removed_by_ip_length(backend):
    t, pid = b_side(backend)
    res = opened(t, message(KEY_AB, 7, 0, PKT + bytes(12), pad_to=0))
    assert res.packets == [PKT]


def test_roaming_only_from_authentic_data(backend):
    t, pid = b_side(backend)
    d = bytearray(message(KEY_AB, 7, 0, PKT))
    d[-1] ^= 1
    res = opened(t, bytes(d), src=("203.0.113.9", 1))
    assert res.status == [S.BAD_TAG] and res.touched == []
    assert t.endpoint(pid) == A_ADDR
    res = opened(t, message(KEY_AB, 7, 0, PKT), src=("203.0.113.9", 2))
    assert res.touched[0].flags & S.EV_ROAMED and t.endpoint(pid) == ("203.0.113.9", 2)
    assert not opened(t, message(KEY_AB, 7, 1, PKT), src=("203.0.113.9", 2)).touched[0].flags & S.EV_ROAMED


def test_stats_count_wire_and_inner_bytes(backend):
    t, pid = b_side(backend)
    m = message(KEY_AB, 7, 0, PKT)
    opened(t, m)
    res = t.seal([TO_A, TO_A], 2.0)
    st = t.stats(pid, 3.0)
    assert (st.rx_packets, st.rx_bytes, st.rx_wire_bytes) == (1, len(PKT), len(m))
    assert (st.tx_packets, st.tx_bytes) == (2, 2 * len(TO_A))
    assert st.tx_wire_bytes == sum(len(d) for d, _ in res.datagrams)
    assert (st.last_rx, st.last_tx) == (1.0, 2.0)
    assert res.touched[0].packets == 2 and res.touched[0].bytes == st.tx_wire_bytes


def test_outgoing_without_route_or_endpoint(backend):
    t, pid = table_with_peer(backend, endpoint=None)
    res = t.seal([TO_A, ipv4("10.0.0.2", "8.8.8.8"), b"\x00" * 10], 0.0)
    # a routed packet to a peer without an endpoint is dropped before it could
    # wait for a key, as in the Linux module's wg_xmit (which answers it with
    # an ICMP error); the peer's own packets (staged ones, keepalives) wait
    assert res.status == [S.NO_ENDPOINT, S.NO_ROUTE, S.MALFORMED]
    assert res.peers == [pid, -1, -1]
    assert t.seal([TO_A], 0.0, peer=pid).status == [S.NO_KEY]
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    assert t.seal([TO_A], 0.0).status == [S.NO_ENDPOINT]
    assert t.seal([TO_A], 0.0, peer=pid).status == [S.NO_ENDPOINT]
    assert t.drops() == {"no_route": 1, "malformed": 1}
    assert t.stats(pid, 0.0).drops == {"no_endpoint": 3}


def test_clock_never_runs_backwards(backend):
    t = new_table(backend)
    assert t.clock(100.0) == 100.0
    assert t.clock(100.5) == 100.5
    assert t.clock(100.2) == 100.5  # a small step back (threads): time stands still
    assert t.clock_offset() == 0.0
    assert t.clock(40.0) == 100.5  # a jump back: absorbed
    assert t.clock_offset() == 60.5
    assert t.clock(41.0) == 101.5  # and time goes on from there
    assert t.clock(1000.0) == 1060.5  # forward jumps pass through


def test_no_fixed_peer_limit(backend):
    t = new_table(backend)
    ids = [t.add_peer() for _ in range(5000)]
    assert len(set(ids)) == 5000 and t.peer_count() == 5000
    for i in (0, 1234, 4999):
        install(t, ids[i], 10_000 + i, i, KEY_AB, KEY_BA, True)
        t.set_endpoint(ids[i], B_ADDR)
        t.route_add(ids[i], f"10.{i // 256}.{i % 256}.1/32")
        ((d, ep),) = t.seal([ipv4("10.255.0.1", f"10.{i // 256}.{i % 256}.1")], 0.0).datagrams
        assert ep == B_ADDR and d[4:8] == i.to_bytes(4, "little")


def test_bad_configuration_refused():
    for bad in (
        dict(reject_after_time=0),
        dict(mtu=70000),
        dict(reject_after_messages=0),
        dict(rekey_after_messages=2**64),
    ):
        with pytest.raises(ValueError):
            TableConfig(**bad)


def test_confirmation_is_checked_for_every_message_of_a_batch(backend):
    """A batch whose first message arrives on `next` and whose last arrives on
    the old current: `next` is confirmed (not only the last message counts)."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 101, KEY_AB, KEY_BA, False)  # an older session, then confirmed
    opened(t, message(KEY_BA, 1, 0, PKT), 0.5)
    install(t, pid, 2, 102, KEY_AB, KEY_BA, False)  # a new responder keypair waits in next
    res = t.open([(message(KEY_BA, 2, 0, PKT), A_ADDR), (message(KEY_BA, 1, 1, PKT), A_ADDR)], 1.0)
    assert res.status == [S.OK, S.OK]
    assert res.touched[0].flags & S.EV_CONFIRMED
    st = t.stats(pid, 1.0)
    assert (st.current.local_index, st.previous.local_index, st.next) == (2, 1, None)


def test_rekey_on_receive_whatever_keypair_the_last_message_used(backend):
    """From 165 s, an authenticated message on the previous keypair also
    makes the initiator rekey: what counts is the age of current."""
    t, pid = table_with_peer(backend)
    install(t, pid, 1, 101, KEY_AB, KEY_BA, True, now=0.0)
    install(t, pid, 2, 102, KEY_AB, KEY_BA, True, now=0.0)  # current (ours); 1 is previous
    res = t.open([(message(KEY_BA, 1, 0, PKT), A_ADDR)], 166.0)  # on previous only
    assert res.status == [S.OK] and res.touched[0].flags & S.EV_REKEY_RX
