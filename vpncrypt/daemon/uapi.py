"""The WireGuard cross-platform userspace API (UAPI) over a unix socket.

Wire format (as spoken by `wg`, wireguard-go and others)::

    get=1\\n\\n        -> key=value lines ... errno=0\\n\\n
    set=1\\n key=value\\n ... \\n  -> errno=N\\n\\n   (N = 0 or -errno)

Keys and preshared keys are lowercase hex. The pieces:

* parse_set(text) -> list of operations (vpncrypt.config.ops); validates the
  whole request first, so a malformed request changes nothing: -EINVAL, or
  as wireguard-go -EPROTO for a line without '=', and -EADDRNOTAVAIL for an
  endpoint whose zone names no interface (looked up here, before anything
  is applied), -EINVAL for a numeric zone over 32 bits.  (Stricter than
  wireguard-go, which takes any zone in a set and fails later, when it
  sends: vpncrypt refuses an endpoint it could never send to.)
* format_get(snapshot) -> str, from InterfaceSnapshot/PeerSnapshot.
* apply_operations(ops, control) -> checks every operation (check_operations,
  then control.prepare: whatever the source, the UAPI or a config file's
  diff at SIGHUP), and only then applies them through the Control interface.
* start_uapi_server(path, control) -> asyncio unix-socket server.

The server never holds the event loop (which carries the data plane) for
long: a ``set=1`` body is parsed and checked on a worker thread, then
applied on the loop in slices of at most SLICE_SECONDS of work; a ``get=1``
answer is built and written in slices too.  Requests are served one at a
time (a lock), so another client sees a request applied whole or not at all;
but while a big set is prepared and applied, a ``get=1`` is answered at once
from a snapshot of the device taken before it (SNAPSHOT_WORK).

vpncrypt extension: `get=vpncrypt\\n\\n` answers like `get=1` plus lines
``vpncrypt_<counter>=N`` (drop counters etc.). They are not in the plain
`get=1` answer by default: `wg` (tools 1.0.20210914) happens to skip unknown
keys, but other UAPI clients may not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import gc
import ipaddress
import itertools
import logging
import os
import re
import socket
import stat
import struct
import sys
import time
from typing import Iterable, Iterator, Optional

from ..config.keytypes import KeyFormatError, PresharedKey, PrivateKey, PublicKey, is_published_private
from ..config.ops import PeerUpdate, RemovePeer, ReplacePeers, SetAddresses, SetFwmark
from ..config.ops import SetListenPort, SetMTU, SetPrivateKey
from ..config.prefixes import parse_network
from ..endpoints import Endpoint, format_endpoint, parse_uapi_endpoint, zone_index
from .control import Control, ControlError, InterfaceSnapshot, PeerSnapshot
from ..permissions import ensure_private_dir
from .histogram import Histogram
from .logsetup import RateLimitedLog
from .uapi_framing import BodyBudget, CutBody, read_request
from .uapi_paths import DEFAULT_SOCKET_DIR, socket_path

__all__ = [
    "UAPIError",
    "parse_set",
    "format_get",
    "check_operations",
    "apply_operations",
    "apply_operations_async",
    "handle_request",
    "start_uapi_server",
    "UAPIServer",
    "socket_path",
    "Control",
    "ControlError",
    "InterfaceSnapshot",
    "PeerSnapshot",
    "DEFAULT_SOCKET_DIR",
]

log = logging.getLogger("vpncrypt.uapi")
trace = logging.getLogger("vpncrypt.trace")  # rate-limited (logsetup)

_COUNTER_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_INFO_VALUE_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
# How long a request works on the event loop before it lets everything else
# that is ready run (the data plane); a slice ends at the first step past it.
SLICE_SECONDS = 0.02


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
    """As wireguard-go's strconv.ParseUint(value, 10, bits): decimal digits
    only (no sign, no space), and any number of leading zeros."""
    if not (value.isascii() and value.isdigit()):  # not "²": int() refuses it
        raise _invalid(f"{key}: not an unsigned integer")
    # no int() of the zeros: a line has room for 65,000 of them, and Python
    # converts at most 4,300 digits (ValueError); 21 digits are out of range
    digits = value.lstrip("0") or "0"
    if len(digits) > 20 or int(digits) >= 1 << bits:
        raise _invalid(f"{key}: out of range")
    return int(digits)


def _parse_true(key: str, value: str) -> None:
    if value != "true":
        raise _invalid(f"{key}: only 'true' is accepted")


def _parse_uapi_endpoint(value: str) -> Endpoint:
    try:
        ep = parse_uapi_endpoint(value)
    except ValueError as e:
        raise _invalid(f"endpoint: {e}") from None
    if "%" in ep.host:
        # resolved now, in the validation pass, so that a zone naming no
        # interface refuses the whole request before any of it is applied
        try:
            zone_index(ep.host.split("%", 1)[1])
        except OSError as e:
            raise UAPIError(e.errno or errno.EINVAL, f"endpoint: {e.strerror}") from None
    return ep


def _parse_key(cls, key: str, value: str):
    try:
        return cls.from_hex(value)
    except KeyFormatError:
        raise _invalid(f"{key}: not 64 hex digits") from None


def _drop_final_crs(text: str) -> str:
    """Each line without its final "\\r" (one, and only at its end), as
    wireguard-go's line scanner (Go's bufio.ScanLines) reads it."""
    text = text.replace("\r\n", "\n")
    return text[:-1] if text.endswith("\r") else text  # the last line, cut by EOF


def parse_set(text: str) -> list:
    """Parse the body of a ``set=1`` request (the lines after ``set=1``, with
    or without the final blank line) into operations. Raises UAPIError
    (EINVAL) on the first problem; nothing is returned half-parsed.  A
    line's final "\\r" is dropped: "\\r\\n" ends a line too."""
    if "\r" in text:
        text = _drop_final_crs(text)
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
            ops.append(
                PeerUpdate(
                    public_key=peer["public_key"],
                    preshared_key=peer["preshared_key"],
                    endpoint=peer["endpoint"],
                    persistent_keepalive=peer["keepalive"],
                    replace_allowed_ips=peer["replace_allowed_ips"],
                    allowed_ips=tuple(peer["allowed_ips"]),
                    update_only=peer["update_only"],
                )
            )

    for n, line in enumerate(lines, start=1):
        if not line:
            raise _invalid(f"line {n}: a blank line inside the request")
        key, sep, value = line.partition("=")
        if not sep:  # wireguard-go: a protocol error, not an invalid value
            raise UAPIError(errno.EPROTO, f"line {n}: expected key=value")
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
            peer = dict(
                public_key=_parse_key(PublicKey, key, value),
                remove=False,
                update_only=False,
                preshared_key=None,
                endpoint=None,
                keepalive=None,
                replace_allowed_ips=False,
                allowed_ips=[],
            )
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
            try:
                peer["allowed_ips"].append(parse_network(value, need_bits=True))
            except ValueError as e:
                raise _invalid(f"allowed_ip: {e}") from None
        elif key == "update_only":
            _parse_true(key, value)
            peer["update_only"] = True
        elif key == "remove":
            _parse_true(key, value)
            peer["remove"] = True
        elif key == "protocol_version":
            if value != "1":  # as wireguard-go: the text, not a number ("01" is refused)
                raise _invalid("protocol_version: only 1 is supported")
        else:
            raise _invalid(f"line {n}: unknown peer key {key!r}")
    flush()
    return ops


