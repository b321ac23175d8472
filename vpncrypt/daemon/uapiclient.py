"""The client side of the WireGuard UAPI: one request over
/var/run/wireguard/IFACE.sock, the answer as text or parsed.  Used by
`vpncrypt show`, the lab benches (tests/benchlab/) and the tests.

wireguard-go answers ``get=1`` and ``set=1`` only; it hangs up on anything
else (vpncrypt's ``get=vpncrypt`` extension included) and logs it as an
error, so an answer that does not end in ``errno=N`` is an error here
(UAPIProtocolError), never an empty device, and get_device() asks for the
extension only a daemon it knows is vpncrypt (serves_vpncrypt)."""

from __future__ import annotations

import errno
import gc
import os
import re
import select
import socket
import struct
from typing import Any, Callable, Iterable

from .uapi_paths import DEFAULT_SOCKET_DIR, socket_path


class UAPIProtocolError(OSError):
    """The server closed the connection without a complete answer."""

    def __init__(self, message: str):
        super().__init__(errno.EPROTO, message)


def request(path: str, text: str, *, timeout: float = 5.0, terminate: bool = True) -> str:
    """Send `text` on the UAPI socket at `path` and return the answer (up to
    and including the blank line).  With `terminate`, the request is sent
    with exactly one blank line after it.  Raises OSError (connect errors,
    timeouts) or UAPIProtocolError (no complete answer)."""
    data = text.encode()
    if terminate:
        data = data.rstrip(b"\n") + b"\n\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        answer = read_answer(s)
    return _checked(path, answer)


def _check_whole(path: str, answer: bytes | bytearray) -> None:
    """UAPIProtocolError for an answer (or its end) cut short: no errno
    line and blank line at its end."""
    if not answer.endswith(b"\n\n") or not answer.rstrip(b"\n").rsplit(b"\n", 1)[-1].startswith(b"errno="):
        raise UAPIProtocolError(f"{path}: the daemon closed the connection without an answer")


def _checked(path: str, answer: bytes) -> str:
    """A whole answer as text; UAPIProtocolError for one cut short."""
    _check_whole(path, answer)
    return answer.decode("utf-8", "replace")


def _answer_complete(buf: bytearray) -> bool:
    """Whether `buf` (the answer's end: at least its last line) ends with
    an errno line and the blank line after it."""
    return buf.endswith(b"\n\n") and buf.startswith(b"errno=", buf.rfind(b"\n", 0, len(buf) - 2) + 1)


def read_answer(sock: socket.socket) -> bytes:
    """One answer from a connected UAPI socket: up to and including the
    blank line after its errno line, or what came before the server hung up.
    (Send the next request after reading the answer: a connection can carry
    many requests.)  Only the end is looked at after each read: searching
    the whole of a 24 MB answer (100,000 peers) after each of its 370 reads,
    and copying it into a new bytes each time, took 4 s of CPU."""
    buf = bytearray()
    while _read_more(sock, buf):
        pass
    return bytes(buf)


def _read_more(sock: socket.socket, buf: bytearray) -> bool:
    """One read into `buf`; False once the answer is over (its errno line
    and blank line are in, or the server hung up)."""
    chunk = sock.recv(1 << 18)
    buf += chunk
    return bool(chunk) and not _answer_complete(buf)


def interface_request(
    interface: str,
    text: str,
    socket_dir: str = DEFAULT_SOCKET_DIR,
    *,
    timeout: float = 5.0,
    terminate: bool = True,
) -> str:
    """request() on the UAPI socket of `interface`."""
    return request(socket_path(interface, socket_dir), text, timeout=timeout, terminate=terminate)


