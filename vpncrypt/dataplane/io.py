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
from collections.abc import Sequence
from typing import Any

from vpncrypt._native import ffi, lib
from vpncrypt.transport.cnative import CData
import socket

__all__ = [
    "EndpointCache",
    "UdpBatchSocket",
    "TunBatch",
    "endpoint_to_addr",
    "endpoint_from_addr",
    "open_tun",
    "set_txqueuelen",
    "offload_names",
    "OFFLOAD_ALL",
    "set_tso",
    "get_tso",
]

from vpncrypt.transport.endpoint_cache import EndpointCache, _cache, endpoint_from_addr, endpoint_to_addr  # noqa: E402,F401


# Errors read from a socket's error queue at once (as a native round's, 8).
ERRORS_PER_READ = 8
# A receive's socket error that an ICMP message set (IP_RECVERR): the error
# queue holds it, no failure of the socket.
_ICMP_ERRNOS = frozenset(
    (_errno.EMSGSIZE, _errno.ECONNREFUSED, _errno.EHOSTUNREACH, _errno.ENETUNREACH, _errno.EHOSTDOWN)
)


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


# ---------------------------------------------------------------- UDP


def _slab(size: int, batch: int) -> tuple[Any, memoryview, Any, Any]:
    """A packet slab of size bytes, a view of it, and the offset and length
    arrays of batch packets in it (what the C batch calls fill or read)."""
    slab = ffi.new("uint8_t[]", size)
    return slab, memoryview(ffi.buffer(slab)), ffi.new("uint32_t[]", batch), ffi.new("uint32_t[]", batch)