_A_PEER = "public_key=" + "ab" * 32 + "\n"
_parse_lines = parse_set  # the check's own name: it parses no request (tests watch parse_set's calls)


def lines_parse(lines: bytes, in_peer: bool) -> bool:
    """Whether these whole lines of a set body parse (after a peer's
    public_key line if in_peer): the framing's check of a body's last
    lines before it waits for more (uapi_framing.read_body)."""
    try:
        _parse_lines((_A_PEER if in_peer else "") + lines.decode("ascii", "surrogateescape"))
    except Exception:
        return False
    return True


# --------------------------------------------------------------------------
# (b) get=1 formatter


def format_head(snapshot: InterfaceSnapshot) -> str:
    """The device lines of a ``get=1`` answer."""
    out = []
    if snapshot.private_key is not None and any(snapshot.private_key):
        out.append(f"private_key={bytes(snapshot.private_key).hex()}\n")
    if snapshot.listen_port:
        out.append(f"listen_port={int(snapshot.listen_port)}\n")
    if snapshot.fwmark:
        out.append(f"fwmark={int(snapshot.fwmark)}\n")
    return "".join(out)


def format_peers(peers: Iterable[PeerSnapshot]) -> str:
    """The lines of these peers: one formatted string each (a get of 50,000
    peers is made of this loop)."""
    out: list[str] = []
    add = out.append
    for p in peers:
        psk = p.preshared_key
        psk_line = f"preshared_key={bytes(psk).hex()}\n" if psk is not None and any(psk) else ""
        ep = format_endpoint(p.endpoint)
        ep_line = f"endpoint={ep}\n" if ep else ""
        add(
            f"public_key={bytes(p.public_key).hex()}\n{psk_line}"
            f"protocol_version={int(p.protocol_version)}\n{ep_line}"
            f"last_handshake_time_sec={int(p.last_handshake_time_sec)}\n"
            f"last_handshake_time_nsec={int(p.last_handshake_time_nsec)}\n"
            f"tx_bytes={int(p.tx_bytes)}\nrx_bytes={int(p.rx_bytes)}\n"
            f"persistent_keepalive_interval={int(p.persistent_keepalive)}\n"
        )
        # the table lists them normalized already: no parse of each one (a
        # get of 300,000 would spend a second on the event loop doing it)
        if p.allowed_ips:
            add("".join([f"allowed_ip={net}\n" for net in p.allowed_ips]))
    return "".join(out)


