"""The daemon's UDP sockets: dual-stack IPv6 (IPV6_V6ONLY=0, bound to ::) when
the host has IPv6, IPv4 otherwise; big buffers; the fwmark (SO_MARK).

With several queues, several sockets in one SO_REUSEPORT group on the same
port (open_udp_sockets): the kernel hashes each flow to one of them.  The
port is checked free first by a socket without SO_REUSEPORT (which any
bound socket refuses), so that the group never joins sockets another
process (of the same user) holds on that port with SO_REUSEPORT."""

from __future__ import annotations

import errno
import logging
import socket
import struct
from typing import Optional

from ..dataplane.sockopts import force_buffers

log = logging.getLogger("vpncrypt.daemon")

SOCKET_BUFFER = 8 << 20
SO_MARK = getattr(socket, "SO_MARK", 36)
SO_REUSEPORT = getattr(socket, "SO_REUSEPORT", 15)
_NO_V6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT, errno.EINVAL)
_PORT_0_TRIES = 3  # a random port another process takes between the check and the group's bind


def open_udp_socket(port: int, fwmark: int = 0) -> socket.socket:
    """A non-blocking UDP socket on `port` (0: random).  A bind failure is
    an OSError with the port in its message ("UDP port 51820: Address
    already in use") and the same errno."""
    return _finish(_bind(port), fwmark)


def open_udp_sockets(port: int, fwmark: int = 0, count: int = 1) -> list[socket.socket]:
    """`count` sockets on one port (0: the one the first gets), all with
    `fwmark`; with more than one, an SO_REUSEPORT group.  One is
    open_udp_socket()'s.  Errors as open_udp_socket()'s; none stays open."""
    if count < 1:
        raise ValueError(f"count {count}: at least 1")
    if count == 1:
        return [open_udp_socket(port, fwmark)]
    for attempt in range(_PORT_0_TRIES if port == 0 else 1):
        probe = _bind(port)  # free (for every socket), and the family the host has
        chosen, family = probe.getsockname()[1], probe.family
        probe.close()
        socks: list[socket.socket] = []
        try:
            for _ in range(count):
                socks.append(_finish(_bind(chosen, reuseport=True, family=family), fwmark))
            return socks
        except OSError as e:
            for s in socks:
                s.close()
            if port != 0 or e.errno != errno.EADDRINUSE or attempt == _PORT_0_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _bind(port: int, *, reuseport: bool = False, family: Optional[int] = None) -> socket.socket:
    """A UDP socket bound to `port` on every address: IPv6 dual-stack where
    the host has it (family None: tried first), else IPv4."""
    if family in (None, socket.AF_INET6):
        sock = None
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            if reuseport:
                sock.setsockopt(socket.SOL_SOCKET, SO_REUSEPORT, 1)
            sock.bind(("::", port))
            return sock
        except OSError as e:
            if sock is not None:
                sock.close()
            if family is not None or e.errno not in _NO_V6:
                raise _bind_error(e, port) from None
            log.info("IPv6 is unavailable (%s); using an IPv4-only socket", e.strerror)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, SO_REUSEPORT, 1)
        sock.bind(("0.0.0.0", port))
    except OSError as e4:
        sock.close()
        raise _bind_error(e4, port) from None
    return sock


def _finish(sock: socket.socket, fwmark: int) -> socket.socket:
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
