"""The native table's zero-copy batch form, as the data plane uses it: array
bounds, in-place opening, and many threads on one table."""

import threading

import pytest

from vpncrypt._native import ffi
from vpncrypt.transport import Session, TableConfig, new_table, status as S

from tests.transport.helpers import A_ADDR, KEY_AB, KEY_BA, b_side, install, ipv4, message, table_with_peer
from vpncrypt.transport.endpoint_cache import endpoint_from_addr

TO_A = ipv4("10.0.0.2", "10.0.0.1", bytes(100))


def slab_of(packets, stride=2048):
    n = len(packets)
    slab = ffi.new("uint8_t[]", max(1, n * stride))
    off = ffi.new("uint32_t[]", [i * stride for i in range(n)] or [0])
    lens = ffi.new("uint32_t[]", [len(p) for p in packets] or [0])
    for i, p in enumerate(packets):
        ffi.memmove(slab + i * stride, p, len(p))
    return slab, off, lens


def test_batch_refuses_more_than_its_capacity():
    """n is checked against the arrays before any table work (a larger n
    once overflowed the heap: loopback-bench --peers 8 --batch 2)."""
    t, pid = table_with_peer("native")
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    b = t.batch(2, 2048)
    slab, off, lens = slab_of([TO_A] * 3)
    with pytest.raises(ValueError):
        b.seal(slab, off, lens, 3, 0.0)
    eps = ffi.new("vc_endpoint[]", 3)
    with pytest.raises(ValueError):
        b.open(slab, off, lens, eps, 3, 0.0)
    assert b.seal(slab, off, lens, 2, 0.0) == 2
    with pytest.raises(ValueError):
        t.batch(0, 2048)
    with pytest.raises(ValueError):
        t.batch(1025, 2048)


def test_native_calls_refuse_short_arrays():
    """The C side checks the capacities it is given too."""
    from vpncrypt._native import lib

    t, pid = table_with_peer("native")
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    slab, off, lens = slab_of([TO_A] * 4)
    out = ffi.new("uint8_t[]", 4 * 2048)
    arr = [
        ffi.new("uint32_t[]", 4),
        ffi.new("vc_endpoint[]", 4),
        ffi.new("int32_t[]", 4),
        ffi.new("int32_t[]", 4),
        ffi.new("vc_wg_touch[]", 4),
        ffi.new("size_t *"),
    ]
    r = lib.vc_wg_seal_batch(
        t.ptr, slab, off, lens, 4, -1, 0.0, out, 2048, 3, arr[0], arr[1], arr[2], arr[3], arr[4], 4, arr[5]
    )
    assert r == ffi.cast("size_t", -1)
    r = lib.vc_wg_seal_batch(
        t.ptr, slab, off, lens, 4, -1, 0.0, out, 2048, 4, arr[0], arr[1], arr[2], arr[3], arr[4], 3, arr[5]
    )
    assert r == ffi.cast("size_t", -1)
    assert t.stats(pid, 0.0).current.send_counter == 0


def test_open_in_place_leaves_failures_untouched():
    t, pid = b_side("native")
    good = message(KEY_AB, 7, 0, ipv4("10.0.0.1", "10.0.0.2", b"secret" * 10))
    bad = bytearray(message(KEY_AB, 7, 1, ipv4("10.0.0.1", "10.0.0.2", b"secret" * 10)))
    bad[20] ^= 1
    packets = [good, bytes(bad), good]  # the third is a replay
    slab, off, lens = slab_of(packets)
    eps = ffi.new("vc_endpoint[]", 3)
    for i in range(3):
        endpoint_from_addr(A_ADDR, eps + i)
    b = t.batch(4, 64)
    delivered, n_reply = b.open(slab, off, lens, eps, 3, 1.0)
    assert (delivered, n_reply, b.n_queued) == (1, 0, 0)
    assert [b.status[i] for i in range(3)] == [S.OK, S.BAD_TAG, S.REPLAY]
    assert ffi.buffer(slab + 2048, len(bad))[:] == bytes(bad)
    assert ffi.buffer(slab + 4096, len(good))[:] == good
    assert ffi.buffer(slab + b.deliver_off[0], b.deliver_len[0])[:] == ipv4(
        "10.0.0.1", "10.0.0.2", b"secret" * 10
    )


def test_threads_never_share_a_nonce():
    """Four threads seal for one peer at once (the batch calls release the
    GIL): every counter is used exactly once."""
    t, pid = table_with_peer("native")
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    per_thread, rounds = 64, 200
    seen = [[] for _ in range(4)]

    def work(k):
        b = t.batch(per_thread, 256)
        slab, off, lens = slab_of([TO_A] * per_thread, 256)
        for _ in range(rounds):
            n = b.seal(slab, off, lens, per_thread, 0.0)
            assert n == per_thread
            seen[k].extend(
                int.from_bytes(ffi.buffer(b.tx_slab + j * b.stride + 8, 8)[:], "little") for j in range(n)
            )

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    counters = [c for s in seen for c in s]
    assert len(counters) == 4 * per_thread * rounds
    assert sorted(counters) == list(range(len(counters)))
    assert t.stats(pid, 0.0).current.send_counter == len(counters)


def test_threads_open_seal_and_reconfigure_together():
    """Opening and sealing on worker threads while the main thread installs
    keypairs, moves routes and adds and removes peers: no message is
    delivered twice or without authenticating, and nothing breaks."""
    t = new_table("native", TableConfig())
    pid = t.add_peer()
    t.route_add(pid, "10.0.0.1/32")
    t.set_endpoint(pid, A_ADDR)
    install(t, pid, 7, 5, KEY_BA, KEY_AB, True)
    stop = threading.Event()
    stats = {"delivered": 0, "sealed": 0}
    msgs = [message(KEY_AB, 7, c, ipv4("10.0.0.1", "10.0.0.2", bytes(64))) for c in range(2000)]

    def opener():
        b = t.batch(80, 64)
        eps = ffi.new("vc_endpoint[]", 80)
        for i in range(80):
            endpoint_from_addr(A_ADDR, eps + i)
        i = 0
        while i < len(msgs):
            chunk = msgs[i : i + 64] + msgs[i : i + 8]  # with duplicates
            slab, off, lens = slab_of(chunk, 256)
            d, _ = b.open(slab, off, lens, eps, len(chunk), 1.0)
            stats["delivered"] += d
            i += 64

    def sealer():
        b = t.batch(64, 256)
        slab, off, lens = slab_of([TO_A] * 64, 256)
        while not stop.is_set():
            stats["sealed"] += b.seal(slab, off, lens, 64, 1.0)

    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                stop.set()

        return run

    workers = [threading.Thread(target=guarded(opener)), threading.Thread(target=guarded(sealer))]
    for w in workers:
        w.start()
    extra = []
    for k in range(300):
        p = t.add_peer()
        t.route_add(p, f"10.50.{k // 250}.{k % 250}/32")
        assert t.reserve_index(10_000 + k, p)
        t.install(p, Session(10_000 + k, k, KEY_AB, KEY_BA, k % 2 == 0), 1.0)
        extra.append(p)
        if k % 3 == 0:
            t.remove_peer(extra.pop(0))
        t.maintain()
    workers[0].join()
    stop.set()
    workers[1].join()
    assert errors == []
    assert stats["delivered"] == 2000
    assert stats["sealed"] > 0
    assert t.stats(pid, 1.0).drops == {"replay": 32 * 8}  # the 8 duplicates of each chunk