_LINES_PER_PIECE = 4096


def format_pieces(peers: Iterable[PeerSnapshot]) -> Iterator[str]:
    """format_peers() in pieces of at most a few thousand lines: a peer with
    many allowed IPs is cut between its allowed_ip lines."""
    batch: list[PeerSnapshot] = []
    lines = 0
    for p in peers:
        ips = p.allowed_ips
        if len(ips) <= _LINES_PER_PIECE:
            batch.append(p)
            lines += 10 + len(ips)
            if lines >= _LINES_PER_PIECE:
                yield format_peers(batch)
                batch, lines = [], 0
            continue
        if batch:
            yield format_peers(batch)
            batch, lines = [], 0
        yield format_peers([dataclasses.replace(p, allowed_ips=())])
        for i in range(0, len(ips), _LINES_PER_PIECE):
            yield "".join([f"allowed_ip={net}\n" for net in ips[i : i + _LINES_PER_PIECE]])
    if batch:
        yield format_peers(batch)


def format_tail(snapshot: InterfaceSnapshot, *, extensions: bool = False) -> str:
    """The end of the answer: the extension lines if asked for, then errno=0."""
    out: list[str] = []
    if extensions:
        for name, value in sorted(snapshot.counters.items()):
            if _COUNTER_NAME_RE.match(name):
                out.append(f"vpncrypt_{name}={int(value)}\n")
        for name, text in sorted(snapshot.info.items()):
            if _COUNTER_NAME_RE.match(name) and _INFO_VALUE_RE.match(str(text)):
                out.append(f"vpncrypt_info_{name}={text}\n")
        out.extend(f"vpncrypt_endpoint_name={line}\n" for line in snapshot.endpoint_names)
        out.extend(f"vpncrypt_path_mtu={line}\n" for line in snapshot.path_mtus)
    out.append("errno=0\n\n")
    return "".join(out)


def format_get(snapshot: InterfaceSnapshot, *, extensions: bool = False) -> str:
    """The full answer to ``get=1`` (ending in ``errno=0\\n\\n``)."""
    return format_head(snapshot) + format_peers(snapshot.peers) + format_tail(snapshot, extensions=extensions)


# --------------------------------------------------------------------------
# (c) check, then apply

_PORT_MAX = 65535  # 16-bit UDP ports
_FWMARK_MAX = 0xFFFFFFFF  # SO_MARK is 32 bits
_KEEPALIVE_MAX = 65535  # wireguard-go: a uint16 of seconds
_MTU_MIN, _MTU_MAX = 68, 65535  # RFC 791's minimum; the kernel's maximum for a TUN
_NETWORKS = (ipaddress.IPv4Network, ipaddress.IPv6Network)
_INTERFACES = (ipaddress.IPv4Interface, ipaddress.IPv6Interface)