class UdpBatchSocket:
    """A non-blocking UDP socket read and written in batches.

    recv() -> (n, view, off, len, ep): datagram i is view[off[i]:off[i]+len[i]]
    from endpoint ep[i]; view is a memoryview of the whole receive slab and off,
    len, ep are cffi arrays (also self.slab for the raw pointer).  segs[b] for
    b < nbufs tells how many consecutive datagrams came from one GRO buffer.
    send(buf, off, len, ep, n) -> (sent, errno).

    sticky: each ep[i] also says the local address the datagram was sent to
    (IP_PKTINFO / IPV6_PKTINFO on the socket), and a send leaves from an
    endpoint's such address (the Linux module's sticky source address); off,
    every reply leaves from the address routing picks.

    pmtu: the socket's error queue is on and the kernel's path MTU
    discovery explicitly so (vc_udp_set_pmtu: IP_RECVERR, IPV6_RECVERR,
    IP_PMTUDISC_WANT, IPV6_PMTUDISC_WANT): a receive that finds nothing, or
    the socket error of an ICMP message, reads the queue (read_errors) so
    that its POLLERR never spins the loop; the native rounds give what it
    holds to the session table (the peers' path MTU).
    """

    def __init__(
        self,
        sock: socket.socket,
        batch: int = 64,
        gro: bool = True,
        gso: bool = True,
        mtu: int = 2048,
        slots: int | None = None,
        sticky: bool = True,
        pmtu: bool = True,
    ) -> None:
        if batch < 1:
            raise ValueError("batch must be >= 1")
        if not 1 <= batch <= lib.VC_UDP_ROUND_BUFS:
            raise ValueError(f"batch {batch}: 1 to {lib.VC_UDP_ROUND_BUFS} datagrams")
        self.sock = sock
        sock.setblocking(False)
        self.fd = sock.fileno()
        self.batch = batch
        self.mtu = mtu
        self.gro = bool(gro) and lib.vc_udp_set_gro(self.fd, 1) == 0
        self.gso = bool(gso) and bool(lib.vc_udp_gso_supported(self.fd))
        self.sticky = bool(sticky) and lib.vc_udp_set_pktinfo(self.fd, 1) == 0
        self.pmtu = bool(pmtu) and lib.vc_udp_set_pmtu(self.fd) == 0
        self.errors = ffi.new("vc_udp_error[]", ERRORS_PER_READ)
        self.errors_read = 0  # how many of them the last read_errors() read
        self.slot = lib.VC_UDP_GRO_SLOT if self.gro else (mtu + 15) & ~15
        self.slab_size = self.slot * (slots or batch)
        self.slab, self.view, self.off, self.len = _slab(self.slab_size, batch)
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

    def twin(self) -> "UdpBatchSocket":
        """Another object on the same socket with arrays and receive state of
        its own, for another thread (the kernel hands each datagram to one
        reader)."""
        return UdpBatchSocket(
            self.sock,
            batch=self.batch,
            gro=self.gro,
            gso=self.gso,
            mtu=self.mtu,
            sticky=self.sticky,
            pmtu=self.pmtu,
        )

    @property
    def dropped(self) -> int:
        n: int = self.state.dropped
        return n

    @property
    def aqm_dropped(self) -> int:
        """Transport data messages the receive round's (opt-in) CoDel dropped
        from this object's receive state (vc_udp_rx.aqm_dropped)."""
        return int(self.state.aqm_dropped)

    def holds(self) -> bool:
        """Whether the last receive left datagrams in this object's own state
        (the segments of a GRO buffer past the batch): the next receive
        reports them, but they do not make the fd readable."""
        st = self.state
        held: bool = st.next < st.npend
        return held

    def recv(self) -> tuple[int, memoryview, CData, CData, CData]:
        n = self._recv(
            self.fd,
            self.state,
            self.slab,
            self.slab_size,
            self.mtu,
            self.off,
            self.len,
            self.ep,
            self.batch,
            self.gro,
            self.segs,
            self._nbufs,
        )
        if n <= 0 and self.pmtu and (n == 0 or -n in _ICMP_ERRNOS):
            self.read_errors()
            n = max(n, 0)
        if n < 0:
            raise _oserror(-n)
        self.nbufs = self._nbufs[0]
        return n, self.view, self.off, self.len, self.ep

    def read_errors(self) -> int:
        """Up to ERRORS_PER_READ errors from the socket's error queue into
        self.errors (vc_udp_error); returns how many (0 on any failure)."""
        self.errors_read = max(0, lib.vc_udp_read_errors(self.fd, self.errors, ERRORS_PER_READ))
        return self.errors_read

    def send(self, buf: CData | bytes, off: CData, lens: CData, ep: CData | None, n: int) -> tuple[int, int]:
        """Send n datagrams; buf is a cffi pointer or a buffer, off/lens cffi
        uint32_t arrays, ep a cffi vc_endpoint array (None: connected socket).
        Returns (sent, errno) with errno 0 if none; see vc_udp_send_batch."""
        if not isinstance(buf, ffi.CData):
            buf = ffi.from_buffer(buf)
        sent = self._send(self.fd, buf, off, lens, ffi.NULL if ep is None else ep, n, self.gso, self._err)
        e = self._err[0]
        if e in (_errno.EIO, _errno.EINVAL, _errno.EMSGSIZE) and sent == n and self.gso:
            self.gso = False  # the route cannot segment
        return sent, e

    # slow path: the handshake messages (until the one-path engine seals them
    # through the send batch), tests ------------------------------------------

    def send_datagrams(
        self, datagrams: Sequence[tuple[bytes, Any]], connected: bool = False
    ) -> tuple[int, int]:
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
                tx[pos : pos + len(data)] = data
                self.tx_off[k] = pos
                self.tx_len[k] = len(data)
                if not connected:
                    self.endpoints.fill(self.tx_ep + k, addr)
                pos += len(data)
                k += 1
                i += 1
            sent, e = self.send(self.tx_slab, self.tx_off, self.tx_len, None if connected else self.tx_ep, k)
            total += sent
            first_err = first_err or e
        return total, first_err


# ---------------------------------------------------------------- TUN

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
SIOCSIFTXQLEN = 0x8943

# Every offload vc_tun_set_offload knows; it keeps what the kernel accepts.
OFFLOAD_ALL = (
    lib.VC_TUN_OFFLOAD_CSUM | lib.VC_TUN_OFFLOAD_TSO | lib.VC_TUN_OFFLOAD_ECN | lib.VC_TUN_OFFLOAD_USO
)
_OFFLOAD_NAMES = (
    (lib.VC_TUN_OFFLOAD_CSUM, "csum"),
    (lib.VC_TUN_OFFLOAD_TSO, "tso"),
    (lib.VC_TUN_OFFLOAD_ECN, "tso-ecn"),
    (lib.VC_TUN_OFFLOAD_USO, "uso"),
)


