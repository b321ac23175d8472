"""A peer's address together with the local address its datagram arrived at.

The Linux module answers a peer from the address the peer sent to (a host
with several addresses on a link, or an address of another interface, is
reached at the one the peer knows): the native receive path reads each
datagram's destination (IP_PKTINFO / IPV6_PKTINFO) into its vc_endpoint, and
the session table keeps it with the peer's endpoint.  Handshake messages
pass through the Python protocol core as (host, port[, flowinfo, scope])
tuples; SourcedAddr is such a tuple that carries the source along, so a
handshake response leaves from the address the initiation came to and the
endpoint the core sets keeps it.  It equals (and hashes as) the plain tuple:
a peer's address is the same whichever local address it sent to."""

from __future__ import annotations

from typing import Any

__all__ = ["SourcedAddr", "source_of"]

Source = tuple[str, int]  # (local address, interface index: 0 unless needed)


class SourcedAddr(tuple):  # type: ignore[type-arg]
    """(host, port[, flowinfo, scope]) with `source`: (local host, ifindex)."""

    source: Source

    def __new__(cls, addr: tuple[Any, ...], source: Source) -> "SourcedAddr":
        self = super().__new__(cls, addr)
        self.source = source
        return self

    def __repr__(self) -> str:
        return f"SourcedAddr({tuple(self)!r}, source={self.source!r})"

    def __reduce__(self) -> Any:
        return (SourcedAddr, (tuple(self), self.source))


def source_of(addr: Any) -> Source | None:
    """The local source an address carries (None: routing picks one)."""
    return getattr(addr, "source", None)