def _check_uint(what: str, value, top: int, bottom: int = 0) -> None:
    if type(value) is not int or not bottom <= value <= top:
        raise _invalid(f"{what}: {value!r} is not in {bottom}-{top}")


def _check_key(what: str, key, optional: bool = False) -> None:
    if key is None and optional:
        return
    try:
        ok = len(bytes(key)) == 32
    except TypeError:
        ok = False
    if not ok:
        raise _invalid(f"{what}: not a 32-byte key")


def check_operations(ops: Iterable) -> list:
    """Every operation's values in range, whoever made them (the UAPI
    parser, a config file's diff): UAPIError(EINVAL) otherwise.  What the
    device must decide (a zone's interface, IPv6 on this host) is
    Control.prepare's."""
    ops = list(ops)
    for op in ops:
        if isinstance(op, SetPrivateKey):
            _check_key("private_key", op.key, optional=True)
            if op.key is not None and is_published_private(op.key):
                # the config parser refuses it too; `wg set` must not let it in
                raise _invalid(
                    "private_key: a key from vpncrypt's example configs (published): use `wg genkey`"
                )
        elif isinstance(op, SetListenPort):
            _check_uint("listen_port", op.port, _PORT_MAX)
        elif isinstance(op, SetFwmark):
            _check_uint("fwmark", op.fwmark, _FWMARK_MAX)
        elif isinstance(op, SetMTU):
            _check_uint("MTU", op.mtu, _MTU_MAX, _MTU_MIN)
        elif isinstance(op, SetAddresses):
            if not all(isinstance(a, _INTERFACES) for a in (*op.add, *op.remove)):
                raise _invalid("Address: not an address with a prefix length")
        elif isinstance(op, RemovePeer):
            _check_key("public_key", op.public_key)
        elif isinstance(op, PeerUpdate):
            _check_key("public_key", op.public_key)
            _check_key("preshared_key", op.preshared_key, optional=True)
            if op.persistent_keepalive is not None:
                _check_uint("persistent_keepalive_interval", op.persistent_keepalive, _KEEPALIVE_MAX)
            if op.endpoint is not None:
                if not isinstance(op.endpoint, Endpoint):
                    raise _invalid(f"endpoint: {op.endpoint!r} is not an endpoint")
                # port 0 as wireguard-go takes it (parse_uapi_endpoint)
                _check_uint("endpoint port", op.endpoint.port, _PORT_MAX)
            for net in op.allowed_ips:
                if not isinstance(net, _NETWORKS):
                    raise _invalid(f"allowed_ip: {net!r} is not a network")
        elif not isinstance(op, ReplacePeers):
            raise TypeError(f"unknown operation {type(op).__name__}")
    return ops


def prepare_operations(ops: Iterable, control: Control) -> list:
    """check_operations, then the device's own checks (Control.prepare):
    the operations ready to apply, in order.  Raises before anything is
    applied."""
    return control.prepare(check_operations(ops))


def _apply_steps(ops: list, control: Control) -> Iterator[None]:
    """Apply prepared operations in order, yielding between pieces of work."""
    for op in ops:
        if isinstance(op, PeerUpdate):
            if op.update_only and not control.has_peer(op.public_key):
                continue
            yield from control.upsert_peer_steps(op)
            continue
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
        elif isinstance(op, SetMTU):
            control.set_mtu(op.mtu)
        elif isinstance(op, SetAddresses):
            control.set_addresses(op.add, op.remove)
        yield


def _refuse_if_busy(control: Control) -> None:
    if control.busy:
        raise ControlError(errno.EBUSY, "a UAPI request is being applied; try again")


def apply_operations(ops: Iterable, control: Control) -> None:
    """Check every operation, then apply them all at once (the SIGHUP
    reload, tests).  Nothing is applied if a check fails (UAPIError, or
    ControlError/OSError from Control.prepare); a failure while applying
    (ControlError/OSError: a port in use) propagates with its errno."""
    _refuse_if_busy(control)
    for _ in _apply_steps(prepare_operations(ops, control), control):
        pass


