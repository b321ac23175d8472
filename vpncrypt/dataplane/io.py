"""Thin wrappers over native/vc_io.h.

Every class allocates its cffi slab and arrays once; a batch call fills them in
place and returns views, so the per-packet work left in Python is whatever the
caller does with offsets, lengths and endpoints.  Received data is valid until
the next receive on the same object.
"""
import errno as _errno
import fcntl
import os
import struct

from vpncrypt._native import ffi, lib
from vpncrypt.endpoints import pack_endpoint, unpack_endpoint

__all__ = ["EndpointCache", "UdpBatchSocket", "TunBatch", "endpoint_to_addr",
           "endpoint_from_addr", "open_tun"]

_EP_SIZE = ffi.sizeof("vc_endpoint")


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


# ---------------------------------------------------------------- endpoints

class EndpointCache:
    """vc_endpoint <-> (host, port) conversion (vpncrypt.endpoints) with bounded dictionaries.

    IPv4 (and v4-mapped) addresses come back as (host, port); IPv6 as
    (host, port), or (host, port, 0, scope_id) with a scope."""

    def __init__(self, limit: int = 4096):
        self._limit = limit
        self._addr = {}     # 24-byte key -> tuple
        self._key = {}      # tuple -> 24-byte key

    def key(self, ep) -> bytes:
        """The 24 raw bytes of a vc_endpoint (a usable dict key)."""
        return ffi.buffer(ep, _EP_SIZE)[:]

    def to_addr(self, ep):
        k = ffi.buffer(ep, _EP_SIZE)[:]
        a = self._addr.get(k)
        if a is None:
            if len(self._addr) >= self._limit:
                self._addr.clear()
            a = self._addr[k] = unpack_endpoint(k)
        return a

    def fill(self, ep, addr) -> None:
        """Write addr into the vc_endpoint at ep (a `vc_endpoint *`)."""
        k = self._key.get(addr)
        if k is None:
            if len(self._key) >= self._limit:
                self._key.clear()
            k = self._key[addr] = pack_endpoint(addr)
        ffi.memmove(ep, k, _EP_SIZE)


_cache = EndpointCache()


def endpoint_to_addr(ep):
    """(host, port) of a `vc_endpoint *` (cached)."""
    return _cache.to_addr(ep)


def endpoint_from_addr(addr, out=None):
    """Fill `out` (a `vc_endpoint *`, allocated if None) from a (host, port[, flow, scope]) tuple."""
    if out is None:
        out = ffi.new("vc_endpoint *")
    _cache.fill(out, addr)
    return out


# ---------------------------------------------------------------- UDP

