"""The native session table and the pure-Python one (over libsodium), fed the
same operations, packets and clock, make the same decisions: the same
status for every message, the same bytes on the wire and to the TUN, the
same flags, counters and drops, and for handshake messages the same cheap
checks, cookie replies, rate limits and queue.  Then the same for whole
devices."""

import hashlib
import random

from hypothesis import HealthCheck, given, settings, strategies as st
from nacl import bindings as nb

from vpncrypt.transport import Session, new_table, status as S, TableConfig

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, Clock, Net, make_device
from tests.transport.helpers import ipv4, ipv6

# a small handshake queue and limiter, so that load, full queues and a full
# limiter come up within a short script
CFG = TableConfig(
    reject_after_time=50.0,
    rekey_after_time=30.0,
    rekey_on_receive_age=40.0,
    reject_after_messages=400,
    rekey_after_messages=300,
    mtu=1420,
    handshake_queue=12,
    under_load_depth=4,
    under_load_hold=1.0,
    cookie_secret_age=20.0,
    ratelimit_sources=3,
)
PUBLIC = [bytes([0x40 + i]) * 32 for i in range(2)]
SEEDS = [bytes([0x70 + i]) * 32 for i in range(2)]
KEYS = [bytes([k]) * 32 for k in range(1, 9)]
ROUTES = {0: ["10.0.0.0/24", "fd00::/64"], 1: ["10.1.0.0/16"], 2: ["0.0.0.0/0"]}
ENDPOINTS = [("192.0.2.1", 51820), ("198.51.100.7", 4000), ("2001:db8::5", 443)]
# more source addresses than the limiter holds (3), one of them twice (ports)
HS_SOURCES = ENDPOINTS + [("192.0.2.1", 999), ("203.0.113.9", 7), ("2001:db8::6", 1)]


def _packet(rng, sources=("10.0.0.5", "10.1.2.3", "172.16.0.1", "10.9.9.9")):
    kind = rng.randrange(10)
    size = rng.choice([0, 1, 7, 15, 16, 17, 100, 1380, 1400, 1419, 1420, 1421, 1500])
    if kind < 6:
        return ipv4(rng.choice(sources), rng.choice(["10.0.0.9", "10.1.7.7", "8.8.8.8"]), bytes(size))
    if kind < 8:
        return ipv6(rng.choice(["fd00::5", "fd01::1"]), rng.choice(["fd00::9", "fd02::1"]), bytes(size))
    return bytes(rng.randrange(0, 30))  # not IP


def _mutate(rng, d):
    """A bit flip, a cut, another index or another counter."""
    d = bytearray(d)
    k = rng.randrange(6)
    if k == 0 and d:
        d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
    elif k == 1:
        d = d[: rng.randrange(len(d) + 1)]
    elif k == 2 and len(d) >= 8:
        d[4:8] = rng.randbytes(4)  # another index
    elif k == 3 and len(d) >= 16:
        d[8:16] = rng.randrange(0, 500).to_bytes(8, "little")
    return bytes(d)


def _mac(key, data, size=16):
    return hashlib.blake2s(data, key=key, digest_size=size).digest()


def _handshake_message(rng, i, cookies, indices):
    """A handshake message for table i (or junk), its mac1 right or wrong,
    its mac2 from a cookie the script holds or none, and a source."""
    src = rng.choice(HS_SOURCES)
    mac1_key = hashlib.blake2s(b"mac1----" + PUBLIC[i]).digest()
    kind = rng.randrange(5)
    if kind == 4:
        return bytes([rng.randrange(6)]) + rng.randbytes(rng.choice([0, 2, 3, 60, 63, 91, 147])), src
    if kind == 3:
        receiver = rng.choice(indices[i] + [rng.randrange(2**32)])
        return b"\x03\x00\x00\x00" + receiver.to_bytes(4, "little") + rng.randbytes(56), src
    if kind == 2:
        receiver = rng.choice(indices[i] + [rng.randrange(2**32)])
        body = b"\x02\x00\x00\x00" + rng.randbytes(4) + receiver.to_bytes(4, "little") + rng.randbytes(48)
    else:
        body = b"\x01\x00\x00\x00" + rng.randbytes(112)
    mac1 = _mac(mac1_key, body) if rng.random() < 0.85 else rng.randbytes(16)
    cookie = cookies[i].get(src)
    mac2 = _mac(cookie, body + mac1) if cookie is not None and rng.random() < 0.8 else bytes(16)
    d = body + mac1 + mac2
    if rng.random() < 0.1:
        d = _mutate(rng, d)
    return d, src


