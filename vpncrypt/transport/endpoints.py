"""vc_endpoint (native/vc_io.h) <-> the (host, port[, flowinfo, scope_id])
tuples Python's socket module uses, with bounded caches: the session table
and the batch sockets speak vc_endpoint, the protocol core tuples."""
import socket
import struct

from vpncrypt._native import ffi

__all__ = ["EndpointCache", "endpoint_to_addr", "endpoint_from_addr"]

_EP_SIZE = ffi.sizeof("vc_endpoint")
_V4MAPPED = b"\0" * 10 + b"\xff\xff"


def _addr_from_key(key: bytes):
    family, _pad, port, scope = struct.unpack_from("=BBHI", key)
    if family == 4:
        return (socket.inet_ntop(socket.AF_INET, key[8:12]), port)
    if family == 6:
        host = socket.inet_ntop(socket.AF_INET6, key[8:24])
        return (host, port, 0, scope) if scope else (host, port)
    raise ValueError(f"vc_endpoint has no address (family {family})")


def _key_from_addr(addr) -> bytes:
    host, port = addr[0], addr[1]
    scope = addr[3] if len(addr) >= 4 else 0
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    try:
        raw = socket.inet_pton(socket.AF_INET, host)
        return struct.pack("=BBHI", 4, 0, port, 0) + raw + b"\0" * 12
    except OSError:
        pass
    if "%" in host:
        host, _, ifname = host.partition("%")
        scope = int(ifname) if ifname.isdigit() else socket.if_nametoindex(ifname)
    raw = socket.inet_pton(socket.AF_INET6, host)       # ValueError/OSError if not an IP literal
    if raw[:12] == _V4MAPPED:
        return struct.pack("=BBHI", 4, 0, port, 0) + raw[12:] + b"\0" * 12
    return struct.pack("=BBHI", 6, 0, port, scope) + raw


class EndpointCache:
    """vc_endpoint <-> (host, port) conversion with bounded dictionaries.

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
            a = self._addr[k] = _addr_from_key(k)
        return a

    def fill(self, ep, addr) -> None:
        """Write addr into the vc_endpoint at ep (a `vc_endpoint *`)."""
        k = self._key.get(addr)
        if k is None:
            if len(self._key) >= self._limit:
                self._key.clear()
            k = self._key[addr] = _key_from_addr(addr)
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
