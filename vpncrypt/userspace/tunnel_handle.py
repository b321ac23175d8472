"""The program's side: a Tunnel, whose sockets are made in the tunnel's
process (child.py) and wrapped here by the program's own event loop.

A library cannot unshare its caller (the program may have threads, and its
other connections must stay on the host's network), so the tunnel (the
engine and the kernel's TCP/IP stack in a user+network namespace) runs in a
child process; each socket is made in that namespace and passed back over
the channel (channel.py), where asyncio's own create_connection(sock=...),
create_server(sock=...) and create_datagram_endpoint(sock=...) take it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from vpncrypt.config.model import Config
from vpncrypt.userspace.channel import decode, encode, error_of, receive

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]
ClientConnected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], "Awaitable[None] | None"]
CLOSE_WAIT = 10.0  # seconds for the tunnel's process to undo its start, then SIGKILL
STREAM_LIMIT = 1 << 16  # asyncio.streams' default buffer limit


class TunnelClosed(ConnectionError):
    """The tunnel is closed, or its process ended."""


class _Channel:
    """Requests to the tunnel's process, answers matched to them by id."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.loop = sock, loop
        self.waiting: dict[int, asyncio.Future[tuple[dict[str, Any], socket.socket | None]]] = {}
        self.next_id = 0
        self.ended: str | None = None
        self.waiting[0] = loop.create_future()  # the first answer: up, or why not
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        got = receive(self.sock)
        if got is None:
            return
        data, fds = got
        if not data:
            self.end("the tunnel's process ended")
            return
        sock = socket.socket(fileno=fds[0]) if fds else None
        try:
            message = decode(data)
        except ValueError:
            message = {"id": -1}
        fut = self.waiting.pop(message["id"], None)
        if fut is None or fut.done():
            if sock is not None:
                sock.close()
            return
        fut.set_result((message, sock))

    async def ask(self, request: dict[str, Any]) -> tuple[dict[str, Any], socket.socket | None]:
        """The answer to `request` (its error raised as asyncio raises it)."""
        if self.ended is not None:
            raise TunnelClosed(self.ended)
        self.next_id += 1
        rid = self.next_id
        fut = self.waiting[rid] = self.loop.create_future()
        try:
            try:
                await self.loop.sock_sendall(self.sock, encode({"id": rid, **request}))
            except (BrokenPipeError, ConnectionResetError):  # (its end of file not read yet)
                self.end("the tunnel's process ended")
                raise TunnelClosed("the tunnel's process ended") from None
            return answered(await fut)
        finally:
            self.waiting.pop(rid, None)

    def end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(TunnelClosed(why))
        self.waiting.clear()


def answered(got: tuple[dict[str, Any], socket.socket | None]) -> tuple[dict[str, Any], socket.socket | None]:
    message, sock = got
    error = error_of(message)
    if error is not None:
        if sock is not None:
            sock.close()
        raise error
    return message, sock


def _port(port: int | str | None, kind: int) -> int:
    if port is None or port == "":
        return 0
    if isinstance(port, int) or port.isdigit():
        return int(port)
    return socket.getservbyname(port, "udp" if kind == socket.SOCK_DGRAM else "tcp")


def _infos(addresses: list[str], port: int, family: int, type: int, proto: int) -> list[AddrInfo]:
    """getaddrinfo's tuples for the addresses found (IPv4 and IPv6 as they came)."""
    kinds = [(type, proto)] if type else [(socket.SOCK_STREAM, 6), (socket.SOCK_DGRAM, 17)]
    out: list[AddrInfo] = []
    for text in addresses:
        addr = ipaddress.ip_address(text)
        fam = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
        if family not in (socket.AF_UNSPEC, fam):
            continue
        sockaddr: tuple[Any, ...] = (text, port, 0, 0) if addr.version == 6 else (text, port)
        out += [(fam, t, p or (6 if t == socket.SOCK_STREAM else 17), "", sockaddr) for t, p in kinds]
    return out


def _one_error(errors: list[OSError]) -> OSError:
    """asyncio's rule: the one error, or all of them in one OSError."""
    if len(errors) == 1 or all(str(e) == str(errors[0]) for e in errors):
        return errors[0]
    return OSError("Multiple exceptions: {}".format(", ".join(str(e) for e in errors)))


