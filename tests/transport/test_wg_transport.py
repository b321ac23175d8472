"""The native WireGuard transport fast path (native/wg_transport.c): wire format,
replay window, AllowedIPs, roaming and drop accounting, batch by batch."""
import ipaddress
import os
import random
import struct

import pytest

import vpncrypt.crypto as vc
from vpncrypt._native import ffi, lib

MTU = 1420
STRIDE = 1472 + 64


def ipv4(src, dst, payload=b""):
    total = 20 + len(payload)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 17, 0,
                      ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return hdr + payload


def ipv6(src, dst, payload=b""):
    hdr = struct.pack("!IHBB16s16s", 6 << 28, len(payload), 17, 64,
                      ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed)
    return hdr + payload


def endpoint(host="127.0.0.1", port=51820):
    ep = ffi.new("vc_endpoint *")
    a = ipaddress.ip_address(host)
    ep.family = a.version
    ep.port = port
    ffi.memmove(ep.addr, a.packed, len(a.packed))
    return ep


def route(t, net, peer):
    n = ipaddress.ip_network(net, strict=False)
    assert lib.vc_wg_route_add(t, n.version, n.network_address.packed, n.prefixlen, peer) == 0


class Side:
    """One end's table plus reusable batch arrays."""

    def __init__(self, peers=8, keypairs=64, batch=128):
        self.t = ffi.gc(lib.vc_wg_table_new(peers, keypairs), lib.vc_wg_table_free)
        self.n = batch
        self.out = ffi.new("uint8_t[]", batch * STRIDE)
        self.out_len = ffi.new("uint32_t[]", batch)
        self.out_ep = ffi.new("vc_endpoint[]", batch)
        self.status = ffi.new("int32_t[]", batch)
        self.peer = ffi.new("int32_t[]", batch)
        self.dlv_off = ffi.new("uint32_t[]", batch)
        self.dlv_len = ffi.new("uint32_t[]", batch)
        self.other = ffi.new("uint32_t[]", batch)
        self.touched = ffi.new("uint32_t[]", batch)
        self.n_other = ffi.new("size_t *")
        self.tx_touched = ffi.new("uint32_t[]", batch)
        self.n_tx_touched = ffi.new("size_t *")
        self.n_touched = ffi.new("size_t *")

    def seal(self, packets, now=1.0):
        data = b"".join(packets)
        offs, pos = [], 0
        for p in packets:
            offs.append(pos)
            pos += len(p)
        k = lib.vc_wg_seal_batch(self.t, ffi.from_buffer(data), offs, [len(p) for p in packets],
                                 len(packets), MTU, now, self.out, STRIDE, self.out_len,
                                 self.out_ep, self.status, self.peer, self.tx_touched,
                                 self.n_tx_touched)
        status = [self.status[i] for i in range(len(packets))]
        sealed = iter(ffi.buffer(self.out + j * STRIDE, self.out_len[j])[:] for j in range(k))
        msgs = [next(sealed) if st == lib.VC_WG_OK else b"" for st in status]
        return k, msgs, status

    def open(self, datagrams, ep=None, now=2.0):
        buf = bytearray(b"".join(datagrams))
        offs, pos = [], 0
        for d in datagrams:
            offs.append(pos)
            pos += len(d)
        eps = ffi.new("vc_endpoint[]", max(1, len(datagrams)))
        for i in range(len(datagrams)):
            eps[i] = (ep or endpoint())[0]
        nd = lib.vc_wg_open_batch(self.t, ffi.from_buffer(buf), offs, [len(d) for d in datagrams],
                                  eps, len(datagrams), now, self.status, self.dlv_off, self.dlv_len,
                                  self.other, self.n_other, self.touched, self.n_touched)
        delivered = [bytes(buf[self.dlv_off[i]:self.dlv_off[i] + self.dlv_len[i]]) for i in range(nd)]
        return delivered, [self.status[i] for i in range(len(datagrams))]

    def stats(self, peer):
        s = ffi.new("vc_wg_peer_stats *")
        assert lib.vc_wg_peer_get(self.t, peer, s) == 0
        return s


@pytest.fixture
def pair():
    """A (peer 0 = B) sends to B (peer 3 = A) over one keypair."""
    key = os.urandom(32)
    a, b = Side(), Side()
    lib.vc_wg_tx_set(a.t, 0, 0xB0B0B0B0, key, 0, 1e9)
    lib.vc_wg_peer_set_endpoint(a.t, 0, endpoint("127.0.0.1", 2000))
    route(a.t, "10.0.0.2/32", 0)
    route(a.t, "fd00::2/128", 0)
    lib.vc_wg_rx_add(b.t, 0xB0B0B0B0, 3, key, 1e9)
    route(b.t, "10.0.0.1/32", 3)
    route(b.t, "fd00::1/128", 3)
    return a, b, key


