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
import os
import re
import socket
import struct
from typing import Any, Iterable

from .uapi import DEFAULT_SOCKET_DIR, socket_path


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


def _checked(path: str, answer: bytes) -> str:
    """A whole answer as text; UAPIProtocolError for one cut short."""
    if not answer.endswith(b"\n\n") or not answer.rstrip(b"\n").rsplit(b"\n", 1)[-1].startswith(b"errno="):
        raise UAPIProtocolError(f"{path}: the daemon closed the connection without an answer")
    return answer.decode("utf-8", "replace")


def read_answer(sock: socket.socket) -> bytes:
    """One answer from a connected UAPI socket: up to and including the
    blank line after its errno line, or what came before the server hung up.
    (Send the next request after reading the answer: a connection can carry
    many requests.)  Only the end is looked at after each read: searching
    the whole of a 24 MB answer (100,000 peers) after each of its 370 reads,
    and copying it into a new bytes each time, took 4 s of CPU."""
    buf = bytearray()
    while True:
        chunk = sock.recv(1 << 18)
        if not chunk:
            break
        buf += chunk
        if buf.endswith(b"\n\n") and buf.startswith(b"errno=", buf.rfind(b"\n", 0, len(buf) - 2) + 1):
            break
    return bytes(buf)


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


def parse_get(text: str) -> dict[str, Any]:
    """A get=1 / get=vpncrypt answer as {interface fields..., "peers": [...],
    "counters": {...}}.  A peer's all-zero preshared_key is left out: it
    means none.  Raises OSError for errno != 0."""
    dev: dict[str, Any] = {"peers": [], "counters": {}, "info": {}}
    first = 0 if text.startswith("public_key=") else text.find("\npublic_key=") + 1
    if first <= 0 and not text.startswith("public_key="):
        _parse_lines(text.split("\n"), dev, dev)
        return dev
    _parse_lines(text[:first].split("\n"), dev, dev)
    if not _fast_peers(text[first:], dev):
        dev["peers"].clear()
        dev["counters"].clear()
        dev["info"].clear()
        _parse_lines(text[first:].split("\n"), dev, dev)
    return dev


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


def get_device(
    interface: str, socket_dir: str = DEFAULT_SOCKET_DIR, *, extensions: bool = True
) -> tuple[dict[str, Any], bool]:
    """The device behind `interface` as parse_get() gives it, and whether it
    answered vpncrypt's extension: ``get=vpncrypt`` to a vpncrypt daemon
    (serves_vpncrypt), ``get=1`` to any other (or when it cannot tell)."""
    path = socket_path(interface, socket_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5.0)
        s.connect(path)
        ours = extensions and serves_vpncrypt(s)
        s.sendall(b"get=vpncrypt\n\n" if ours else b"get=1\n\n")
        answer = read_answer(s)
    return parse_get(_checked(path, answer)), ours