Where = tuple[int, str, int]  # (family, address, port)


def _matching(local: list[Where], remote: list[Where], family: int) -> tuple[Where | None, Where | None]:
    """The first local and remote addresses of one family (asyncio's choice)."""
    if local and remote:
        for lo in local:
            for re in remote:
                if lo[0] == re[0]:
                    return lo, re
        raise ValueError("local_addr and remote_addr have no address family in common")
    if local or remote:
        return (local[0] if local else None), (remote[0] if remote else None)
    if family not in (socket.AF_INET, socket.AF_INET6):
        raise ValueError("unexpected address family")
    return None, None


class Tunnel:
    """An open tunnel: sockets through it, in asyncio's shapes.  Its methods
    are called on the loop it was opened on."""

    def __init__(self, process: "subprocess.Popen[bytes]", channel: _Channel, name: str) -> None:
        self.process = process
        self.channel = channel
        self.name = name  # the device's name: `wg show NAME` reads its UAPI socket

    @property
    def pid(self) -> int:
        """The tunnel's process (in its own user and network namespace)."""
        return self.process.pid

    async def getaddrinfo(
        self,
        host: str | None,
        port: int | str | None,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[AddrInfo]:
        """loop.getaddrinfo through the tunnel: A and AAAA from the config's DNS
        servers (an IP literal is its own; host None: the wildcard with
        AI_PASSIVE, else the loopback).  socket.gaierror if none."""
        number = _port(port, type)
        if host is None or host == "":
            passive = flags & socket.AI_PASSIVE
            found = ["0.0.0.0", "::"] if passive else ["127.0.0.1", "::1"]
        else:
            message, _ = await self.channel.ask({"op": "resolve", "host": host.rstrip(".") or host})
            found = [a for a in message.get("addresses", []) if isinstance(a, str)]
        infos = _infos(found, number, family, type, proto)
        if not infos:
            raise socket.gaierror(socket.EAI_ADDRFAMILY, f"{host}: no address of the family asked for")
        return infos

    async def _socket(self, request: dict[str, Any]) -> socket.socket:
        _message, sock = await self.channel.ask(request)
        if sock is None:
            raise OSError(f"no socket came with the answer to {request['op']}")
        return sock

    async def connect_socket(self, host: str, port: int | str) -> socket.socket:
        """A TCP socket connected through the tunnel, made in it (each address
        of `host` in turn, as asyncio tries them)."""
        errors: list[OSError] = []
        for _f, _t, _p, _c, addr in await self.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            try:
                return await self._socket({"op": "connect", "host": addr[0], "port": addr[1]})
            except OSError as e:
                errors.append(e)
        raise _one_error(errors)

    async def create_connection(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str,
        port: int | str,
        *,
        ssl: Any = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """loop.create_connection through the tunnel."""
        sock = await self.connect_socket(host, port)
        loop = asyncio.get_running_loop()
        name = (server_hostname or host) if ssl else None
        return await loop.create_connection(protocol_factory, sock=sock, ssl=ssl, server_hostname=name)

    async def open_connection(
        self,
        host: str,
        port: int | str,
        *,
        limit: int = STREAM_LIMIT,
        ssl: Any = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """asyncio.open_connection through the tunnel."""
        sock = await self.connect_socket(host, port)
        name = (server_hostname or host) if ssl else None
        return await asyncio.open_connection(sock=sock, limit=limit, ssl=ssl, server_hostname=name)

    async def start_server(
        self,
        client_connected_cb: ClientConnected,
        host: str | None = None,
        port: int | str | None = None,
        *,
        limit: int = STREAM_LIMIT,
        backlog: int = 100,
        ssl: Any = None,
        start_serving: bool = True,
    ) -> asyncio.Server:
        """asyncio.start_server listening INSIDE the tunnel (a peer connects to
        it): on `host` (an address of the tunnel's, or a name for one: its
        first address) or, host None, on every tunnel address, IPv6 and IPv4."""
        number = _port(port, socket.SOCK_STREAM)
        address = ""
        if host:
            infos = await self.getaddrinfo(host, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            address = infos[0][4][0]
        request = {"op": "listen", "host": address, "port": number, "backlog": max(1, min(backlog, 65535))}
        sock = await self._socket(request)
        return await asyncio.start_server(
            client_connected_cb, sock=sock, limit=limit, backlog=backlog, ssl=ssl, start_serving=start_serving
        )

    async def _pick(
        self, addr: tuple[Any, ...] | None, family: int, flags: int
    ) -> list[tuple[int, str, int]]:
        if addr is None:
            return []
        infos = await self.getaddrinfo(addr[0], addr[1], family=family, type=socket.SOCK_DGRAM, flags=flags)
        return [(f, a[0], a[1]) for f, _t, _p, _c, a in infos]

    async def create_datagram_endpoint(
        self,
        protocol_factory: Callable[[], asyncio.DatagramProtocol],
        local_addr: tuple[Any, ...] | None = None,
        remote_addr: tuple[Any, ...] | None = None,
        *,
        family: int = 0,
    ) -> tuple[asyncio.DatagramTransport, asyncio.DatagramProtocol]:
        """loop.create_datagram_endpoint with the socket in the tunnel:
        remote_addr connects it (names resolved through the tunnel),
        local_addr binds it (an address of the tunnel's, port 0 for any)."""
        local = await self._pick(local_addr, family, socket.AI_PASSIVE)
        remote = await self._pick(remote_addr, family, 0)
        lo, re = _matching(local, remote, family)
        sock = await self._socket(
            {
                "op": "udp",
                "family": 6 if (lo or re or (family,))[0] == socket.AF_INET6 else 4,
                "local": list(lo[1:]) if lo else None,
                "remote": list(re[1:]) if re else None,
            }
        )
        loop = asyncio.get_running_loop()
        return await loop.create_datagram_endpoint(protocol_factory, sock=sock)

    async def aclose(self) -> None:
        """End the tunnel: the channel closed, the process waited for (its
        namespace and the files it made go with it)."""
        self.channel.end("the tunnel is closed")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.process.wait, CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            await loop.run_in_executor(None, self.process.wait)

    async def __aenter__(self) -> "Tunnel":
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _child_environment() -> dict[str, str]:
    """The program's environment, where the tunnel's process imports the
    vpncrypt the program imported (from a checkout too) and nothing from its
    current directory (PYTHONSAFEPATH, Python 3.11)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else ""), "PYTHONSAFEPATH": "1"}


async def open_tunnel(
    config: str | os.PathLike[str] | Config,
    *,
    name: str | None = None,
    socket_dir: str | None = None,
    log_level: str = "warning",
) -> Tunnel:
    """Bring a tunnel up from a wg-quick config file (its [Interface] and
    [Peer] sections) or a parsed vpncrypt.config.model.Config.  The tunnel's
    UAPI socket is SOCKET_DIR/NAME.sock (default: $XDG_RUNTIME_DIR/vpncrypt,
    NAME "py" and the tunnel process's id).  OSError if it cannot start
    (a config error's text names the file, line and key)."""
    loop = asyncio.get_running_loop()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    source = "-" if isinstance(config, Config) else os.fspath(config)
    argv = [str(theirs.fileno()), str(os.getpid()), source, log_level, name or "", socket_dir or ""]
    try:
        # (subprocess's, not asyncio's: asyncio kills a child whose transport
        # is collected, and an exit without close() must let the tunnel's
        # process undo its start, on the channel's end of file)
        process = subprocess.Popen(
            [sys.executable, "-m", "vpncrypt.userspace.child", *argv],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.PIPE if isinstance(config, Config) else subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C is the program's to handle, not the tunnel's
            env=_child_environment(),
        )
    finally:
        theirs.close()
    mine.setblocking(False)
    channel = _Channel(mine, loop)
    tunnel = Tunnel(process, channel, name or "")
    try:
        if isinstance(config, Config):
            assert process.stdin is not None
            with process.stdin:
                process.stdin.write(pickle.dumps(config))
        first, _sock = answered(await channel.waiting[0])
    except BaseException:
        await tunnel.aclose()
        raise
    tunnel.name = str(first.get("name", ""))
    return tunnel
