"""Buffers that sit right against PROT_NONE pages, so that a read or write one
byte outside them kills the process (the test then fails)."""

import ctypes
import mmap

from vpncrypt._native import ffi

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_NONE, PROT_READ, PROT_RW = 0, 1, 3
MAP_PRIVATE_ANON = 0x02 | 0x20


class Guarded:
    """[guard page][data pages][guard page]; `tail(n)` is n bytes ending at the
    upper guard, `head(n)` is n bytes starting right after the lower guard."""

    def __init__(self, data_pages: int = 1):
        self.size = (data_pages + 2) * PAGE
        base = _libc.mmap(None, self.size, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        self.base = base
        self.lo = base + PAGE
        self.hi = base + (data_pages + 1) * PAGE
        _libc.mprotect(base, PAGE, PROT_NONE)
        _libc.mprotect(self.hi, PAGE, PROT_NONE)

    def protect_data_read_only(self):
        """Make the data pages read-only: a store into them kills the process."""
        if _libc.mprotect(self.lo, self.hi - self.lo, PROT_READ) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")

    def tail(self, n: int, data: bytes = b""):
        return self._at(self.hi - n, n, data)

    def head(self, n: int, data: bytes = b""):
        return self._at(self.lo, n, data)

    @staticmethod
    def _at(addr: int, n: int, data: bytes):
        if data:
            ctypes.memmove(addr, data, len(data))
        return ffi.cast("uint8_t *", addr)

    @staticmethod
    def read(ptr, n: int) -> bytes:
        return ffi.buffer(ptr, n)[:] if n else b""

    def close(self):
        _libc.munmap(self.base, self.size)
