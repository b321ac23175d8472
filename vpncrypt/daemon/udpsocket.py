"""The daemon's UDP socket: dual-stack IPv6 (IPV6_V6ONLY=0, bound to ::) when
the host has IPv6, IPv4 otherwise; big buffers; the fwmark (SO_MARK)."""
from __future__ import annotations

import errno
import logging
import socket
import struct

from ..dataplane.sockopts import force_buffers

log = logging.getLogger("vpncrypt.daemon")

SOCKET_BUFFER = 8 << 20
SO_MARK = getattr(socket, "SO_MARK", 36)


def open_udp_socket(port: int, fwmark: int = 0) -> socket.socket:
    """A non-blocking UDP socket on `port` (0: random).  A bind failure is
    an OSError with the port in its message ("UDP port 51820: Address
    already in use") and the same errno."""
    sock = None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError as e:
        if sock is not None:
            sock.close()
        if e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT,
                           errno.EINVAL):
            raise _bind_error(e, port) from None
        log.info("IPv6 is unavailable (%s); using an IPv4-only socket", e.strerror)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as e4:
            sock.close()
            raise _bind_error(e4, port) from None
    try:
        force_buffers(sock, SOCKET_BUFFER)
        if fwmark:
            set_fwmark(sock, fwmark)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def set_fwmark(sock: socket.socket, fwmark: int) -> None:
    """SO_MARK takes a 32-bit unsigned mark (an int option would refuse
    2^31 and more: setsockopt packs a C int)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_MARK, struct.pack("=I", fwmark))


def _bind_error(e: OSError, port: int) -> OSError:
    return OSError(e.errno, f"UDP port {port}: {e.strerror or e}")
