"""FwMark is a 32-bit unsigned mark (wg(8): "a 32-bit fwmark"): every value
0..4294967295 is taken, over the UAPI, from a config file and on the socket
itself, as wireguard-go takes it."""

import socket
import struct

from tests.interop.lab import PORT
from vpncrypt.daemon.udpsocket import set_fwmark

SO_MARK = 36  # <asm-generic/socket.h>


def _mark(sock):
    return struct.unpack("=I", sock.getsockopt(socket.SOL_SOCKET, SO_MARK, 4))[0]


def test_set_fwmark_takes_every_32_bit_value():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for mark in (1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0):
            set_fwmark(s, mark)
            assert _mark(s) == mark


def test_top_fwmarks_over_the_uapi_and_in_the_file_as_wireguard_go(lab):
    a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
    a.start(
        a.conf(
            [{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}],
            extra_iface="FwMark = 0xffffffff\n",
        )
    )
    b.start(b.conf([{"public": a.public, "inner": a.inner}], extra_iface="FwMark = 0xffffffff\n"))
    assert a.wg("show", a.iface, "fwmark").stdout.strip() == "0xffffffff"
    for node in (a, b):
        for mark in (4294967295, 2147483648, 0):
            assert node.uapi(f"set=1\nfwmark={mark}\n\n").strip() == "errno=0", (node.kind, mark)
    a.ping(b)