def offload_names(bits: int) -> list[str]:
    """['csum', 'tso', ...] for vc_tun_set_offload bits."""
    return [name for bit, name in _OFFLOAD_NAMES if bits & bit]


def open_tun(name: str = "", flags: int = IFF_TUN | IFF_NO_PI, vnet_hdr: bool = False) -> tuple[int, str]:
    """Open /dev/net/tun non-blocking and attach it to `name` (a kernel-chosen
    tunN if empty); vnet_hdr adds IFF_VNET_HDR (for TunBatch's offloads).
    Returns (fd, ifname)."""
    if vnet_hdr:
        flags |= IFF_VNET_HDR
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        ifr = struct.pack("16sH22x", name.encode(), flags)
        res = fcntl.ioctl(fd, TUNSETIFF, ifr)
    except BaseException:
        os.close(fd)
        raise
    return fd, res[:16].rstrip(b"\0").decode()


def _ifreq_int(ifname: str, request: int, value: int = 0) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        res = fcntl.ioctl(s.fileno(), request, struct.pack("16si20x", ifname.encode(), value))
    out: int = struct.unpack_from("i", res, 16)[0]
    return out


def set_txqueuelen(ifname: str, qlen: int) -> None:
    """The interface's transmit queue length: for a TUN, the packets the kernel
    queues for the daemon to read before it drops (tx_dropped)."""
    if not 1 <= qlen <= 0x7FFFFFFF:
        raise ValueError(f"txqueuelen out of range: {qlen}")
    _ifreq_int(ifname, SIOCSIFTXQLEN, qlen)


SIOCETHTOOL = 0x8946
ETHTOOL_GTSO, ETHTOOL_STSO = 0x1E, 0x1F


def _ethtool_value(ifname: str, cmd: int, data: int = 0) -> int:
    import ctypes

    ev = ctypes.create_string_buffer(struct.pack("II", cmd, data), 8)
    ifr = struct.pack("16sP", ifname.encode(), ctypes.addressof(ev)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifr)
    out: int = struct.unpack("II", ev.raw)[1]
    return out


def get_tso(ifname: str) -> bool:
    return bool(_ethtool_value(ifname, ETHTOOL_GTSO))


def set_tso(ifname: str, on: bool) -> None:
    """TCP segmentation offload of an interface on or off (`ethtool -K IFACE
    tso on|off`).  Off on a TUN with offloads, the kernel segments TCP itself
    and whoever reads the TUN (vpncrypt, or wireguard-go) gets no TCP
    super-packets; what it writes is not affected."""
    _ethtool_value(ifname, ETHTOOL_STSO, 1 if on else 0)


