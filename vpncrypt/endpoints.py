"""Peer endpoints in every form vpncrypt meets them, parsed and formatted in
one place:

* text in a config file (``host:port``, ``[v6]:port``; host may be a name):
  parse_config_endpoint() -> Endpoint;
* text in a UAPI ``endpoint=`` line (numeric IPs only, as wireguard-go):
  parse_uapi_endpoint() -> Endpoint;
* the (host, port[, flowinfo, scope_id]) tuples of the socket layer:
  resolve_endpoint(Endpoint) -> tuple (names resolved), format_endpoint(any)
  -> ``host:port`` / ``[v6%scope]:port``;
* the 48 bytes of the native ``vc_endpoint`` (family, source flag, port,
  scope, 16 address bytes; the local source: 16 address bytes, interface,
  pad): pack_endpoint(tuple) and unpack_endpoint(bytes) (a source travels as
  a vpncrypt.sourced.SourcedAddr), and format_packed_endpoint(bytes) -> text.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import struct
from dataclasses import dataclass

from .sourced import SourcedAddr, source_of

__all__ = [
    "Endpoint",
    "parse_config_endpoint",
    "parse_uapi_endpoint",
    "resolve_endpoint",
    "format_endpoint",
    "format_packed_endpoint",
    "pack_endpoint",
    "unpack_endpoint",
    "zone_index",
]

_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$")
_V4MAPPED = b"\0" * 10 + b"\xff\xff"
_HEAD = struct.Struct("=BBHI")
_SOURCE = struct.Struct("=16sII")  # vc_endpoint's src, src_ifindex, flags
_SRC_SET = 1  # VC_EP_SRC_SET
_NO_SOURCE = b"\0" * _SOURCE.size


@dataclass(frozen=True)
class Endpoint:
    """A peer endpoint: the text as written plus its host and port.

    ``host`` has no brackets; it may be a hostname (config files only), which
    the daemon resolves later. ``is_numeric`` tells whether it is an IP.
    """

    host: str
    port: int
    text: str = ""

    @property
    def is_numeric(self) -> bool:
        try:
            ipaddress.ip_address(self.host.split("%", 1)[0])
        except ValueError:
            return False
        return True

    def __str__(self) -> str:
        return _format_host_port(self.host, self.port, 0)


def _port(text: str, lowest: int = 1) -> int:
    """lowest-65535 in decimal digits, with any number of leading zeros (as
    Go's strconv.ParseUint and getaddrinfo's numeric service take it)."""
    digits = text.lstrip("0") or "0"  # no int() of the zeros: Python converts at most 4,300 digits
    if not (text.isascii() and text.isdigit()) or len(digits) > 5 or not lowest <= int(digits) <= 65535:
        raise ValueError(f"port must be {lowest}-65535")
    return int(digits)


def _is_v6(host: str) -> bool:
    """An IPv6 address, with or without a zone (``%eth0``, ``%2``)."""
    try:
        return isinstance(ipaddress.ip_address(host.split("%", 1)[0]), ipaddress.IPv6Address)
    except ValueError:
        return False


MAX_SCOPE_ID = 0xFFFFFFFF  # sin6_scope_id is a 32-bit field (RFC 3493, 3.3)


def zone_index(zone: str) -> int:
    """The interface index a zone names: a number, or an interface name.
    Raises OSError(EINVAL) for a number no scope id can hold (over 32
    bits), OSError(EADDRNOTAVAIL) for a name no interface has."""
    if zone.isascii() and zone.isdigit():
        # no int() of an unbounded string (Python converts at most 4,300
        # digits): the zeros go first, and 11 digits are out of range
        digits = zone.lstrip("0") or "0"
        if len(digits) > 10 or int(digits) > MAX_SCOPE_ID:
            raise OSError(errno.EINVAL, f"zone {zone[:20]!r} is out of range (a scope id is 0-4294967295)")
        return int(digits)
    try:
        return socket.if_nametoindex(zone)
    except (OSError, ValueError):  # ValueError: a NUL or a character not encodable
        raise OSError(
            errno.EADDRNOTAVAIL, f"no interface named {zone!r} (the zone of an IPv6 endpoint)"
        ) from None


def parse_config_endpoint(value: str) -> Endpoint:
    """``host:port``, ``[v6]:port`` or ``v6:port`` (split at the last colon,
    as wg does) from a config file. Hostnames are kept
    for later resolution. Raises ValueError with a short reason."""
    v = value.strip()
    if v.startswith("["):
        close = v.find("]")
        if close < 0 or not v[close + 1 :].startswith(":"):
            raise ValueError("expected [IPv6]:port")
        host, port_s = v[1:close], v[close + 2 :]
        if not _is_v6(host):
            raise ValueError("brackets must hold an IPv6 address")
    else:
        # as wg: the port is after the last colon, so `::1:51820` is [::1]:51820
        host, sep, port_s = v.rpartition(":")
        if not sep or not host:
            raise ValueError("expected host:port")
        if ":" in host:
            if not _is_v6(host):
                raise ValueError("not a valid IPv6 address before the port")
            return Endpoint(host=host, port=_port(port_s), text=v)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOSTNAME_RE.match(host):
                raise ValueError("not a valid host name or IP address") from None
    return Endpoint(host=host, port=_port(port_s), text=v)


def parse_uapi_endpoint(value: str) -> Endpoint:
    """``a.b.c.d:port`` or ``[v6]:port`` from a UAPI request: numeric only.
    Port 0 is taken, as wireguard-go (netip.ParseAddrPort) takes it: the
    get lists it, and every send to it fails (the kernel refuses a UDP
    destination port 0, EINVAL) until the peer roams or is given another.
    Raises ValueError with a short reason."""
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep:
            raise ValueError("expected [IPv6]:port")
        want: type[ipaddress.IPv4Address] | type[ipaddress.IPv6Address] = ipaddress.IPv6Address
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError("expected IP:port")
        want = ipaddress.IPv4Address
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError("not a numeric IP address") from None
    if not isinstance(addr, want):
        raise ValueError("IPv6 addresses need brackets")
    try:
        return Endpoint(host=host, port=_port(port, lowest=0), text=value)
    except ValueError:
        raise ValueError("bad port") from None


def resolve_endpoint(ep: Endpoint, v6: bool = True) -> tuple:
    """An Endpoint (host may be a name) as the (host, port[, 0, scope]) tuple
    the data plane uses. Raises OSError (EAFNOSUPPORT, EADDRNOTAVAIL) with a
    message for the user if it cannot be used."""
    host, port = ep.host, ep.port
    bare = host.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6 and not v6:
            raise OSError(errno.EAFNOSUPPORT, f"{ep}: IPv6 is unavailable on this host")
        if ip.version == 6 and ip.ipv4_mapped is not None:
            return (str(ip.ipv4_mapped), port)
        if "%" in host:
            return (bare, port, 0, zone_index(host.split("%", 1)[1]))
        return (str(ip), port)
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host}: {e.strerror}") from None
    if not infos:
        raise OSError(errno.EADDRNOTAVAIL, f"cannot resolve {host}")
    fam, _t, _p, _c, sa = infos[0]
    if fam == socket.AF_INET6 and len(sa) == 4 and sa[3]:
        return (sa[0], sa[1], 0, sa[3])
    return (sa[0], sa[1])


def format_endpoint(ep: Endpoint | tuple | str | None) -> str | None:
    """``host:port`` (``[v6]:port``, ``[v6%scope]:port``) of an Endpoint, a
    (host, port[, flowinfo, scope]) tuple or text (returned as is); None for None."""
    if ep is None:
        return None
    if isinstance(ep, str):
        return ep
    if isinstance(ep, Endpoint):
        return _format_host_port(ep.host, ep.port, 0)
    return _format_host_port(str(ep[0]), ep[1], ep[3] if len(ep) >= 4 else 0)


def _format_host_port(host: str, port: int, scope: int) -> str:
    if ":" in host:
        if scope and "%" not in host:
            host = f"{host}%{scope}"
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def unpack_endpoint(raw: bytes) -> tuple:
    """The (host, port[, 0, scope]) tuple of a packed vc_endpoint; a
    SourcedAddr when it has a source address."""
    family, src_set, port, scope = _HEAD.unpack_from(raw)
    if family == 4:
        addr: tuple = (socket.inet_ntop(socket.AF_INET, raw[8:12]), port)
    elif family == 6:
        host = socket.inet_ntop(socket.AF_INET6, raw[8:24])
        addr = (host, port, 0, scope) if scope else (host, port)
    else:
        raise ValueError(f"vc_endpoint has no address (family {family})")
    if src_set != _SRC_SET or len(raw) < 24 + _SOURCE.size:
        return addr
    src, ifindex, _pad = _SOURCE.unpack_from(raw, 24)
    fam = socket.AF_INET if family == 4 else socket.AF_INET6
    return SourcedAddr(addr, (socket.inet_ntop(fam, src[: 4 if family == 4 else 16]), ifindex))


def format_packed_endpoint(raw: bytes) -> str:
    """format_endpoint(unpack_endpoint(raw)) in one step (a get of 50,000
    peers formats 50,000 of them)."""
    family, _pad, port, scope = _HEAD.unpack_from(raw)
    if family == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[8:12])}:{port}"
    if family == 6:
        host = socket.inet_ntop(socket.AF_INET6, raw[8:24])
        return f"[{host}%{scope}]:{port}" if scope else f"[{host}]:{port}"
    raise ValueError(f"vc_endpoint has no address (family {family})")


def pack_endpoint(addr: tuple) -> bytes:
    """The 48 bytes of a vc_endpoint for a (host, port[, flowinfo, scope])
    tuple with a numeric host; v4-mapped IPv6 becomes IPv4.  A SourcedAddr's
    source goes with it (a source of another family is dropped: routing
    picks)."""
    head = _pack_remote(addr)
    source = source_of(addr)
    if source is None:
        return head + _NO_SOURCE
    return _pack_source(head, source)


def _pack_source(head: bytes, source: tuple) -> bytes:
    host, ifindex = source
    if not 0 <= ifindex <= 0xFFFFFFFF:
        raise ValueError(f"interface index out of range: {ifindex}")
    try:
        raw = socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        raise ValueError(f"source address is not numeric: {host!r}") from None
    if raw[:12] == _V4MAPPED:
        raw = raw[12:]
    if len(raw) != (4 if head[0] == 4 else 16):
        return head + _NO_SOURCE
    return head[:1] + bytes((_SRC_SET,)) + head[2:] + _SOURCE.pack(raw, ifindex, 0)


def _pack_remote(addr: tuple) -> bytes:
    host, port = addr[0], addr[1]
    scope = addr[3] if len(addr) >= 4 else 0
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port}")
    if not 0 <= scope <= MAX_SCOPE_ID:
        raise ValueError(f"scope id out of range: {scope}")
    try:
        raw = socket.inet_pton(socket.AF_INET, host)
        return _HEAD.pack(4, 0, port, 0) + raw + b"\0" * 12
    except OSError:
        pass
    if "%" in host:
        host, _, ifname = host.partition("%")
        scope = zone_index(ifname)  # OSError, as inet_pton's below
    raw = socket.inet_pton(socket.AF_INET6, host)  # OSError if not an IP literal
    if raw[:12] == _V4MAPPED:
        return _HEAD.pack(4, 0, port, 0) + raw[12:] + b"\0" * 12
    return _HEAD.pack(6, 0, port, scope) + raw
