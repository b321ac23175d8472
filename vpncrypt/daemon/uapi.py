"""The WireGuard cross-platform userspace API (UAPI) over a unix socket.

Wire format (as spoken by `wg`, wireguard-go and others)::

    get=1\\n\\n        -> key=value lines ... errno=0\\n\\n
    set=1\\n key=value\\n ... \\n  -> errno=N\\n\\n   (N = 0 or -errno)

Keys and preshared keys are lowercase hex. The pieces:

* parse_set(text) -> list of operations (vpncrypt.config.ops); validates the
  whole request first, so a malformed request changes nothing (-EINVAL).
* format_get(snapshot) -> str, from InterfaceSnapshot/PeerSnapshot.
* apply_operations(ops, control) -> calls the Control interface.
* start_uapi_server(path, control) -> asyncio unix-socket server.

vpncrypt extension: `get=vpncrypt\\n\\n` answers like `get=1` plus lines
``vpncrypt_<counter>=N`` (drop counters etc.). They are not in the plain
`get=1` answer by default: `wg` (tools 1.0.20210914) happens to skip unknown
keys, but other UAPI clients may not.
"""
from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import re
import socket
import stat
import struct
from typing import Iterable, Optional

from ..config.keys import KeyFormatError, PresharedKey, PrivateKey, PublicKey
from ..config.ops import (Endpoint, PeerUpdate, RemovePeer, ReplacePeers,
                          SetAddresses, SetFwmark, SetListenPort, SetMTU,
                          SetPrivateKey)
from .control import Control, ControlError, InterfaceSnapshot, PeerSnapshot
from .keyfile import ensure_private_dir

__all__ = [
    "UAPIError", "parse_set", "format_get", "apply_operations", "handle_request",
    "start_uapi_server", "UAPIServer", "socket_path", "Control", "ControlError",
    "InterfaceSnapshot", "PeerSnapshot", "DEFAULT_SOCKET_DIR",
]

log = logging.getLogger("vpncrypt.uapi")

DEFAULT_SOCKET_DIR = "/var/run/wireguard"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
_COUNTER_NAME_RE = re.compile(r"^[a-z0-9_]+$")


def socket_path(interface: str, directory: str = DEFAULT_SOCKET_DIR) -> str:
    return os.path.join(directory, f"{interface}.sock")


class UAPIError(Exception):
    """A request error answered as errno=-<errno>."""

    def __init__(self, errno_: int, message: str):
        super().__init__(message)
        self.errno = errno_


def _invalid(msg: str) -> UAPIError:
    return UAPIError(errno.EINVAL, msg)


# --------------------------------------------------------------------------
# (a) set=1 parser

def _parse_uint(key: str, value: str, bits: int) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 20:  # not "²": int() refuses it
        raise _invalid(f"{key}: not an unsigned integer")
    n = int(value)
    if n >= 1 << bits:
        raise _invalid(f"{key}: out of range")
    return n


def _parse_true(key: str, value: str) -> None:
    if value != "true":
        raise _invalid(f"{key}: only 'true' is accepted")


def _parse_uapi_endpoint(value: str) -> Endpoint:
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep:
            raise _invalid("endpoint: expected [IPv6]:port")
        want = ipaddress.IPv6Address
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise _invalid("endpoint: expected IP:port")
        want = ipaddress.IPv4Address
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise _invalid("endpoint: not a numeric IP address") from None
    if not isinstance(addr, want):
        raise _invalid("endpoint: IPv6 addresses need brackets")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise _invalid("endpoint: bad port")
    return Endpoint(host=host, port=int(port), text=value)


def _parse_key(cls, key: str, value: str):
    try:
        return cls.from_hex(value)
    except KeyFormatError:
        raise _invalid(f"{key}: not 64 hex digits") from None