class TunBatch:
    """Batch reads/writes on a non-blocking IFF_TUN|IFF_NO_PI fd.

    read() -> (n, view, off, len); write(buf, off, len, n) -> (written, errno).

    On an fd opened with IFF_VNET_HDR (open_tun(vnet_hdr=True)) the TUN
    offloads are switched on (`offloads`: the VC_TUN_OFFLOAD_* bits to ask for,
    OFFLOAD_ALL by default, 0 to force them off; self.offloads is what the
    kernel granted).  The API stays the same: read() splits the GSO
    super-packets it reads into packets of at most mtu bytes, write() coalesces
    the packets of each TCP flow (with TSO granted) and UDP flow (with USO)
    into super-packets before writing; `written` counts input packets.
    Counters: rx_stats (vc_tun_rx_stats) and tx_stats (vc_gro_stats)."""

    def __init__(
        self,
        fd: int,
        mtu: int = 1500,
        batch: int = 64,
        offloads: int = OFFLOAD_ALL,
        _granted: int | None = None,
    ):
        self.fd = fd
        self.mtu = mtu
        self.batch = batch
        self.slot = (mtu + 15) & ~15
        self.slab_size = self.slot * batch
        self.slab, self.view, self.off, self.len = _slab(self.slab_size, batch)
        self.tx_off = ffi.new("uint32_t[]", batch)
        self.tx_len = ffi.new("uint32_t[]", batch)
        self.tx_slab = ffi.new("uint8_t[]", self.slab_size)
        self._err = ffi.new("int *")
        self._reader, self._writer = self._read_plain, self._write_plain
        has = lib.vc_tun_has_vnet_hdr(fd)
        self.vnet_hdr = has == 1
        self.offloads = 0
        self.gro_flags = 0
        if self.vnet_hdr:
            got = lib.vc_tun_set_offload(fd, offloads) if _granted is None else _granted
            if got < 0:
                raise _oserror(-got)
            self.offloads = got
            if got & lib.VC_TUN_OFFLOAD_TSO:
                self.gro_flags |= lib.VC_GRO_TCP
            if got & lib.VC_TUN_OFFLOAD_USO:
                self.gro_flags |= lib.VC_GRO_UDP
            self._rx = ffi.new("vc_tun_rx *")
            self.tx_stats = ffi.new("vc_gro_stats *")
            # one round of coalescing: every packet plus its vnet header, and at
            # least one whole super-packet
            self.gro_size = max(
                batch * (self.slot + lib.VC_VNET_HDR_LEN), lib.VC_VNET_HDR_LEN + lib.VC_TUN_MAX_PACKET
            )
            self.gro_out = ffi.new("uint8_t[]", self.gro_size)
            self._reader = self._read_offload
            self._writer = self._write_offload

    def twin(self) -> "TunBatch":
        """Another object on the same fd with arrays of its own, for another
        thread (one reads, one writes); the offloads stay as granted."""
        return TunBatch(self.fd, mtu=self.mtu, batch=self.batch, _granted=self.offloads)

    @property
    def rx_stats(self) -> CData:
        return self._rx.st if self.vnet_hdr else None

    def holds(self) -> bool:
        """Whether the last read left packets in this object's own state (the
        segments of a super-packet past the batch): the next read returns
        them, but they do not make the fd readable."""
        held: bool = self.vnet_hdr and self._rx.pend_len != 0
        return held

    def _read_offload(self) -> int:
        n: int = lib.vc_tun_read_offload(
            self.fd, self._rx, self.slab, self.slab_size, self.mtu, self.off, self.len, self.batch
        )
        return n

    def _read_plain(self) -> int:
        n: int = lib.vc_tun_read_batch(
            self.fd, self.slab, self.slab_size, self.mtu, self.off, self.len, self.batch
        )
        return n

    def _write_offload(self, buf: CData, off: CData, lens: CData, n: int) -> int:
        w: int = lib.vc_tun_write_offload(
            self.fd, buf, off, lens, n, self.gro_out, self.gro_size, self.gro_flags, self.tx_stats, self._err
        )
        return w

    def _write_plain(self, buf: CData, off: CData, lens: CData, n: int) -> int:
        w: int = lib.vc_tun_write_batch(self.fd, buf, off, lens, n, self._err)
        return w

    def read(self) -> tuple[int, memoryview, CData, CData]:
        n = self._reader()
        if n < 0:
            raise _oserror(-n)
        return n, self.view, self.off, self.len

    def write(self, buf: CData | bytes, off: CData, lens: CData, n: int) -> tuple[int, int]:
        if not isinstance(buf, ffi.CData):
            buf = ffi.from_buffer(buf)
        w = self._writer(buf, off, lens, n)
        return w, self._err[0]

    def write_packets(self, packets: Sequence[bytes]) -> tuple[int, int]:
        total, first_err, i = 0, 0, 0
        tx = ffi.buffer(self.tx_slab)
        while i < len(packets):
            pos, k = 0, 0
            while i < len(packets) and k < self.batch:
                p = packets[i]
                if len(p) > self.slot:
                    raise ValueError(f"packet of {len(p)} bytes exceeds mtu {self.mtu}")
                tx[pos : pos + len(p)] = p
                self.tx_off[k], self.tx_len[k] = pos, len(p)
                pos += self.slot
                k += 1
                i += 1
            w, e = self.write(self.tx_slab, self.tx_off, self.tx_len, k)
            total += w
            first_err = first_err or e
        return total, first_err