def test_wire_format_matches_the_protocol(pair):
    a, b, key = pair
    pkt = ipv4("10.0.0.1", "10.0.0.2", b"x" * 33)          # 53 bytes: padded to 64
    k, (msg,), _ = a.seal([pkt])
    assert k == 1 and len(msg) == 16 + 64 + 16
    assert msg[:4] == b"\x04\0\0\0" and msg[4:8] == struct.pack("<I", 0xB0B0B0B0)
    assert msg[8:16] == struct.pack("<Q", 0)
    nonce = bytes(4) + msg[8:16]
    plain = vc.get_backend("pynacl").open(key, nonce, msg[16:])
    assert plain == pkt + bytes(11)
    ep = a.out_ep[0]
    assert a.out_len[0] == len(msg)
    assert ep.port == 2000 and bytes(ep.addr[0:4]) == bytes([127, 0, 0, 1])
    delivered, status = b.open([msg])
    assert delivered == [pkt] and status == [lib.VC_WG_OK]


def test_many_packets_both_families(pair):
    a, b, _ = pair
    rng = random.Random(1)
    pkts = [ipv4("10.0.0.1", "10.0.0.2", os.urandom(rng.randrange(0, 1400))) if i % 3
            else ipv6("fd00::1", "fd00::2", os.urandom(rng.randrange(0, 1380))) for i in range(100)]
    k, msgs, _ = a.seal(pkts)
    assert k == 100
    assert [struct.unpack("<Q", m[8:16])[0] for m in msgs] == list(range(100))
    assert all((len(m) - 32) % 16 == 0 or len(m) - 32 == MTU for m in msgs)
    delivered, _ = b.open(msgs)
    assert delivered == pkts
    s = b.stats(3)
    assert s.rx_packets == 100 and s.rx_bytes == sum(map(len, pkts))
    assert a.stats(0).tx_packets == 100 and a.stats(0).tx_counter == 100


def test_replay_and_window(pair):
    a, b, _ = pair
    pkts = [ipv4("10.0.0.1", "10.0.0.2", bytes([i])) for i in range(120)]
    _, msgs, _ = a.seal(pkts)
    order = list(range(120))
    random.Random(2).shuffle(order)                     # reordering within the window
    delivered, status = b.open([msgs[i] for i in order])
    assert sorted(delivered) == sorted(pkts) and set(status) == {lib.VC_WG_OK}
    for m in (msgs[0], msgs[57], msgs[119]):            # every captured packet replays
        d, st = b.open([m])
        assert d == [] and st == [lib.VC_WG_REPLAY]
    d, st = b.open([msgs[5], msgs[5]])                  # duplicate inside one batch
    assert st == [lib.VC_WG_REPLAY, lib.VC_WG_REPLAY]
    assert b.stats(3).drops[lib.VC_WG_REPLAY] == 5


def test_window_limits():
    key = os.urandom(32)
    a, b = Side(), Side()
    lib.vc_wg_peer_set_endpoint(a.t, 0, endpoint())
    route(a.t, "0.0.0.0/0", 0)
    lib.vc_wg_rx_add(b.t, 7, 0, key, 1e9)
    route(b.t, "0.0.0.0/0", 0)
    pkt = ipv4("1.1.1.1", "2.2.2.2")

    def msg_at(counter):
        lib.vc_wg_tx_set(a.t, 0, 7, key, counter, 1e9)
        return a.seal([pkt])[1][0]

    old = msg_at(100)
    assert b.open([msg_at(100 + 8128 - 1)])[1] == [lib.VC_WG_OK]
    assert b.open([old])[1] == [lib.VC_WG_OK]           # 8127 behind: still inside
    assert b.open([msg_at(99)])[1] == [lib.VC_WG_REPLAY]  # 8128 behind: too old
    assert b.open([msg_at(10**9)])[1] == [lib.VC_WG_OK]   # a jump clears the window
    assert b.open([msg_at(10**9 - 1)])[1] == [lib.VC_WG_OK]
    reject = 2**64 - 2**13 - 1                            # REJECT_AFTER_MESSAGES
    forged = struct.pack("<IIQ", 4, 7, reject) + vc.seal(key, bytes(4) + struct.pack("<Q", reject), pkt)
    assert b.open([forged])[1] == [lib.VC_WG_REPLAY]
    assert b.open([msg_at(reject - 1)])[1] == [lib.VC_WG_OK]
    lib.vc_wg_tx_set(a.t, 0, 7, key, 2**64 - 2**13 - 1, 1e9)
    assert a.seal([pkt])[2] == [lib.VC_WG_EXPIRED]