def parse_set(text: str) -> list:
    """Parse the body of a ``set=1`` request (the lines after ``set=1``, with
    or without the final blank line) into operations. Raises UAPIError
    (EINVAL) on the first problem; nothing is returned half-parsed."""
    if text.endswith("\n\n"):
        text = text[:-1]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    ops: list = []
    peer: Optional[dict] = None

    def flush():
        if peer is None:
            return
        if peer["remove"]:
            ops.append(RemovePeer(peer["public_key"]))
        else:
            ops.append(PeerUpdate(
                public_key=peer["public_key"], preshared_key=peer["preshared_key"],
                endpoint=peer["endpoint"], persistent_keepalive=peer["keepalive"],
                replace_allowed_ips=peer["replace_allowed_ips"],
                allowed_ips=tuple(peer["allowed_ips"]), update_only=peer["update_only"]))

    for n, line in enumerate(lines, start=1):
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise _invalid(f"line {n}: expected key=value")
        if peer is None and key in ("private_key", "listen_port", "fwmark", "replace_peers"):
            if key == "private_key":
                k = _parse_key(PrivateKey, key, value)
                ops.append(SetPrivateKey(None if k.is_zero() else k))
            elif key == "listen_port":
                ops.append(SetListenPort(_parse_uint(key, value, 16)))
            elif key == "fwmark":
                ops.append(SetFwmark(_parse_uint(key, value, 32)))
            else:
                _parse_true(key, value)
                ops.append(ReplacePeers())
            continue
        if key == "public_key":
            flush()
            peer = dict(public_key=_parse_key(PublicKey, key, value), remove=False,
                        update_only=False, preshared_key=None, endpoint=None,
                        keepalive=None, replace_allowed_ips=False, allowed_ips=[])
            continue
        if peer is None:
            raise _invalid(f"line {n}: unknown device key {key!r}")
        if key == "preshared_key":
            peer["preshared_key"] = _parse_key(PresharedKey, key, value)
        elif key == "endpoint":
            peer["endpoint"] = _parse_uapi_endpoint(value)
        elif key == "persistent_keepalive_interval":
            peer["keepalive"] = _parse_uint(key, value, 16)
        elif key == "replace_allowed_ips":
            _parse_true(key, value)
            peer["replace_allowed_ips"] = True
        elif key == "allowed_ip":
            if "/" not in value:
                raise _invalid("allowed_ip: expected address/prefix")
            try:
                peer["allowed_ips"].append(ipaddress.ip_network(value, strict=False))
            except ValueError:
                raise _invalid("allowed_ip: not an IP network") from None
        elif key == "update_only":
            _parse_true(key, value)
            peer["update_only"] = True
        elif key == "remove":
            _parse_true(key, value)
            peer["remove"] = True
        elif key == "protocol_version":
            if value != "1":
                raise _invalid("protocol_version: only 1 is supported")
        else:
            raise _invalid(f"line {n}: unknown peer key {key!r}")
    flush()
    return ops


# --------------------------------------------------------------------------
# (b) get=1 formatter

