"""Socket options the daemon, the benchmarks and the tests share: forcing
big socket buffers, and reading how many datagrams the kernel dropped at a
socket."""

from __future__ import annotations

import socket
import sys

# <asm-generic/socket.h>: the *FORCE variants pass net.core.[rw]mem_max (they
# need CAP_NET_ADMIN); SO_MEMINFO fills the sk_meminfo array of <linux/sock_diag.h>.
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
SO_MEMINFO = 55
SK_MEMINFO_DROPS = 8


def force_buffers(sock: socket.socket, size: int) -> None:
    """Receive and send buffers of `size` bytes: beyond net.core.[rw]mem_max
    when the process may (root, CAP_NET_ADMIN), else as much as the limit allows."""
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size)


def socket_drops(sock: socket.socket) -> int:
    """Datagrams the kernel dropped at `sock` because its receive buffer was
    full (sk_drops, the last column of /proc/net/udp), from SO_MEMINFO; 0 if
    the kernel does not say."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 64)
    except OSError:
        return 0
    end = 4 * (SK_MEMINFO_DROPS + 1)
    if len(raw) < end:
        return 0
    return int.from_bytes(raw[end - 4 : end], sys.byteorder)