class UdpBatchSocket:
    """A non-blocking UDP socket read and written in batches.

    recv() -> (n, view, off, len, ep): datagram i is view[off[i]:off[i]+len[i]]
    from endpoint ep[i]; view is a memoryview of the whole receive slab and off,
    len, ep are cffi arrays (also self.slab for the raw pointer).  segs[b] for
    b < nbufs tells how many consecutive datagrams came from one GRO buffer.
    send(buf, off, len, ep, n) -> (sent, errno).
    """

    def __init__(self, sock, batch: int = 64, gro: bool = True, gso: bool = True,
                 mtu: int = 2048, slots: int = None):
        if batch < 1:
            raise ValueError("batch must be >= 1")
        self.sock = sock
        sock.setblocking(False)
        self.fd = sock.fileno()
        self.batch = batch
        self.mtu = mtu
        self.gro = bool(gro) and lib.vc_udp_set_gro(self.fd, 1) == 0
        self.gso = bool(gso) and bool(lib.vc_udp_gso_supported(self.fd))
        self.slot = lib.VC_UDP_GRO_SLOT if self.gro else (mtu + 15) & ~15
        self.slab_size = self.slot * (slots or batch)
        self.slab = ffi.new("uint8_t[]", self.slab_size)
        self.view = memoryview(ffi.buffer(self.slab))
        self.off = ffi.new("uint32_t[]", batch)
        self.len = ffi.new("uint32_t[]", batch)
        self.ep = ffi.new("vc_endpoint[]", batch)
        self.segs = ffi.new("uint32_t[]", batch)
        self._nbufs = ffi.new("int *")
        self.nbufs = 0
        self.state = ffi.new("vc_udp_rx *")
        self._err = ffi.new("int *")
        # send side, for send_datagrams()
        self.tx_off = ffi.new("uint32_t[]", batch)
        self.tx_len = ffi.new("uint32_t[]", batch)
        self.tx_ep = ffi.new("vc_endpoint[]", batch)
        self.tx_slab = ffi.new("uint8_t[]", batch * mtu)
        self.endpoints = _cache
        self._recv = lib.vc_udp_recv_batch_segs
        self._send = lib.vc_udp_send_batch

    @property
    def dropped(self) -> int:
        return self.state.dropped

    def recv(self):
        n = self._recv(self.fd, self.state, self.slab, self.slab_size, self.mtu, self.off,
                       self.len, self.ep, self.batch, self.gro, self.segs, self._nbufs)
        if n < 0:
            raise _oserror(-n)
        self.nbufs = self._nbufs[0]
        return n, self.view, self.off, self.len, self.ep

    def send(self, buf, off, lens, ep, n: int):
        """Send n datagrams; buf is a cffi pointer or a buffer, off/lens cffi
        uint32_t arrays, ep a cffi vc_endpoint array (None: connected socket).
        Returns (sent, errno) with errno 0 if none; see vc_udp_send_batch."""
        if not isinstance(buf, ffi.CData):
            buf = ffi.from_buffer(buf)
        sent = self._send(self.fd, buf, off, lens, ffi.NULL if ep is None else ep, n,
                          self.gso, self._err)
        e = self._err[0]
        if e in (_errno.EIO, _errno.EINVAL, _errno.EMSGSIZE) and sent == n and self.gso:
            self.gso = False            # the route cannot segment
        return sent, e

    # convenience (slow path: tests, handshakes) ----------------------------------

    def recv_datagrams(self):
        """[(bytes, addr), ...] for one recv() batch."""
        n, view, off, lens, ep = self.recv()
        to_addr = self.endpoints.to_addr
        return [(bytes(view[off[i]:off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]

    def send_datagrams(self, datagrams, connected: bool = False):
        """Send [(bytes, addr), ...] (addr ignored if connected) through the
        preallocated tx slab, batch by batch.  Returns (sent, first errno)."""
        total, first_err, i = 0, 0, 0
        tx = ffi.buffer(self.tx_slab)
        while i < len(datagrams):
            pos, k = 0, 0
            while i < len(datagrams) and k < self.batch:
                data, addr = datagrams[i]
                if len(data) > self.mtu:
                    raise ValueError(f"datagram of {len(data)} bytes exceeds mtu {self.mtu}")
                tx[pos:pos + len(data)] = data
                self.tx_off[k] = pos
                self.tx_len[k] = len(data)
                if not connected:
                    self.endpoints.fill(self.tx_ep + k, addr)
                pos += len(data)
                k += 1
                i += 1
            sent, e = self.send(self.tx_slab, self.tx_off, self.tx_len,
                                None if connected else self.tx_ep, k)
            total += sent
            first_err = first_err or e
        return total, first_err


# ---------------------------------------------------------------- TUN

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str = "", flags: int = IFF_TUN | IFF_NO_PI):
    """Open /dev/net/tun non-blocking and attach it to `name` (a kernel-chosen
    tunN if empty).  Returns (fd, ifname)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        ifr = struct.pack("16sH22x", name.encode(), flags)
        res = fcntl.ioctl(fd, TUNSETIFF, ifr)
    except BaseException:
        os.close(fd)
        raise
    return fd, res[:16].rstrip(b"\0").decode()


class TunBatch:
    """Batch reads/writes on a non-blocking IFF_TUN|IFF_NO_PI fd.

    read() -> (n, view, off, len); write(buf, off, len, n) -> (written, errno)."""

    def __init__(self, fd: int, mtu: int = 1500, batch: int = 64):
        self.fd = fd
        self.mtu = mtu
        self.batch = batch
        self.slot = (mtu + 15) & ~15
        self.slab_size = self.slot * batch
        self.slab = ffi.new("uint8_t[]", self.slab_size)
        self.view = memoryview(ffi.buffer(self.slab))
        self.off = ffi.new("uint32_t[]", batch)
        self.len = ffi.new("uint32_t[]", batch)
        self.tx_off = ffi.new("uint32_t[]", batch)
        self.tx_len = ffi.new("uint32_t[]", batch)
        self.tx_slab = ffi.new("uint8_t[]", self.slab_size)
        self._err = ffi.new("int *")

    def read(self):
        n = lib.vc_tun_read_batch(self.fd, self.slab, self.slab_size, self.mtu,
                                  self.off, self.len, self.batch)
        if n < 0:
            raise _oserror(-n)
        return n, self.view, self.off, self.len

    def write(self, buf, off, lens, n: int):
        if not isinstance(buf, ffi.CData):
            buf = ffi.from_buffer(buf)
        w = lib.vc_tun_write_batch(self.fd, buf, off, lens, n, self._err)
        return w, self._err[0]

    def read_packets(self):
        n, view, off, lens = self.read()
        return [bytes(view[off[i]:off[i] + lens[i]]) for i in range(n)]

    def write_packets(self, packets):
        total, first_err, i = 0, 0, 0
        tx = ffi.buffer(self.tx_slab)
        while i < len(packets):
            pos, k = 0, 0
            while i < len(packets) and k < self.batch:
                p = packets[i]
                if len(p) > self.slot:
                    raise ValueError(f"packet of {len(p)} bytes exceeds mtu {self.mtu}")
                tx[pos:pos + len(p)] = p
                self.tx_off[k], self.tx_len[k] = pos, len(p)
                pos += self.slot
                k += 1
                i += 1
            w, e = self.write(self.tx_slab, self.tx_off, self.tx_len, k)
            total += w
            first_err = first_err or e
        return total, first_err