def test_tampered_packets_are_never_delivered(pair):
    a, b, _ = pair
    pkt = ipv4("10.0.0.1", "10.0.0.2", b"secret" * 50)
    _, (msg,), _ = a.seal([pkt])
    for pos in list(range(8, len(msg))):
        bad = bytearray(msg)
        bad[pos] ^= 0x40
        delivered, st = b.open([bytes(bad)])
        assert delivered == [] and st[0] in (lib.VC_WG_BAD_TAG, lib.VC_WG_UNKNOWN_INDEX, lib.VC_WG_REPLAY)
    assert b.open([msg])[0] == [pkt]                    # the real one still gets through
    assert b.stats(3).drops[lib.VC_WG_BAD_TAG] > 0


def test_not_allowed_source_malformed_keepalive_and_other(pair):
    a, b, key = pair
    spoof = ipv4("10.9.9.9", "10.0.0.2")          # B only allows 10.0.0.1 from A
    _, (m_spoof,), _ = a.seal([spoof])
    # keepalive: sealed for the peer directly
    out = ffi.new("uint8_t[]", 64)
    out_len = ffi.new("uint32_t *")
    assert lib.vc_wg_seal_for_peer(a.t, 0, ffi.NULL, 0, MTU, 1.0, out, out_len) == 0
    keepalive = ffi.buffer(out, out_len[0])[:]
    assert len(keepalive) == 32
    handshake = b"\x01\0\0\0" + bytes(144)
    delivered, st = b.open([m_spoof, keepalive, handshake, b"\x04\0\0\0short", b""])
    assert delivered == []
    assert st == [lib.VC_WG_NOT_ALLOWED, lib.VC_WG_KEEPALIVE, lib.VC_WG_NOT_DATA,
                  lib.VC_WG_MALFORMED, lib.VC_WG_NOT_DATA]
    assert [b.other[i] for i in range(b.n_other[0])] == [2, 4]
    assert b.n_touched[0] == 1 and b.touched[0] == 3
    drops = ffi.new("uint64_t[12]")
    lib.vc_wg_table_drops(b.t, drops)
    assert drops[lib.VC_WG_MALFORMED] == 1
    assert b.stats(3).drops[lib.VC_WG_NOT_ALLOWED] == 1


def test_roaming_follows_authenticated_data_only(pair):
    a, b, _ = pair
    _, msgs, _ = a.seal([ipv4("10.0.0.1", "10.0.0.2")] * 2)
    b.open([msgs[0]], ep=endpoint("127.0.0.5", 4444))
    s = b.stats(3)
    assert s.endpoint_set and s.endpoint.port == 4444 and bytes(s.endpoint.addr[0:4]) == bytes([127, 0, 0, 5])
    bad = bytearray(msgs[1])
    bad[-1] ^= 1
    b.open([bytes(bad)], ep=endpoint("::1", 5555))      # forged: no roaming
    assert b.stats(3).endpoint.port == 4444
    b.open([msgs[1]], ep=endpoint("::1", 5555), now=9.0)
    s = b.stats(3)
    assert s.endpoint.family == 6 and s.endpoint.port == 5555 and s.last_rx == 9.0


def test_outgoing_drops(pair):
    a, _, _ = pair
    good = ipv4("10.0.0.1", "10.0.0.2", b"ok")
    k, msgs, st = a.seal([ipv4("10.0.0.1", "10.7.7.7"), b"\x45junk", good])
    assert k == 1 and st == [lib.VC_WG_NO_ROUTE, lib.VC_WG_MALFORMED, lib.VC_WG_OK]
    assert ffi.buffer(a.out, 4)[:] == b"\x04\0\0\0" and a.out_len[0] == len(msgs[2]) == 64
    route(a.t, "10.5.0.0/16", 1)
    assert a.seal([ipv4("10.0.0.1", "10.5.1.1")])[2] == [lib.VC_WG_NO_ENDPOINT]
    lib.vc_wg_peer_set_endpoint(a.t, 1, endpoint())
    assert a.seal([ipv4("10.0.0.1", "10.5.1.1")])[2] == [lib.VC_WG_NO_KEY]
    lib.vc_wg_tx_clear(a.t, 0)
    assert a.seal([ipv4("10.0.0.1", "10.0.0.2")])[2] == [lib.VC_WG_NO_KEY]


