"""Slow-path helpers of the tests around vpncrypt.dataplane.io: one packet or
batch at a time, as bytes, through the native split and coalesce and the batch
objects' receive calls (the data plane itself works on the cffi slabs)."""

import errno as _errno
import os

from vpncrypt._native import ffi, lib

VNET_HDR_LEN = 10  # sizeof(struct virtio_net_hdr), include/uapi/linux/virtio_net.h


def recv_datagrams(udp):
    """[(bytes, addr), ...] for one UdpBatchSocket.recv() batch."""
    n, view, off, lens, ep = udp.recv()
    to_addr = udp.endpoints.to_addr
    return [(bytes(view[off[i] : off[i] + lens[i]]), to_addr(ep + i)) for i in range(n)]


def read_packets(tun):
    """[bytes, ...] for one TunBatch.read() batch."""
    n, view, off, lens = tun.read()
    return [bytes(view[off[i] : off[i] + lens[i]]) for i in range(n)]


def vnet_split(frame: bytes, mtu: int):
    """The packets of one TUN read `frame` (vnet header + packet), as TunBatch
    would deliver them.  ValueError for a malformed frame or a segment above mtu."""
    if len(frame) < VNET_HDR_LEN:
        raise ValueError("frame shorter than a vnet header")
    h = ffi.new("vc_vnet_hdr *")
    ffi.memmove(h, frame[:VNET_HDR_LEN], VNET_HDR_LEN)
    pkt = ffi.new("uint8_t[]", frame[VNET_HDR_LEN:] or b"\0")
    slot = (mtu + 15) & ~15
    out = []
    seg = ffi.new("uint32_t *")
    step = 64
    slab = ffi.new("uint8_t[]", slot * step)
    off, lens = ffi.new("uint32_t[]", step), ffi.new("uint32_t[]", step)
    while True:
        r = lib.vc_vnet_split(pkt, len(frame) - VNET_HDR_LEN, h, mtu, slab, slot * step, off, lens, step, seg)
        if r < 0:
            raise ValueError(
                "segment exceeds mtu" if r == -_errno.EMSGSIZE else "malformed vnet header or packet"
            )
        buf = ffi.buffer(slab)
        out += [bytes(buf[off[i] : off[i] + lens[i]]) for i in range(r)]
        if seg[0] == 0:  # every segment is out
            return out


def gro_coalesce(packets, tcp: bool = True, udp: bool = True, out_size: int | None = None):
    """[(frame, count)]: the TUN writes (vnet header + packet) for `packets`
    and how many input packets each carries.  out_size limits the output
    buffer (writes then come in several rounds)."""
    n = len(packets)
    if n == 0:
        return []
    data = b"".join(packets)
    offs, pos = [], 0
    for p in packets:
        offs.append(pos)
        pos += len(p)
    inbuf = ffi.new("uint8_t[]", data)
    off = ffi.new("uint32_t[]", offs)
    lens = ffi.new("uint32_t[]", [len(p) for p in packets])
    size = out_size or len(data) + VNET_HDR_LEN * n
    out = ffi.new("uint8_t[]", size)
    woff, wlen, wpk = (ffi.new("uint32_t[]", n) for _ in range(3))
    consumed = ffi.new("int *")
    flags = (lib.VC_GRO_TCP if tcp else 0) | (lib.VC_GRO_UDP if udp else 0)
    result, done = [], 0
    while done < n:
        w = lib.vc_gro_coalesce(
            inbuf, off + done, lens + done, n - done, out, size, woff, wlen, wpk, n, flags, consumed, ffi.NULL
        )
        if w < 0:
            raise OSError(-w, os.strerror(-w))
        if consumed[0] == 0:
            raise ValueError("output buffer too small for one packet")
        buf = ffi.buffer(out)
        result += [(bytes(buf[woff[i] : woff[i] + wlen[i]]), wpk[i]) for i in range(w)]
        done += consumed[0]
    return result
