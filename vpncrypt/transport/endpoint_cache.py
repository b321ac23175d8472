"""vc_endpoint (native/vc_io.h) <-> the (host, port[, flowinfo, scope_id])
tuples of the socket layer, with bounded caches: the session table and the
batch sockets speak vc_endpoint, the protocol core tuples (a SourcedAddr
when the endpoint has a local source address).  The 48-byte layout itself is
packed and unpacked in vpncrypt.endpoints."""

from typing import Any

from vpncrypt.transport.cnative import CData, ffi
from vpncrypt.endpoints import pack_endpoint, unpack_endpoint

__all__ = ["EndpointCache", "endpoint_to_addr", "endpoint_from_addr"]

_EP_SIZE = ffi.sizeof("vc_endpoint")


class EndpointCache:
    """vc_endpoint <-> (host, port) conversion with bounded dictionaries.

    IPv4 (and v4-mapped) addresses come back as (host, port); IPv6 as
    (host, port), or (host, port, 0, scope_id) with a scope."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._addr: dict[bytes, tuple[Any, ...]] = {}  # 48-byte key -> tuple
        self._key: dict[tuple[Any, ...], bytes] = {}  # plain tuple -> 48-byte key

    def key(self, ep: CData) -> bytes:
        """The 48 raw bytes of a vc_endpoint (a usable dict key)."""
        raw: bytes = ffi.buffer(ep, _EP_SIZE)[:]
        return raw

    def to_addr(self, ep: CData) -> tuple[Any, ...]:
        k: bytes = ffi.buffer(ep, _EP_SIZE)[:]
        a = self._addr.get(k)
        if a is None:
            if len(self._addr) >= self._limit:
                self._addr.clear()
            a = self._addr[k] = unpack_endpoint(k)
        return a

    def fill(self, ep: CData, addr: tuple[Any, ...]) -> None:
        """Write addr into the vc_endpoint at ep (a `vc_endpoint *`)."""
        if type(addr) is not tuple:
            # a SourcedAddr equals its plain tuple: never a key of this cache
            ffi.memmove(ep, pack_endpoint(addr), _EP_SIZE)
            return
        k = self._key.get(addr)
        if k is None:
            if len(self._key) >= self._limit:
                self._key.clear()
            k = self._key[addr] = pack_endpoint(addr)
        ffi.memmove(ep, k, _EP_SIZE)


_cache = EndpointCache()


def endpoint_to_addr(ep: CData) -> tuple[Any, ...]:
    """(host, port) of a `vc_endpoint *` (cached)."""
    return _cache.to_addr(ep)


def endpoint_from_addr(addr: tuple[Any, ...], out: CData = None) -> CData:
    """Fill `out` (a `vc_endpoint *`, allocated if None) from a (host, port[, flow, scope]) tuple."""
    if out is None:
        out = ffi.new("vc_endpoint *")
    _cache.fill(out, addr)
    return out