def _take_cookies(i, batch, res, cookies):
    """Open the cookie replies with the reference cookie code's rule (the
    cookie key, the answered message's mac1 as AAD) and keep the cookies."""
    cookie_key = hashlib.blake2s(b"cookie--" + PUBLIC[i]).digest()
    answered = [d for (d, _), code in zip(batch, res.status) if code == S.COOKIE_SENT]
    assert len(answered) == len(res.replies)
    for d, (reply, src) in zip(answered, res.replies):
        off = 116 if d[0] == 1 else 60
        cookie = nb.crypto_aead_xchacha20poly1305_ietf_decrypt(
            reply[32:], d[off : off + 16], reply[8:32], cookie_key
        )
        cookies[i][src] = cookie


def _run(backend, seed, steps):
    """Two tables A and B (each with three peers, B being A's peer 0 and A
    being B's peer 0) driven by a seeded script: handshakes install matching
    keypairs on both, A and B seal, the other side opens what arrives (lost,
    duplicated, reordered, tampered, replayed, late).  Returns everything
    observable."""
    rng = random.Random(seed)
    tabs = [new_table(backend, CFG), new_table(backend, CFG)]
    pids = []
    cookies = [{}, {}]
    indices = [[], []]  # each table's indices (reserved or keypairs)
    for k, t in enumerate(tabs):
        t.set_public_key(PUBLIC[k] if rng.random() < 0.9 else None)
        t.seed(SEEDS[k])
        ids = [t.add_peer() for _ in range(3)]
        for i, p in enumerate(ids):
            for r in ROUTES[i]:
                t.route_add(p, r)
        t.set_endpoint(ids[0], ENDPOINTS[0])
        pids.append(ids)
    log = []
    inflight = [[], []]  # datagrams on their way to table 0 / table 1
    now = 0.0
    next_index = 100
    for _ in range(steps):
        op = rng.randrange(15)
        now += rng.choice([0.0, 0.001, 0.5, 3.0, 12.0])
        if op == 0:  # a handshake: matching keypairs
            i = rng.randrange(2)  # the initiator
            k1, k2 = rng.sample(KEYS, 2)
            ia, ib = next_index + 1, next_index + 2
            next_index += 2
            ti, tr = tabs[i], tabs[1 - i]
            ok = ti.reserve_index(ia, pids[i][0]), tr.reserve_index(ib, pids[1 - i][0])
            if not all(ok):  # 4 reservations a peer at most
                log.append(("reserve refused", i, ok))
                continue
            indices[i].append(ia)
            indices[1 - i].append(ib)
            if rng.random() < 0.3:  # an initiation still waiting for its response
                log.append(("reserved", i, ia))
                continue
            tr.install(pids[1 - i][0], Session(ib, ia, k2, k1, False), now)
            ti.install(pids[i][0], Session(ia, ib, k1, k2, True), now)
            log.append(("handshake", i, ia, ib))
        elif op == 1:
            i = rng.randrange(2)
            tabs[i].set_endpoint(rng.choice(pids[i]), rng.choice(ENDPOINTS))
        elif op in (2, 3, 4, 5):  # send
            i = rng.randrange(2)
            pkts = [_packet(rng) for _ in range(rng.randrange(1, 12))]
            peer = pids[i][0] if rng.random() < 0.2 else None
            if peer is not None:
                pkts = [p if rng.random() < 0.7 else b"" for p in pkts]
            res = tabs[i].seal(pkts, now, peer=peer)
            inflight[1 - i].extend(d for d, _ in res.datagrams)
            log.append(("seal", i, res.status, res.peers, res.datagrams, res.touched))
        elif op in (6, 7, 8, 9):  # receive some of what is on its way
            i = rng.randrange(2)
            q = inflight[i]
            if not q:
                continue
            batch = []
            for _ in range(rng.randrange(1, 12)):
                j = rng.randrange(len(q))
                d = q[j] if rng.random() < 0.3 else q.pop(j)  # sometimes a duplicate
                if rng.random() < 0.15:
                    d = _mutate(rng, d)
                batch.append((d, rng.choice(ENDPOINTS)))
                if not q:
                    break
            res = tabs[i].open(batch, now)
            log.append(("open", i, res.status, res.packets, res.replies, res.queued, res.touched))
        elif op in (12, 13):  # handshake messages (or junk) arrive
            i = rng.randrange(2)
            batch = [_handshake_message(rng, i, cookies, indices) for _ in range(rng.randrange(1, 30))]
            res = tabs[i].open(batch, now)
            _take_cookies(i, batch, res, cookies)
            log.append(("handshakes in", i, res.status, res.replies, res.queued))
        elif op == 10:
            i = rng.randrange(2)
            if rng.random() < 0.2:
                tabs[i].zero(pids[i][0])
                log.append(("zero", i))
        elif op == 14:  # the protocol core takes a slice
            i = rng.randrange(2)
            log.append(
                ("take", i, tabs[i].take_handshakes(rng.randrange(0, 6)), tabs[i].handshakes_waiting(now))
            )
        else:
            tabs[rng.randrange(2)].maintain()
        for i, t in enumerate(tabs):
            log.append(("stats", i, [t.stats(p, now) for p in pids[i]], t.drops(), t.index_count()))
    return log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_tables_decide_alike(seed):
    native = _run("native", seed, 60)
    reference = _run("pynacl", seed, 60)
    assert len(native) == len(reference)
    for n, r in zip(native, reference):
        assert n == r


