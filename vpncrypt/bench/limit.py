"""The loopback bench's own limit (issue 22's target for `vpncrypt loopback-bench`).

The encrypted row cannot go faster than the unencrypted baseline row of the same
run plus what sealing must add.  So its limit is one packet per

    (the baseline row's CPU seconds per packet + the C-level seal of one packet)

and the target is to reach 85% of it.  Which seal: the session table's seal path
(vc_wg_seal_batch: route lookup, nonce, padding, the 16-byte header, then
ChaCha20-Poly1305), not the bare AEAD, because everything in it is work the
baseline does not do and every WireGuard sender must do per packet; the AEAD
alone leaves the table's share to count against the data plane.  The packet is
the one the bench sends at --size S: an IPv4/UDP packet of 28 + S bytes (1500 at
the default --size 1472), built by the bench's own packet source
(vc_traffic_fill).  It is sealed `batch` at a time, as the data plane does, and
the time is the thread's CPU time (time.thread_time), so a busy machine that
takes the core away does not count; the Python call, once per batch, is
included (about 1 us, under 2% of a 64-packet batch of 1500-byte packets).
``aead_seal_s`` gives the bare AEAD of the same bytes for comparison.

The per-packet baseline cost is the larger of the two worker processes' (A's
source and send, B's receive and check): they run at once, so the slower sets
the rate.

    from vpncrypt.bench.limit import measure_limit
    lim = measure_limit(baseline_row, size=1472, batch=64)
    lim["limit_pps"], lim["seal_s_per_packet"], ...
"""

import os
import socket
import time

HEADER = 28  # IPv4 + UDP, as the bench's packets (vc_traffic_fill)
SRC, DST = "10.0.0.1", "10.0.0.2"


def _packets(size: int, batch: int):
    """A slab of `batch` bench packets of HEADER + size bytes: (slab, off, len, stride)."""
    from vpncrypt._native import ffi, lib

    total = HEADER + size
    stride = (total + 63) & ~63
    slab = ffi.new("uint8_t[]", batch * stride)
    off = ffi.new("uint32_t[]", batch)
    lens = ffi.new("uint32_t[]", batch)
    payload = ffi.new("uint32_t[]", [size] * batch)
    src = ffi.new("uint8_t[4]", socket.inet_aton(SRC))
    dst = ffi.new("uint8_t[4]", socket.inet_aton(DST))
    if lib.vc_traffic_fill(slab, stride, 0, off, lens, payload, batch, src, dst, 1, 0, 0) != batch:
        raise ValueError(f"a {total}-byte packet does not fit")
    return slab, off, lens, stride


def _timed(fn, seconds: float, per_call: int) -> float:
    """CPU seconds per item of fn() (per_call items a call): the fastest of 5
    runs of seconds/5 each, after a warm-up call."""
    fn()
    best = float("inf")
    for _ in range(5):
        calls = 0
        t0 = time.thread_time()
        deadline = time.monotonic() + seconds / 5
        while True:
            fn()
            calls += 1
            if calls % 16 == 0 and time.monotonic() >= deadline:
                break
        dt = (time.thread_time() - t0) / (calls * per_call)
        best = min(best, dt)
    return best


def seal_s(size: int = 1472, batch: int = 64, seconds: float = 0.5) -> float:
    """CPU seconds per packet of the session table's seal path for the bench's
    packet of HEADER + size bytes, `batch` per call."""
    from vpncrypt.transport import Session
    from vpncrypt.transport.native import NativeTable

    table = NativeTable()
    pid = table.add_peer()
    table.set_endpoint(pid, ("127.0.0.1", 9))
    table.route_add(pid, DST + "/32")
    local = int.from_bytes(os.urandom(4), "little") | 1
    if not table.reserve_index(local, pid):
        raise RuntimeError("cannot reserve a session index")
    now = table.clock(time.monotonic())
    table.install(pid, Session(local, local ^ 0xFFFF, os.urandom(32), os.urandom(32), True), now)
    slab, off, lens, _stride = _packets(size, batch)
    b = table.batch(batch, HEADER + size + 16 + 16 + 16)
    seal = b.seal

    def once():
        if seal(slab, off, lens, batch, now) != batch:
            raise RuntimeError("the table did not seal the whole batch")

    return _timed(once, seconds, batch)


def aead_seal_s(size: int = 1472, batch: int = 64, seconds: float = 0.3) -> float:
    """CPU seconds per packet of the bare ChaCha20-Poly1305 seal
    (vc_aead_seal_packed, one key, `batch` packets a call) of the same
    HEADER + size bytes padded to 16, as the table seals them."""
    from vpncrypt._native import ffi, lib

    n = (HEADER + size + 15) & ~15
    src = ffi.new("uint8_t[]", n * batch)
    out = ffi.new("uint8_t[]", (n + 16) * batch)
    lens = ffi.new("uint32_t[]", [n] * batch)
    nonces = ffi.new("uint8_t[]", bytes(12) * batch)
    status = ffi.new("int32_t[]", batch)
    key = ffi.new("uint8_t[32]", os.urandom(32))
    seal = lib.vc_aead_seal_packed

    def once():
        if seal(out, src, lens, batch, nonces, ffi.NULL, 0, key, status) != batch:
            raise RuntimeError("the AEAD refused the batch")

    return _timed(once, seconds, batch)


def baseline_cpu_per_packet(row) -> float:
    """The baseline row's CPU seconds per packet: the slower worker's."""
    cpu = row["cpu_s_per_packet"]
    return max(cpu["A"], cpu["B"])


def measure_limit(baseline_row, *, size: int = 1472, batch: int = 64, seconds: float = 0.5) -> dict:
    """The limit of the run whose baseline row is given, the seal measured now
    (call it in the same run, after the rows)."""
    base = baseline_cpu_per_packet(baseline_row)
    s = seal_s(size, batch, seconds)
    a = aead_seal_s(size, batch, seconds * 0.6)
    return {
        "packet_bytes": HEADER + size,
        "baseline_cpu_s_per_packet": base,
        "seal_s_per_packet": s,
        "aead_seal_s_per_packet": a,
        "limit_pps": 1.0 / (base + s),
    }


def fraction_of_limit(row, limit: dict) -> float:
    """packets/s of an encrypted row as a fraction of the limit."""
    return row["pps"] / limit["limit_pps"]


def fraction_by_cpu(row, limit: dict) -> float:
    """The limit's CPU per packet (baseline + seal) over the encrypted row's,
    the slower worker's: how close the row comes by its own cost, whatever
    share of the cores the machine gave it."""
    cpu = row["cpu_s_per_packet"]
    return (limit["baseline_cpu_s_per_packet"] + limit["seal_s_per_packet"]) / max(cpu["A"], cpu["B"])


def describe(limit: dict, row=None) -> str:
    """The line the bench prints."""
    text = (
        f"limit: {limit['limit_pps']:,.0f} packets/s = 1 / (baseline "
        f"{limit['baseline_cpu_s_per_packet'] * 1e6:.2f} us/packet + seal "
        f"{limit['seal_s_per_packet'] * 1e6:.2f} us of a {limit['packet_bytes']}-byte packet; "
        f"AEAD alone {limit['aead_seal_s_per_packet'] * 1e6:.2f} us)"
    )
    if row is not None and row.get("pps"):
        text += f"; the encrypted row reaches {100 * fraction_of_limit(row, limit):.0f}% of it"
        if row.get("cpu_s_per_packet"):
            text += f" ({100 * fraction_by_cpu(row, limit):.0f}% by CPU per packet)"
    return text
