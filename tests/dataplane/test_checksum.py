"""The native Internet checksum (RFC 1071) that the TUN offloads use, against
the independent Python sum of offload_ref, at every length and alignment the
vector blocks (64 and 16 bytes) and the scalar tail (4, 2 and 1 bytes) can
meet, up to the largest IP packet (65535 bytes)."""

import random

from tests.dataplane import offload_ref as R
from vpncrypt._native import ffi, lib


def native_sum(data: bytes, start: int = 0, align: int = 0) -> int:
    buf = ffi.new("uint8_t[]", align + len(data) + 1)
    ffi.memmove(buf + align, data, len(data))
    return lib.vc_csum_fold(buf + align, len(data), start)


def test_every_length_and_alignment():
    rnd = random.Random(1071)
    for n in list(range(0, 200)) + [255, 256, 257, 1367, 1368, 1369, 1472, 9000]:
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        for align in (0, 1, 2, 3, 7, 8, 15):
            assert native_sum(data, 0, align) == R.ones_sum(data), (n, align)


def test_all_ones_does_not_overflow():
    # 0xFF bytes make every 32-bit word 0xFFFFFFFF: the lanes' largest sums
    for n in (64, 65535 - 20, 65535):
        data = b"\xff" * n
        assert native_sum(data) == R.ones_sum(data)


def test_initial_value_is_added():
    data = bytes(range(256)) * 3
    for start in (0, 1, 0xFFFF, 0x1FFFE, 0xFFFFFFFF):
        want = R.ones_sum(data, (start & 0xFFFF) + (start >> 16))
        assert native_sum(data, start) == want