def _device_world(backend, seed):
    clock = Clock()

    class Crypto:
        name = backend

    a = make_device(Crypto, clock, 1)
    b = make_device(Crypto, clock, 2)
    a.add_peer(b.public_key, allowed_ips=[B_IP + "/32"], endpoint=B_ADDR, persistent_keepalive=0)
    b.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    net = Net(clock)
    net.add(A_ADDR, a)
    net.add(B_ADDR, b)
    rng = random.Random(seed)
    loss = rng.random() * 0.3
    net.drop = lambda s, d, data: rng.random() < loss
    for _ in range(40):
        who = rng.choice([A_ADDR, B_ADDR])
        src, dst = (A_IP, B_IP) if who == A_ADDR else (B_IP, A_IP)
        net.send(
            who,
            [
                ipv4(src, dst, bytes([rng.randrange(256)]) * rng.randrange(0, 1400))
                for _ in range(rng.randrange(1, 5))
            ],
        )
        net.advance(clock.now + rng.choice([0.1, 2.0, 7.0, 30.0]))
    return net, a, b


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_devices_put_the_same_bytes_on_the_wire(seed):
    """Two whole devices per backend, the same rng and clock, a lossy network:
    every datagram on the wire and every packet delivered is the same."""
    n_net, na, nb = _device_world("native", seed)
    p_net, pa, pb = _device_world("pynacl", seed)
    assert n_net.log == p_net.log
    assert n_net.delivered == p_net.delivered
    assert na.drops() == pa.drops() and nb.drops() == pb.drops()
    assert na.counters.as_dict() == pa.counters.as_dict()