async def apply_operations_async(ops: list, control: Control, *, slice_seconds: float = SLICE_SECONDS) -> int:
    """Apply operations already prepared (prepare_operations), letting the
    event loop run whenever a slice of work took ``slice_seconds``.  While
    it runs, control.busy is set (a reload waits for another time).  Returns
    how many times it let the loop run."""
    _refuse_if_busy(control)
    control.busy = True
    yields = 0
    try:
        clock = time.perf_counter
        deadline = clock() + slice_seconds
        for _ in _apply_steps(ops, control):
            if clock() >= deadline:
                await asyncio.sleep(0)
                yields += 1
                deadline = clock() + slice_seconds
    finally:
        control.busy = False
    return yields


def _errno_of(exc: BaseException) -> int:
    if isinstance(exc, (UAPIError, ControlError)):
        return exc.errno
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO


def _errno_reply(code: int) -> bytes:
    return f"errno={-abs(code) if code else 0}\n\n".encode()


def _failure_reply(op_line: str, exc: Exception) -> bytes:
    """The answer to a request that failed with ``exc``."""
    if isinstance(exc, UAPIError):
        trace.debug("UAPI request refused (errno %d): %s", exc.errno, exc)
        return _errno_reply(exc.errno)
    if isinstance(exc, (ControlError, OSError)):
        log.warning("UAPI %s failed: %s", op_line[:16], exc)
        return _errno_reply(_errno_of(exc))
    log.error("UAPI %s failed", op_line[:16], exc_info=exc)
    return _errno_reply(errno.EIO)


_GET_LINES = ("get=1", "get=vpncrypt")


def handle_request(op_line: str, body: str, control: Control, *, extensions_in_get: bool = False) -> bytes:
    """One request, all at once: ``op_line`` without its newline, ``body``
    the lines after it up to (not including) the blank line. Returns the
    full answer.  (The server serves the same requests in slices.)"""
    try:
        if op_line in _GET_LINES:
            if body:
                raise _invalid("get takes no arguments")
            snap = control.snapshot()
            return format_get(snap, extensions=extensions_in_get or op_line == "get=vpncrypt").encode()
        if op_line == "set=1":
            ops = parse_set(body)
            apply_operations(ops, control)
            return _errno_reply(0)
        raise _invalid("unknown operation")
    except Exception as e:
        return _failure_reply(op_line, e)


# --------------------------------------------------------------------------
# (d) the server

_UCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _pid, uid, _gid = _UCRED.unpack(creds)
    return uid