def test_longest_prefix_match():
    s = Side()
    t = s.t
    route(t, "10.0.0.0/8", 0)
    route(t, "10.1.0.0/16", 1)
    route(t, "10.1.2.0/24", 2)
    route(t, "0.0.0.0/0", 3)
    route(t, "fd00::/8", 4)
    route(t, "fd00:1::/32", 5)
    route(t, "::/0", 6)

    def look(a):
        ip = ipaddress.ip_address(a)
        return lib.vc_wg_route_lookup(t, ip.version, ip.packed)

    assert [look(x) for x in ("10.9.9.9", "10.1.9.9", "10.1.2.3", "11.0.0.1")] == [0, 1, 2, 3]
    assert [look(x) for x in ("fd00::1", "fd00:1::1", "2001::1")] == [4, 5, 6]
    route(t, "10.1.0.0/16", 7)                           # an allowed IP moves to its new owner
    assert look("10.1.9.9") == 7
    assert lib.vc_wg_route_remove_peer(t, 2) == 0
    assert look("10.1.2.3") == 7
    assert lib.vc_wg_route_remove_peer(t, 3) == 0
    assert look("11.0.0.1") == -1


def test_many_routes_and_peers_against_python_lpm():
    rng = random.Random(3)
    s = Side(peers=300, keypairs=16)
    nets = {}
    for peer in range(300):
        for _ in range(3):
            n = ipaddress.ip_network((rng.getrandbits(32), rng.choice([8, 16, 20, 24, 32])), strict=False)
            nets[n] = peer
            route(s.t, str(n), peer)
    for _ in range(3000):
        a = ipaddress.IPv4Address(rng.getrandbits(32)) if rng.random() < 0.5 else \
            next(iter(rng.sample(sorted(nets), 1))).network_address + 1
        best = max((n for n in nets if a in n), key=lambda n: n.prefixlen, default=None)
        assert lib.vc_wg_route_lookup(s.t, 4, a.packed) == (nets[best] if best else -1)


def test_keypair_table_add_remove():
    rng = random.Random(4)
    s = Side(peers=4, keypairs=500)
    key = os.urandom(32)
    route(s.t, "0.0.0.0/0", 1)
    live = set()
    for _ in range(3000):
        idx = rng.getrandbits(32)
        if live and rng.random() < 0.45:
            victim = rng.choice(sorted(live))
            assert lib.vc_wg_rx_remove(s.t, victim) == 0
            live.discard(victim)
        elif len(live) < 500 and idx not in live:
            assert lib.vc_wg_rx_add(s.t, idx, 1, key, 1e9) == 0
            live.add(idx)
    assert lib.vc_wg_rx_add(s.t, 12345, 9, key, 1e9) == -1          # no such peer
    sender = Side()
    lib.vc_wg_peer_set_endpoint(sender.t, 0, endpoint())
    route(sender.t, "0.0.0.0/0", 0)
    for idx in list(live)[:100] + [rng.getrandbits(32) for _ in range(20)]:
        lib.vc_wg_tx_set(sender.t, 0, idx, key, 0, 1e9)
        _, (m,), _ = sender.seal([ipv4("1.2.3.4", "5.6.7.8")])
        want = lib.VC_WG_OK if idx in live else lib.VC_WG_UNKNOWN_INDEX
        assert s.open([m])[1] == [want]


def test_keypairs_expire(pair):
    a, b, key = pair
    lib.vc_wg_tx_set(a.t, 0, 0xB0B0B0B0, key, 0, 100.0)
    pkt = ipv4("10.0.0.1", "10.0.0.2")
    k, (m,), st = a.seal([pkt], now=99.0)
    assert st == [lib.VC_WG_OK] and a.tx_touched[0] == 0 and a.n_tx_touched[0] == 1
    assert a.seal([pkt], now=100.0)[2] == [lib.VC_WG_NO_KEY]
    lib.vc_wg_rx_add(b.t, 0xB0B0B0B0, 3, key, 50.0)
    assert b.open([m], now=50.0)[1] == [lib.VC_WG_EXPIRED]
    assert b.stats(3).drops[lib.VC_WG_EXPIRED] == 1


def test_peer_reset_forgets_everything(pair):
    a, b, _ = pair
    _, (m,), _ = a.seal([ipv4("10.0.0.1", "10.0.0.2")])
    assert lib.vc_wg_peer_reset(b.t, 3) == 0
    assert b.open([m])[1] == [lib.VC_WG_UNKNOWN_INDEX]
    assert lib.vc_wg_route_lookup(b.t, 4, bytes([10, 0, 0, 1])) == -1
    assert b.stats(3).rx_packets == 0
