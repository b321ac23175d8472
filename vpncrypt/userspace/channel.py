"""The channel between a program and its tunnel's process: one UNIX
SOCK_SEQPACKET pair, one JSON object per message (so a message is never
split or merged), at most MAX_MESSAGE bytes.

The program asks (each request has an id > 0, answered once, in any order):

    {"id": N, "op": "resolve", "host": NAME}            A and AAAA through the tunnel
    {"id": N, "op": "connect", "host": IP, "port": P}   a connected TCP socket
    {"id": N, "op": "listen", "host": IP or "", "port": P, "backlog": B}
    {"id": N, "op": "udp", "family": 4 or 6, "local": [IP, P] or null, "remote": [IP, P] or null}

and the tunnel's process answers

    {"id": N}                         with the socket (SCM_RIGHTS), made in the tunnel's namespace
    {"id": N, "addresses": [IP, ...]} for resolve
    {"id": N, "errno": E, "error": TEXT}       an OSError (E an errno)
    {"id": N, "gai": E, "error": TEXT}         a socket.gaierror (E an EAI_ code)

and once, first, {"id": 0, "name": NAME} when the tunnel is up (or id 0 with
"errno" and "error" when it could not start).  A closed channel ends the
tunnel; an ended tunnel closes it.
"""

from __future__ import annotations

import array
import asyncio
import errno
import ipaddress
import json
import os
import socket
from dataclasses import dataclass
from typing import Any

# A name is at most 253 characters (RFC 1035, 2.3.4), an answer at most
# MAX_ADDRESSES addresses of at most 39 characters: 4 KiB holds any message.
MAX_MESSAGE = 4096
MAX_ADDRESSES = 32
OPS = ("resolve", "connect", "listen", "udp")


class ProtocolError(ValueError):
    """A message that does not follow the protocol (the words say how)."""


@dataclass(frozen=True)
class Request:
    id: int
    op: str
    host: str = ""
    port: int = 0
    backlog: int = 100
    family: int = 4
    local: tuple[str, int] | None = None
    remote: tuple[str, int] | None = None


def encode(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise OSError(errno.EMSGSIZE, f"a message of {len(data)} bytes (at most {MAX_MESSAGE})")
    return data


def decode(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"a message of over {MAX_MESSAGE} bytes")
    try:
        message = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("not a JSON message") from None
    if not isinstance(message, dict) or not _is_int(message.get("id")):
        raise ProtocolError("not an object with an integer id")
    return message


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _port(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 65535:
        raise ProtocolError("a port is an integer from 0 to 65535")
    return v


def _literal(v: object, *, empty: bool = False) -> str:
    if isinstance(v, str) and (empty and v == ""):
        return v
    try:
        return str(ipaddress.ip_address(v if isinstance(v, str) else ""))
    except ValueError:
        raise ProtocolError("an IP address expected") from None


def _pair(v: object) -> tuple[str, int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 2:
        raise ProtocolError("an address is [IP, PORT]")
    return _literal(v[0]), _port(v[1])


def parse_request(message: dict[str, Any]) -> Request:
    """A request's fields, checked (ProtocolError: which is wrong)."""
    rid, op = message["id"], message.get("op")
    if rid <= 0 or op not in OPS:
        raise ProtocolError(f"unknown request {str(op)[:20]!r}")
    if op == "resolve":
        host = message.get("host")
        if not isinstance(host, str) or not 0 < len(host) <= 253:
            raise ProtocolError("a name of 1 to 253 characters")
        return Request(rid, op, host=host)
    if op == "udp":
        family = message.get("family")
        if family not in (4, 6):
            raise ProtocolError("family 4 or 6")
        return Request(
            rid, op, family=family, local=_pair(message.get("local")), remote=_pair(message.get("remote"))
        )
    backlog = message.get("backlog", 100)
    if not _is_int(backlog) or not 1 <= backlog <= 65535:
        raise ProtocolError("a backlog from 1 to 65535")
    host = _literal(message.get("host"), empty=op == "listen")
    return Request(rid, op, host=host, port=_port(message.get("port")), backlog=backlog)


def error_of(message: dict[str, Any]) -> OSError | None:
    """The answer's error as the exception asyncio would raise, if it is one."""
    text = str(message.get("error", ""))[:1000]
    if _is_int(message.get("gai")):
        return socket.gaierror(message["gai"], text)
    if _is_int(message.get("errno")):
        code = message["errno"] or errno.EIO
        return OSError(code, text or os.strerror(code))
    return None


def errno_answer(rid: int, e: OSError) -> dict[str, Any]:
    code = e.errno or errno.EIO
    return {"id": rid, "errno": code, "error": e.strerror or str(e) or os.strerror(code)}


class Sender:
    """Messages onto a non-blocking channel from any task of one loop: one at
    a time (a full socket buffer makes the next wait for room, in order)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = asyncio.Lock()

    async def send(self, message: dict[str, Any], fd: int | None = None) -> None:
        data = encode(message)
        fds = [] if fd is None else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
        loop = asyncio.get_running_loop()
        async with self.lock:
            while True:
                try:
                    self.sock.sendmsg([data], fds)
                    return
                except BlockingIOError:
                    room: asyncio.Future[None] = loop.create_future()
                    loop.add_writer(self.sock.fileno(), room.set_result, None)
                    try:
                        await room
                    finally:
                        loop.remove_writer(self.sock.fileno())


def receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One message and the descriptors that came with it; None if none is
    waiting; (b"", []) at the end.  A message cut short (over MAX_MESSAGE)
    comes back longer than MAX_MESSAGE, so decode() refuses it."""
    try:
        data, fds, flags, _addr = socket.recv_fds(sock, MAX_MESSAGE + 1, 1)
    except BlockingIOError:
        return None
    except OSError:
        return b"", []
    if flags & socket.MSG_CTRUNC:  # more descriptors than asked for: the ones that came are closed
        for fd in fds:
            os.close(fd)
        return b"{}", []
    return data, list(fds)