# Concurrent clients: `wg` opens one connection per command, so a handful is
# plenty; past the cap a connection is closed at once, so that idle clients
# cannot use up the daemon's file descriptors.  A client has this long to
# complete each request (from connecting, or from the previous answer).
MAX_CLIENTS = 32
REQUEST_TIMEOUT = 5.0
# accept() failing for lack of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM):
# stop accepting for a moment instead of spinning on a readable socket.
ACCEPT_PAUSE = 0.5
_ACCEPT_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class UAPIServer:
    def __init__(
        self,
        path: str,
        control: Control,
        *,
        allowed_uids: Optional[Iterable[int]] = None,
        extensions_in_get: bool = False,
        max_clients: int = MAX_CLIENTS,
        request_timeout: float = REQUEST_TIMEOUT,
    ):
        self.path = path
        self.control = control
        self.allowed_uids = (
            frozenset(allowed_uids) if allowed_uids is not None else frozenset({0, os.geteuid()})
        )
        self.extensions_in_get = extensions_in_get
        self.max_clients = max_clients
        self.request_timeout = request_timeout
        self._sock: Optional[socket.socket] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._accepting = False
        self._resume: Optional[asyncio.TimerHandle] = None
        self._ident: Optional[tuple] = None
        self._tasks: set = set()
        self._warn = RateLimitedLog(log, interval=10.0)
        self._lock = asyncio.Lock()  # one request applied or read at a time
        # while a big set is applied: the device before it, for get=1 (_get)
        self._before: Optional[list] = None
        self._before_ready = asyncio.Event()
        self._bodies = BodyBudget()  # set bodies held at once, every client's together
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.slice_seconds = SLICE_SECONDS
        self.yields = 0  # times a request let the event loop run before it was done
        self.refused = 0  # connections closed at once: too many clients
        self.timed_out = 0  # clients closed for not completing a request in time
        # seconds from a whole request read to its answer sent, by operation
        # (for the metrics: vpncrypt.daemon.metrics)
        self.latency = {"get": Histogram(), "set": Histogram(), "other": Histogram()}

    async def start(self) -> "UAPIServer":
        directory = os.path.dirname(self.path) or "."
        ensure_private_dir(directory)
        clear_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
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
        except BaseException as e:
            sock.close()
            self._unlink()
            if isinstance(e, OSError) and e.strerror and e.filename is None:
                # a socket call names no file: say which one could not be made
                raise OSError(e.errno, e.strerror, self.path) from None
            raise
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        # set=1 bodies are parsed and checked here, off the event loop
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="uapi")
        self._accept_on()
        log.info("UAPI listening on %s", self.path)
        return self

    # ------------------------------------------------------------ accepting

    def _accept_on(self) -> None:
        self._resume = None
        if self._sock is not None and self._loop is not None and not self._accepting:
            self._loop.add_reader(self._sock.fileno(), self._on_accept)
            self._accepting = True

    def _accept_off(self) -> None:
        if self._accepting and self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._accepting = False

    def _on_accept(self) -> None:
        sock, loop = self._sock, self._loop
        if sock is None or loop is None:  # closed
            return
        for _ in range(16):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # Never fatal: the daemon keeps running and serving the tunnel.
                if e.errno in _ACCEPT_RESOURCE_ERRORS:
                    self._warn.warning(
                        "UAPI: cannot accept a connection: %s; pausing for %.1f s", e.strerror, ACCEPT_PAUSE
                    )
                    self._accept_off()
                    self._resume = loop.call_later(ACCEPT_PAUSE, self._accept_on)
                else:  # ECONNABORTED, EPROTO, EPERM (a security module): that one client only
                    self._warn.warning("UAPI: a connection failed in accept(): %s", e.strerror)
                return
            if len(self._tasks) >= self.max_clients:
                conn.close()
                self.refused += 1
                self._warn.warning(
                    "UAPI: connection refused: already serving %d clients (%d refused so far)",
                    len(self._tasks),
                    self.refused,
                )
                continue
            task = loop.create_task(self._client(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ closing

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
        if self._sock is not None:
            self._accept_off()
            if self._resume is not None:
                self._resume.cancel()
                self._resume = None
            self._sock.close()
            self._sock = None
        for t in list(self._tasks):
            t.cancel()
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None
        self._unlink()
        self._ident = None

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()
        await self.wait_closed()

    # ------------------------------------------------------------ one client

    async def _client(self, conn: socket.socket) -> None:
        writer = None
        try:
            conn.setblocking(False)
            reader, writer = await asyncio.open_unix_connection(sock=conn)
            await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError):
            pass
        except OSError as e:
            log.debug("UAPI: client connection failed: %s", e.strerror or e)
        finally:
            if writer is not None:
                writer.close()
                try:
                    await writer.wait_closed()
                except Exception:
                    pass
            else:
                conn.close()

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
            try:
                req = await asyncio.wait_for(
                    read_request(reader, self._bodies, lines_parse), self.request_timeout
                )
            except asyncio.TimeoutError:
                self.timed_out += 1
                log.debug(
                    "UAPI: closed a client that sent no complete request in %.0f s", self.request_timeout
                )
                return
            if req is None:
                return
            if req[0] is None:  # too large / unreadable: answered, then hang up
                writer.write(_errno_reply(req[1]))
                await writer.drain()
                return
            op_line, body = req
            trace.debug("UAPI: %s request from uid %d", op_line[:16], uid)
            began = time.perf_counter()
            if op_line == "set=1":
                kind = "set"
                try:
                    writer.write(await self._set(body))
                finally:
                    self._bodies.give(len(body))
            elif op_line in _GET_LINES and not body:
                kind = "get"
                await self._get(writer, self.extensions_in_get or op_line == "get=vpncrypt")
            else:
                kind = "other"
                writer.write(handle_request(op_line, body, self.control))
            # the answer is written under the lock, sent without it
            await asyncio.wait_for(writer.drain(), self.request_timeout)
            self.latency[kind].observe(time.perf_counter() - began)
            if isinstance(body, CutBody):  # its rest was never read: hang up once answered
                return

    @contextlib.asynccontextmanager
    async def exclusive(self):
        """Hold off every UAPI request while the caller changes the device
        (for the SIGHUP reload: it then never meets a request in slices)."""
        async with self._lock:
            yield

    # ------------------------------------------------------------ requests in slices

    async def _pause(self) -> None:
        await asyncio.sleep(0)
        self.yields += 1

    async def _set(self, body: str) -> bytes:
        """Parse and check on the worker, then apply in slices on the loop,
        one request at a time."""
        big = len(body) >= GC_PAUSE_BYTES
        with _cyclic_gc_paused(big), _short_switch_interval(big):
            return await self._set_body(body)

    async def _set_body(self, body: str) -> bytes:
        loop = asyncio.get_running_loop()
        parsed = ops = None
        try:
            parsed = await loop.run_in_executor(self._worker, parse_set, body)
            if isinstance(body, CutBody):  # cut at a line no parser takes: it cannot parse
                raise _invalid("a line no parser takes (the request was not read further)")
            async with self._lock:
                try:
                    # taken first: preparing 100,000 peers takes a while too
                    if _work(parsed) >= SNAPSHOT_WORK:
                        self._before = await self._snapshot()
                        self._before_ready.set()
                    ops = await loop.run_in_executor(self._worker, prepare_operations, parsed, self.control)
                    self.yields += await apply_operations_async(
                        ops, self.control, slice_seconds=self.slice_seconds
                    )
                finally:
                    self._before = None
                    self._before_ready.clear()
            return _errno_reply(0)
        except Exception as e:
            return _failure_reply("set=1", e)
        finally:
            # hundreds of thousands of networks are freed on the worker, a
            # slice at a time (freed at once here, they would hold the loop)
            garbage = [parsed, ops]
            parsed = ops = None
            if self._worker is not None:  # not closed meanwhile
                await loop.run_in_executor(self._worker, _dispose, garbage)

    async def _snapshot(self) -> list:
        """The device as a get=1 lists it, read in slices (before a big set
        is applied, under the lock): its head, then its parts of peers."""
        parts = []
        for part in self.control.snapshot_parts(counters=False):
            parts.append(part)
            await self._pause()
        return parts

    async def _get(self, writer, extensions: bool) -> None:
        """The answer written as it is read, in slices, one request at a
        time.  A failure before anything was written is answered as any
        other; after, the answer ends in that errno (the client sees the
        request fail, never a short device).  While a big set is applied,
        a get=1 is answered at once from the device as it was before the
        set (`_before`), never from half of it; get=vpncrypt, whose drop
        counters are read live, waits for the set to end."""
        # the answer's objects go by their reference counts; the cyclic
        # collector would traverse every peer of the device meanwhile
        # (a third of the time of a get of 50,000)
        with _cyclic_gc_paused(True):
            if extensions:  # live counters: served under the lock, after any set
                await self._lock.acquire()
                before = None
            else:
                before = await self._lock_or_before()
            if before is not None:
                await self._write_get(writer, False, iter(before))
                return
            try:
                await self._write_get(writer, extensions, self.control.snapshot_parts(counters=extensions))
            finally:
                self._lock.release()

    async def _lock_or_before(self) -> Optional[list]:
        """The lock (held on return: None), or the snapshot of a big set
        that holds it, whichever comes first."""
        if self._before is not None:
            return self._before
        acquire = asyncio.ensure_future(self._lock.acquire())
        ready = asyncio.ensure_future(self._before_ready.wait())
        try:
            await asyncio.wait({acquire, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
        if acquire.done() and not acquire.cancelled() and acquire.exception() is None:
            return None  # the lock: served live
        if self._before is None:  # (cannot be: the event is set only with it)
            await self._lock.acquire()
        return self._before

    async def _write_get(self, writer, extensions: bool, parts: Iterator) -> None:
        clock = time.perf_counter
        try:
            deadline = clock() + self.slice_seconds
            head = next(parts)
            chunks = [format_head(head)]
            for peers in parts:
                # one piece at a time ("" for a part with no lines: a pause)
                for piece in itertools.chain(format_pieces(peers), ("",)):
                    chunks.append(piece)
                    if clock() >= deadline:
                        writer.write("".join(chunks).encode())
                        chunks = []
                        await self._pause()
                        deadline = clock() + self.slice_seconds
            chunks.append(format_tail(head, extensions=extensions))
            writer.write("".join(chunks).encode())
        except Exception as e:
            writer.write(_failure_reply("get=1", e))  # what was written ends with a whole line


# A set whose operations carry this much work (peers and allowed IPs) takes
# a snapshot of the device before it is applied, and a get=1 meanwhile is
# answered from it at once: applying 100,000 peers held every get (even
# `wg show IFACE listen-port`) for seconds.  Smaller sets are applied
# within a few slices, and a get waits for them.
SNAPSHOT_WORK = 2048


def _work(ops: list) -> int:
    return sum(1 + len(getattr(op, "allowed_ips", ())) for op in ops)


# A set=1 body this big pauses Python's cyclic garbage collector until it is
# applied and its operations freed (a get pauses it while it is read and
# written).  Its networks are a million objects or more, and a full
# collection (which runs in whichever thread allocates, the worker's parse
# here) traverses every one of them holding the interpreter: 0.96 s for
# 600,000 allowed_ip lines, a stop of the data plane.  None of them is in a
# cycle (they go by their reference counts); the collector resumes at the end.
GC_PAUSE_BYTES = 1 << 20
# While a big set body is served (parsed on the worker), the interpreter lock passes between it
# and the event loop thread every SWITCH_INTERVAL instead of Python's 5 ms: the
# data plane gives the lock up at every call into the native core and every
# system call, and waited up to the interval each time to get it back.
SWITCH_INTERVAL = 0.0005


class _WhileServing:
    """A process-wide setting changed while at least one request that needs
    it is served, and put back after the last one (the requests of several
    clients overlap)."""

    def __init__(self, change, restore):
        self._change, self._restore = change, restore
        self._depth, self._saved = 0, None

    @contextlib.contextmanager
    def __call__(self, needed: bool):
        if not needed:
            yield
            return
        if self._depth == 0:
            self._saved = self._change()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._restore(self._saved)


def _gc_off() -> bool:
    was = gc.isenabled()
    gc.disable()
    return was


def _switch_short() -> float:
    was = sys.getswitchinterval()
    sys.setswitchinterval(min(SWITCH_INTERVAL, was))
    return was


_cyclic_gc_paused = _WhileServing(_gc_off, lambda was: gc.enable() if was else None)
_short_switch_interval = _WhileServing(_switch_short, sys.setswitchinterval)


def _dispose(garbage: list) -> None:
    """Drop operations a few thousand objects at a time: freeing one tuple
    of 600,000 networks is a single step that holds the interpreter (and so
    the event loop thread) for a sixth of a second."""
    while garbage:
        ops = garbage.pop()
        while ops:
            op = ops.pop()
            nets = list(getattr(op, "allowed_ips", ()))
            del op  # the tuple goes; the networks are still in nets
            while nets:
                del nets[-_LINES_PER_PIECE:]
        del ops


def clear_stale_socket(path: str) -> None:
    """Remove a socket left at `path` by a daemon that died; OSError
    (EADDRINUSE) if a live one answers there, EEXIST if it is no socket."""
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


async def start_uapi_server(
    path: str,
    control: Control,
    *,
    allowed_uids: Optional[Iterable[int]] = None,
    extensions_in_get: bool = False,
    **limits,
) -> UAPIServer:
    """Serve the UAPI on ``path`` (mode 0600, parent created 0700 if
    missing). Close with ``server.close(); await server.wait_closed()`` or
    ``async with``; the socket file is removed on close."""
    server = UAPIServer(
        path, control, allowed_uids=allowed_uids, extensions_in_get=extensions_in_get, **limits
    )
    return await server.start()
