"""The engine's inner link when it is not a TUN: an AF_PACKET socket on one end
of a veth pair, whose other end is the interface of a namespace's own stack.

A SOCK_DGRAM packet socket reads exactly what a TUN without IFF_VNET_HDR reads:
one whole IP packet per read(2), the link header already taken off.  So the
read side is TunBatch's own (the engine's native send rounds read it, TSO/USO
split aside).  The write side differs: a TUN takes a bare IP packet per
write(2), a packet socket needs the link address to build the Ethernet header,
so PacketLink.write sends each packet with sendto(2) and the other end's MAC.

No offloads in this first step: the namespace end has checksum offload, TSO,
GSO and GRO turned off (namespace.py), so every frame it hands over is at most
the MTU and carries complete checksums.  PACKET_VNET_HDR would give the TUN's
virtio_net_hdr and so its offloads; that is left for a later step.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from typing import Any

from vpncrypt._native import ffi
from vpncrypt.dataplane.io import TunBatch

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h (Linux 4.20)
SO_ATTACH_FILTER = 26

# Classic BPF: keep IPv4 and IPv6 frames, drop the rest (the link's own ARP or
# LLDP would otherwise reach the engine as "IP packets").  The ancillary load
# SKF_AD_OFF + SKF_AD_PROTOCOL (-0x1000 + 0) reads skb->protocol in host order.
_FILTER = (
    (0x28, 0, 0, 0xFFFFF000),  # ldh [protocol]
    (0x15, 2, 0, ETH_P_IP),  # jeq IPv4 -> accept
    (0x15, 1, 0, ETH_P_IPV6),  # jeq IPv6 -> accept
    (0x06, 0, 0, 0),  # ret 0 (drop)
    (0x06, 0, 0, 0x40000),  # ret 256 KiB (accept whole)
)


def _attach_filter(sock: socket.socket) -> None:
    code = b"".join(struct.pack("HBBI", *insn) for insn in _FILTER)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("HL", len(_FILTER), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)


def open_packet_socket(ifname: str) -> socket.socket:
    """A non-blocking SOCK_DGRAM packet socket bound to `ifname` that receives
    the IPv4 and IPv6 frames arriving on it, not the ones it sends."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)
    try:
        _attach_filter(sock)  # before the bind: no frame gets in unfiltered
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        sock.bind((ifname, ETH_P_ALL))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class PacketLink(TunBatch):
    """TunBatch's interface on a packet socket: read() as TunBatch's (so the
    engine's native rounds read it), write() and write_packets() by sendto(2)
    to `peer_mac` on `ifname`.  Written packets that are not IPv4 or IPv6 (by
    their version nibble) are dropped, counted as not written."""

    def __init__(self, sock: socket.socket, ifname: str, peer_mac: bytes, mtu: int, batch: int) -> None:
        super().__init__(sock.fileno(), mtu=mtu, batch=batch, offloads=0)
        self.sock = sock
        self.ifname = ifname
        self.peer_mac = peer_mac
        self._to = {
            4: (ifname, ETH_P_IP, 0, 0, peer_mac),
            6: (ifname, ETH_P_IPV6, 0, 0, peer_mac),
        }
        self._view: tuple[Any, memoryview] | None = None  # (the array, a view of it)

    def twin(self) -> "PacketLink":
        return PacketLink(self.sock, self.ifname, self.peer_mac, self.mtu, self.batch)

    def holds(self) -> bool:
        return False

    def _view_of(self, buf: Any) -> memoryview:
        """A memoryview of a cffi array (a receive slab), kept for the last
        array only (a new socket's slab replaces it: the old one is freed)."""
        if self._view is None or self._view[0] is not buf:
            self._view = (buf, memoryview(ffi.buffer(buf)).cast("B"))
        return self._view[1]

    def write(self, buf: Any, off: Any, lens: Any, n: int) -> tuple[int, int]:
        """Send n packets (buf[off[i]:off[i]+lens[i]]); (sent, first errno).
        A full send buffer stops the batch (the rest are dropped, as a full
        TUN queue drops them)."""
        view = buf if isinstance(buf, memoryview) else self._view_of(buf)
        sendto, to = self.sock.sendto, self._to
        done = err = 0
        for i in range(n):
            start = off[i]
            pkt = view[start : start + lens[i]]
            dest = to.get(pkt[0] >> 4) if len(pkt) else None
            if dest is None:
                continue
            try:
                sendto(pkt, dest)
                done += 1
            except BlockingIOError as e:
                err = err or e.errno or 0
                break
            except OSError as e:
                err = err or e.errno or 0
        return done, err

    def write_packets(self, packets: Any) -> tuple[int, int]:
        done = err = 0
        for p in packets:
            w, e = self.write(memoryview(p), (0,), (len(p),), 1)
            done += w
            err = err or e
        return done, err