def _parse_lines(lines: Iterable[str], dev: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """Lines of a get answer into dev (and its peers), `cur` the device or
    the peer they belong to; returns the peer (or device) after them."""
    for line in lines:
        if not line:
            continue
        k, _, v = line.partition("=")
        if k == "errno":
            if v != "0":
                raise OSError(-int(v), os.strerror(-int(v)))
            continue
        if k == "public_key":
            cur = {"public_key": v, "allowed_ips": []}
            dev["peers"].append(cur)
        elif k == "allowed_ip":
            cur["allowed_ips"].append(v)
        elif k == "vpncrypt_endpoint_name":  # a followed Endpoint name: see control.InterfaceSnapshot
            key, state, resolved, next_try, name = v.split(" ", 4)
            dev.setdefault("endpoint_names", {})[key] = {
                "name": name,
                "state": state,
                "resolved": int(resolved) or None,
                "next_try": int(next_try) or None,
            }
        elif k == "vpncrypt_path_mtu":  # a peer's path MTU: see control.InterfaceSnapshot
            key, mtu = v.split(" ", 1)
            dev.setdefault("path_mtus", {})[key] = int(mtu)
        elif k.startswith("vpncrypt_info_"):
            dev["info"][k[len("vpncrypt_info_") :]] = v
        elif k.startswith("vpncrypt_"):
            dev["counters"][k[len("vpncrypt_") :]] = int(v)
        elif k == "preshared_key" and not v.strip("0"):
            continue  # all zeros is no key (wireguard-go sends it for none; wg shows none)
        else:
            cur[k] = v
    return cur


# A peer as vpncrypt and wireguard-go both list it: these lines in this
# order, then its allowed_ip lines (and whatever else, up to the next peer).
_PEER = re.compile(
    r"^public_key=([0-9a-f]{64})\n"
    r"(?:preshared_key=([0-9a-f]{64})\n)?"
    r"protocol_version=([0-9]+)\n"
    r"(?:endpoint=([^\n]*)\n)?"
    r"last_handshake_time_sec=([0-9]+)\n"
    r"last_handshake_time_nsec=([0-9]+)\n"
    r"tx_bytes=([0-9]+)\n"
    r"rx_bytes=([0-9]+)\n"
    r"persistent_keepalive_interval=([0-9]+)\n"
    r"((?:allowed_ip=[^\n]*\n)*)"
    r"((?:(?!public_key=)[^\n]*\n)*)",
    re.M,
)


def _fast_peers(text: str, dev: dict[str, Any]) -> bool:
    """The peers of `text` (which starts at the first one, and ends in a
    newline) into dev, if every one is listed in _PEER's order: one regular
    expression over the whole answer instead of a Python step per line
    (1.1 million lines at 100,000 peers).  False, and dev untouched,
    otherwise."""
    found = _PEER.findall(text)
    # each match runs to the next public_key line: one for each, or a peer
    # was listed otherwise (its lines are in no match)
    if len(found) != text.count("\npublic_key=") + 1:
        return False
    add = dev["peers"].append
    for pk, psk, version, endpoint, sec, nsec, tx, rx, keepalive, ips, rest in found:
        peer = {
            "public_key": pk,
            "protocol_version": version,
            "last_handshake_time_sec": sec,
            "last_handshake_time_nsec": nsec,
            "tx_bytes": tx,
            "rx_bytes": rx,
            "persistent_keepalive_interval": keepalive,
            "allowed_ips": ips[11:-1].split("\nallowed_ip=") if ips else [],
        }
        if psk and psk.strip("0"):
            peer["preshared_key"] = psk
        if endpoint:
            peer["endpoint"] = endpoint
        add(peer)
        if rest:  # lines of other kinds (the device's counters after the last peer)
            _parse_lines(rest.split("\n"), dev, peer)
    return True


def _new_device() -> dict[str, Any]:
    return {"peers": [], "counters": {}, "info": {}}


def _parse_part(text: str, dev: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """Whole lines of a get answer into dev, `cur` the device or the peer
    that lines before the first public_key line belong to (_parse_lines);
    its peers by _fast_peers where they are listed in the usual order, a
    line at a time otherwise.  Returns the peer (or device) after them."""
    first = 0 if text.startswith("public_key=") else text.find("\npublic_key=") + 1
    if first <= 0 and not text.startswith("public_key="):
        return _parse_lines(text.split("\n"), dev, cur)
    cur = _parse_lines(text[:first].split("\n"), dev, cur)
    if _fast_peers(text[first:], dev):
        last: dict[str, Any] = dev["peers"][-1]
        return last
    return _parse_lines(text[first:].split("\n"), dev, dev)


def parse_get(text: str) -> dict[str, Any]:
    """A get=1 / get=vpncrypt answer as {interface fields..., "peers": [...],
    "counters": {...}}.  A peer's all-zero preshared_key is left out: it
    means none.  Raises OSError for errno != 0."""
    dev = _new_device()
    _parse_part(text, dev, dev)
    return dev


# Whole peers are parsed while the socket has nothing to read, once this
# much of the answer is waiting (a few hundred peers), at most about
# _PARSE_MAX at a time (a few milliseconds) before it is looked at again.
_PARSE_STEP = 1 << 16
_PARSE_MAX = 1 << 18
_PEER_START = b"\npublic_key="
PeersHook = Callable[[list[dict[str, Any]]], None]


class _PartParser:
    """A get answer's whole lines parsed a part at a time, as parse_get()
    parses them at once.  An error in a part is kept until the answer is
    known to be whole (UAPIProtocolError if it is not, whatever else is
    wrong with it)."""

    def __init__(self, on_peers: PeersHook | None) -> None:
        self.dev = _new_device()
        self.cur: dict[str, Any] = self.dev
        self.failed: Exception | None = None
        self.on_peers = on_peers
        self.scanned = 0  # where to look on for a peer's start, past one that runs on

    def part_end(self, buf: bytearray) -> int:
        """Where the whole peers at the start of `buf` end (0: none yet):
        the last peer start within _PARSE_MAX, or else the first after it
        (a peer with many allowed IPs), looked for once in each byte."""
        cut = buf.rfind(_PEER_START, 0, _PARSE_MAX) + 1
        if cut > 0:
            return cut
        at = buf.find(_PEER_START, max(self.scanned, 0))
        self.scanned = len(buf) - len(_PEER_START) if at < 0 else 0
        return at + 1

    def feed(self, text: str) -> None:
        if self.failed is None:
            try:
                self._parse(text)
            except Exception as e:
                self.failed = e

    def _parse(self, text: str) -> None:
        peers = self.dev["peers"]
        known = len(peers)
        self.cur = _parse_part(text, self.dev, self.cur)
        if self.on_peers is not None and len(peers) > known:
            self.on_peers(peers[known:])

    def result(self, path: str, rest: bytearray) -> dict[str, Any]:
        _check_whole(path, rest)
        if self.failed is not None:
            raise self.failed
        self._parse(rest.decode("utf-8", "replace"))
        return self.dev


def read_device(sock: socket.socket, path: str, on_peers: PeersHook | None = None) -> dict[str, Any]:
    """A get answer read from a connected UAPI socket and parsed as
    parse_get() does, its whole peers parsed as they arrive whenever there
    is nothing to read: a big answer (24 MB at 100,000 peers) is written
    over a second or more by the daemon, and parsing it meanwhile takes
    that much off the wait after it, while the daemon is never kept waiting
    for its reader.  Python's cyclic garbage collector is paused meanwhile:
    the peers are a few hundred thousand objects and no cycle, and it
    walked them all again and again (a third of the parse's time).
    UAPIProtocolError for an answer cut short; OSError for errno != 0.
    `on_peers` is given every peer once, in order, as soon as it is read
    whole (a list of them at a time): the caller's work on them is done
    meanwhile too.  A peer's dict is final then, but the answer's end (the
    vpncrypt_endpoint_name lines of get=vpncrypt) is read last."""
    parts = _PartParser(on_peers)
    buf = bytearray()
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    paused = gc.isenabled()
    gc.disable()
    try:
        while True:
            if len(buf) >= _PARSE_STEP and not poll.poll(0):
                cut = parts.part_end(buf)
                if cut > 0:
                    parts.feed(buf[:cut].decode("utf-8", "replace"))
                    del buf[:cut]
                    continue
            if not _read_more(sock, buf):
                return parts.result(path, buf)
    finally:
        if paused:
            gc.enable()


_UCRED = struct.Struct("3i")
# The native core every vpncrypt daemon maps (vpncrypt/_native.abi3.so, or
# a build tagged for one interpreter); wireguard-go, a static Go binary, maps
# no such file.
_VPNCRYPT_CORE = re.compile(rb"/vpncrypt/_native(?:\.[\w-]+)?\.so$", re.M)


def serves_vpncrypt(sock: socket.socket) -> bool:
    """Whether the server at the other end of a connected UAPI socket is a
    vpncrypt daemon: the process SO_PEERCRED names (the one that made the
    listening socket) has vpncrypt's native core mapped.  Nothing is sent:
    asking a foreign daemon ``get=vpncrypt`` to find out costs an ERROR line
    in its log on every call (wireguard-go's "invalid UAPI operation").
    False when it cannot tell (a server in another PID namespace shows as
    pid 0; /proc unreadable): then the plain get=1, which every daemon
    answers."""
    try:
        pid, _uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        if pid <= 0:
            return False
        with open(f"/proc/{pid}/maps", "rb") as f:
            return _VPNCRYPT_CORE.search(f.read()) is not None
    except OSError:
        return False


GET_ANSWER_TIMEOUT = 60.0  # seconds without a byte of a get's answer


def get_device(
    interface: str,
    socket_dir: str = DEFAULT_SOCKET_DIR,
    *,
    extensions: bool = True,
    on_peers: PeersHook | None = None,
) -> tuple[dict[str, Any], bool]:
    """The device behind `interface` as parse_get() gives it, and whether it
    answered vpncrypt's extension: ``get=vpncrypt`` to a vpncrypt daemon
    (serves_vpncrypt), ``get=1`` to any other (or when it cannot tell).
    `on_peers`: as read_device's."""
    path = socket_path(interface, socket_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5.0)
        s.connect(path)
        ours = extensions and serves_vpncrypt(s)
        s.sendall(b"get=vpncrypt\n\n" if ours else b"get=1\n\n")
        # A live daemon that is slow to answer is waited for (wg has no
        # timeout at all): at 100,000 peers on a loaded machine the first
        # byte took up to 4.9 s, and 5 s made 1 show in 7 fail.  A daemon
        # that says nothing for GET_ANSWER_TIMEOUT is taken as hung.
        s.settimeout(GET_ANSWER_TIMEOUT)
        return read_device(s, path, on_peers), ours