def _format_endpoint(ep) -> Optional[str]:
    if ep is None:
        return None
    if isinstance(ep, str):
        return ep
    if isinstance(ep, Endpoint):
        host, port = ep.host, ep.port
    else:
        host, port = ep[0], ep[1]
    host = str(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def format_get(snapshot: InterfaceSnapshot, *, extensions: bool = False) -> str:
    """The full answer to ``get=1`` (ending in ``errno=0\\n\\n``)."""
    out = []
    if snapshot.private_key is not None and any(snapshot.private_key):
        out.append(f"private_key={bytes(snapshot.private_key).hex()}")
    if snapshot.listen_port:
        out.append(f"listen_port={int(snapshot.listen_port)}")
    if snapshot.fwmark:
        out.append(f"fwmark={int(snapshot.fwmark)}")
    for p in snapshot.peers:
        out.append(f"public_key={bytes(p.public_key).hex()}")
        if p.preshared_key is not None and any(p.preshared_key):
            out.append(f"preshared_key={bytes(p.preshared_key).hex()}")
        out.append(f"protocol_version={int(p.protocol_version)}")
        ep = _format_endpoint(p.endpoint)
        if ep:
            out.append(f"endpoint={ep}")
        out.append(f"last_handshake_time_sec={int(p.last_handshake_time_sec)}")
        out.append(f"last_handshake_time_nsec={int(p.last_handshake_time_nsec)}")
        out.append(f"tx_bytes={int(p.tx_bytes)}")
        out.append(f"rx_bytes={int(p.rx_bytes)}")
        out.append(f"persistent_keepalive_interval={int(p.persistent_keepalive)}")
        for net in p.allowed_ips:
            out.append(f"allowed_ip={ipaddress.ip_network(net, strict=False)}")
    if extensions:
        for name, value in sorted(snapshot.counters.items()):
            if _COUNTER_NAME_RE.match(name):
                out.append(f"vpncrypt_{name}={int(value)}")
    out.append("errno=0")
    return "\n".join(out) + "\n\n"


# --------------------------------------------------------------------------
# (c) apply

def apply_operations(ops: Iterable, control: Control) -> None:
    """Apply operations in order. Errors from the control propagate
    (ControlError/OSError carry the errno to report)."""
    for op in ops:
        if isinstance(op, SetPrivateKey):
            control.set_private_key(op.key)
        elif isinstance(op, SetListenPort):
            control.set_listen_port(op.port)
        elif isinstance(op, SetFwmark):
            control.set_fwmark(op.fwmark)
        elif isinstance(op, ReplacePeers):
            control.replace_peers()
        elif isinstance(op, RemovePeer):
            control.remove_peer(op.public_key)
        elif isinstance(op, PeerUpdate):
            if op.update_only and not control.has_peer(op.public_key):
                continue
            control.upsert_peer(op)
        elif isinstance(op, SetMTU):
            control.set_mtu(op.mtu)
        elif isinstance(op, SetAddresses):
            control.set_addresses(op.add, op.remove)
        else:
            raise TypeError(f"unknown operation {type(op).__name__}")


def _errno_of(exc: BaseException) -> int:
    if isinstance(exc, (UAPIError, ControlError)):
        return exc.errno
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO


def _errno_reply(code: int) -> bytes:
    return f"errno={-abs(code) if code else 0}\n\n".encode()


def handle_request(op_line: str, body: str, control: Control, *,
                   extensions_in_get: bool = False) -> bytes:
    """One request: ``op_line`` without its newline, ``body`` the lines after
    it up to (not including) the blank line. Returns the full answer."""
    try:
        if op_line in ("get=1", "get=vpncrypt"):
            if body:
                raise _invalid("get takes no arguments")
            snap = control.snapshot()
            return format_get(snap, extensions=extensions_in_get or op_line == "get=vpncrypt").encode()
        if op_line == "set=1":
            ops = parse_set(body)
            apply_operations(ops, control)
            return _errno_reply(0)
        raise _invalid("unknown operation")
    except UAPIError as e:
        log.info("UAPI request refused (errno %d): %s", e.errno, e)
        return _errno_reply(e.errno)
    except (ControlError, OSError) as e:
        log.warning("UAPI %s failed: %s", op_line[:16], e)
        return _errno_reply(_errno_of(e))
    except Exception:
        log.exception("UAPI %s failed", op_line[:16])
        return _errno_reply(errno.EIO)


# --------------------------------------------------------------------------
# (d) the server

_UCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _pid, uid, _gid = _UCRED.unpack(creds)
    return uid


class UAPIServer:
    def __init__(self, path: str, control: Control, *,
                 allowed_uids: Optional[Iterable[int]] = None,
                 extensions_in_get: bool = False):
        self.path = path
        self.control = control
        self.allowed_uids = (frozenset(allowed_uids) if allowed_uids is not None
                             else frozenset({0, os.geteuid()}))
        self.extensions_in_get = extensions_in_get
        self._server: Optional[asyncio.AbstractServer] = None
        self._ident: Optional[tuple] = None
        self._tasks: set = set()

    async def start(self) -> "UAPIServer":
        directory = os.path.dirname(self.path) or "."
        ensure_private_dir(directory)
        _clear_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o077)
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            os.chmod(self.path, 0o600)
            st = os.lstat(self.path)
            self._ident = (st.st_dev, st.st_ino)
            sock.listen(16)
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._on_connect, sock=sock)
        except BaseException:
            sock.close()
            self._unlink()
            raise
        log.info("UAPI listening on %s", self.path)
        return self

    def _unlink(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if self._ident is None or (st.st_dev, st.st_ino) == self._ident:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        self._unlink()
        self._ident = None

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()
        await self.wait_closed()

    async def _on_connect(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except Exception:
                pass

    async def _serve(self, reader, writer) -> None:
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock)
        except OSError:
            uid = -1
        if uid not in self.allowed_uids:
            log.warning("UAPI: refused a connection from uid %d", uid)
            writer.write(_errno_reply(errno.EPERM))
            await writer.drain()
            return
        while True:
            req = await _read_request(reader)
            if req is None:
                return
            op_line, body = req
            if op_line is None:  # too large / not text: answered, then hang up
                writer.write(_errno_reply(body))
                await writer.drain()
                return
            writer.write(handle_request(op_line, body, self.control,
                                        extensions_in_get=self.extensions_in_get))
            await writer.drain()


async def _read_request(reader: asyncio.StreamReader):
    """(op_line, body) for one request; None at EOF; (None, errno) if the
    request cannot be read (the connection is then closed)."""
    total = 0
    lines: list[bytes] = []
    while True:
        try:
            line = await reader.readline()
        except (asyncio.LimitOverrunError, ValueError):
            return None, errno.EINVAL
        if not line or not line.endswith(b"\n"):
            return None  # EOF (possibly mid-request): nothing to answer
        if line == b"\n":
            if not lines:
                continue  # stray blank line between requests
            break
        total += len(line)
        if total > MAX_REQUEST_BYTES:
            return None, errno.ENOMEM
        lines.append(line)
    try:
        text = b"".join(lines).decode("ascii")
    except UnicodeDecodeError:
        return lines[0].decode("ascii", "replace").rstrip("\n"), "\x00"  # forces EINVAL
    op_line, _, body = text.partition("\n")
    return op_line, body


def _clear_stale_socket(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(errno.EEXIST, f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)  # stale: left by a daemon that died
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"{path}: another daemon is serving this interface")


async def start_uapi_server(path: str, control: Control, *,
                            allowed_uids: Optional[Iterable[int]] = None,
                            extensions_in_get: bool = False) -> UAPIServer:
    """Serve the UAPI on ``path`` (mode 0600, parent created 0700 if
    missing). Close with ``server.close(); await server.wait_closed()`` or
    ``async with``; the socket file is removed on close."""
    server = UAPIServer(path, control, allowed_uids=allowed_uids,
                        extensions_in_get=extensions_in_get)
    return await server.start()
