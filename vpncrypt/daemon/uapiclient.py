"""The client side of the WireGuard UAPI: one request over
/var/run/wireguard/IFACE.sock, the answer as text or parsed.  Used by
`vpncrypt show`, the lab benches (tests/benchlab/) and the tests.

wireguard-go answers ``get=1`` and ``set=1`` only; it hangs up on anything
else (vpncrypt's ``get=vpncrypt`` extension included) without a word, so an
answer that does not end in ``errno=N`` is an error here (UAPIProtocolError),
never an empty device."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

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
    if not answer.endswith(b"\n\n") or not answer.rstrip(b"\n").rsplit(b"\n", 1)[-1].startswith(b"errno="):
        raise UAPIProtocolError(f"{path}: the daemon closed the connection without an answer")
    return answer.decode("utf-8", "replace")


def read_answer(sock: socket.socket) -> bytes:
    """One answer from a connected UAPI socket: up to and including the
    blank line after its errno line, or what came before the server hung up.
    (Send the next request after reading the answer: a connection can carry
    many requests.)"""
    buf = b""
    while not (buf.endswith(b"\n\n") and (buf.startswith(b"errno=") or b"\nerrno=" in buf)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


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


def parse_get(text: str) -> dict[str, Any]:
    """A get=1 / get=vpncrypt answer as {interface fields..., "peers": [...],
    "counters": {...}}.  A peer's all-zero preshared_key is left out: it
    means none.  Raises OSError for errno != 0."""
    dev: dict[str, Any] = {"peers": [], "counters": {}, "info": {}}
    cur = dev
    for line in text.split("\n"):
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
        elif k.startswith("vpncrypt_info_"):
            dev["info"][k[len("vpncrypt_info_") :]] = v
        elif k.startswith("vpncrypt_"):
            dev["counters"][k[len("vpncrypt_") :]] = int(v)
        elif k == "preshared_key" and not v.strip("0"):
            continue  # all zeros is no key (wireguard-go sends it for none; wg shows none)
        else:
            cur[k] = v
    return dev


def get_device(
    interface: str, socket_dir: str = DEFAULT_SOCKET_DIR, *, extensions: bool = True
) -> tuple[dict[str, Any], bool]:
    """The device behind `interface` as parse_get() gives it, and whether it
    answered vpncrypt's extension.  A daemon that hangs up on ``get=vpncrypt``
    (wireguard-go, or any other implementation) is asked ``get=1``."""
    if extensions:
        try:
            return parse_get(interface_request(interface, "get=vpncrypt", socket_dir)), True
        except UAPIProtocolError:
            pass
        except OSError as e:
            if e.errno != errno.EINVAL:  # a UAPI server that refuses the operation
                raise
    return parse_get(interface_request(interface, "get=1", socket_dir)), False
