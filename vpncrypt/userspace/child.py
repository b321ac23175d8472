"""The tunnel's process: `vpncrypt proxy`'s service with no front ends, whose
one client is the program that started it, over the channel (channel.py).

    python -m vpncrypt.userspace.child FD PARENT_PID SOURCE LOG_LEVEL NAME SOCKET_DIR

FD is the channel's end; SOURCE a config file's path, or "-" for a pickled
vpncrypt.config.model.Config on stdin (from the program itself).  The steps
are the proxy's (vpncrypt.proxy.service), in the order the kernel requires:
the config, the host-side helper and the outer UDP socket, the unshare,
then the event loop, where the channel's requests are served: each socket
is made in the tunnel's namespace and sent back.  The process ends when the
channel closes (the program closed the tunnel or exited) and at the
program's death (PR_SET_PDEATHSIG: SIGTERM, which stops the daemon as
`vpncrypt proxy` stops, its UAPI socket file removed).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import ipaddress
import logging
import os
import pickle
import signal
import socket
import sys
from collections.abc import Coroutine
from typing import Any

from vpncrypt.config import ConfigError
from vpncrypt.config.model import Config
from vpncrypt.config.parser import load_config
from vpncrypt.daemon.daemon import StartupError, describe, run_daemon
from vpncrypt.daemon.logsetup import setup_logging
from vpncrypt.proxy.dialer import CONNECT_TIMEOUT, DialError, TunnelDialer
from vpncrypt.proxy.namespace import NamespaceUnavailable, enter_namespace
from vpncrypt.proxy.service import Prepared, ProxyDaemon, link_plan, user_socket_dir
from vpncrypt.proxy.settings import ProxySettings, check_interface
from vpncrypt.userspace.channel import (
    MAX_ADDRESSES,
    ProtocolError,
    Request,
    Sender,
    decode,
    encode,
    errno_answer,
    parse_request,
    receive,
)

log = logging.getLogger("vpncrypt.userspace")

PR_SET_PDEATHSIG = 1
# Requests being served at once; more are answered EAGAIN (a program that
# asks without waiting must not grow this process without bound).
MAX_IN_FLIGHT = 1024


def _family(addr: str) -> int:
    return socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET


class TunnelDaemon(ProxyDaemon):
    """The proxy's daemon whose front end is the channel."""

    def __init__(self, name: str, prepared: Prepared, channel: socket.socket, *, socket_dir: str) -> None:
        super().__init__(name, prepared, socket_dir=socket_dir)
        self.channel = channel
        self.sender = Sender(channel)
        self.requests: set[asyncio.Task[None]] = set()
        self.dialer: TunnelDialer | None = None
        self.ready = False

    async def start(self) -> None:
        try:
            await super().start()
        except BaseException as e:
            try:
                await self.sender.send({"id": 0, "errno": errno.EIO, "error": describe(e)[:1000]})
            except OSError:
                pass  # the program is gone: the reason goes to stderr only (Daemon.run)
            raise
        await self.sender.send({"id": 0, "name": self.interface})
        self.ready = True

    async def _start_fronts(self) -> None:
        self.dialer = self.tunnel_dialer()
        asyncio.get_running_loop().add_reader(self.channel.fileno(), self._readable)

    def _readable(self) -> None:
        got = receive(self.channel)
        if got is None:
            return
        data, fds = got
        for fd in fds:  # the program sends none
            os.close(fd)
        if not data:
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
            self.stop(0, "the end of the program's channel")
            return
        try:
            message = decode(data)
        except ProtocolError as e:
            log.warning("a malformed message on the channel: %s", e)
            return
        try:
            request = parse_request(message)
        except ProtocolError as e:
            if message["id"] > 0:
                self._spawn(self._reply(errno_answer(message["id"], OSError(errno.EINVAL, str(e)))))
            return
        if len(self.requests) >= MAX_IN_FLIGHT:
            busy = OSError(errno.EAGAIN, f"{MAX_IN_FLIGHT} requests are waiting already")
            self._spawn(self._reply(errno_answer(request.id, busy)))
            return
        self._spawn(self._answer(request))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.requests.add(task)
        task.add_done_callback(self.requests.discard)

    async def _reply(self, message: dict[str, Any], sock: socket.socket | None = None) -> None:
        """One answer (and the socket's copy here closed); none if the
        program is gone (its end of the channel closed: this process stops)."""
        try:
            await self.sender.send(message, None if sock is None else sock.fileno())
        except OSError as e:
            log.debug("no answer to request %s: %s", message["id"], describe(e))
        finally:
            if sock is not None:
                sock.close()

    async def _answer(self, req: Request) -> None:
        try:
            if req.op == "resolve":
                await self._reply({"id": req.id, "addresses": await self._resolve(req.host)})
            else:
                await self._reply({"id": req.id}, await self._make(req))
        except DialError as e:
            gai = socket.EAI_AGAIN if e.timed_out else socket.EAI_NONAME
            await self._reply({"id": req.id, "gai": gai, "error": str(e)})
        except OSError as e:
            await self._reply(errno_answer(req.id, e))

    async def _resolve(self, host: str) -> list[str]:
        assert self.dialer is not None
        return [str(a) for a in (await self.dialer.resolve(host))[:MAX_ADDRESSES]]

    def _inside(self, host: str) -> None:
        addr = ipaddress.ip_address(host)
        if not self.routable(addr):
            raise OSError(
                errno.EHOSTUNREACH, f"{addr}: outside every peer's AllowedIPs (no peer to send it to)"
            )

    async def _make(self, req: Request) -> socket.socket:
        if req.op == "connect":
            return await self._connect(req.host, req.port)
        if req.op == "listen":
            return _listen(req.host, req.port, req.backlog)
        return self._udp(req)

    async def _connect(self, host: str, port: int) -> socket.socket:
        self._inside(host)
        sock = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            try:
                await asyncio.wait_for(
                    asyncio.get_running_loop().sock_connect(sock, (host, port)), CONNECT_TIMEOUT
                )
            except asyncio.TimeoutError:
                raise OSError(
                    errno.ETIMEDOUT, f"Connect call to {host} port {port}: no answer in 30 s"
                ) from None
            except OSError as e:
                raise OSError(e.errno, f"Connect call to {host} port {port} failed: {e.strerror}") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def _udp(self, req: Request) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if req.family == 6 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            if req.local is not None:
                sock.bind(req.local)
            if req.remote is not None:
                self._inside(req.remote[0])
                sock.connect(req.remote)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _undo(self) -> None:
        try:
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
        except (ValueError, OSError):
            pass
        for task in list(self.requests):
            task.cancel()
        if self.requests:
            await asyncio.gather(*self.requests, return_exceptions=True)
        await super()._undo()
        self.channel.close()


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket: on `host`, or (host "") on every address of the
    tunnel, IPv6 and IPv4 on one socket."""
    family = _family(host) if host else socket.AF_INET6
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if host else 0)
        sock.bind((host or "::", port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def load(source: str) -> Config:
    """The config: a file's (checked as `vpncrypt up` checks it), or the
    program's object (pickled on stdin)."""
    if source == "-":
        cfg = pickle.load(sys.stdin.buffer)
        if not isinstance(cfg, Config):
            raise ConfigError("the config object is not a vpncrypt.config.model.Config")
    else:
        cfg = load_config(source)
    if cfg.interface.private_key is None:
        raise ConfigError(f"{cfg.path}: [Interface] PrivateKey: missing", path=cfg.path)
    check_interface(cfg, cfg.path)
    return cfg


def _fail(channel: socket.socket, e: BaseException) -> int:
    """The reason the tunnel did not start, as the channel's first answer."""
    code = e.errno if isinstance(e, OSError) and e.errno else errno.EINVAL
    channel.send(encode({"id": 0, "errno": code, "error": " ".join(describe(e).split())[:1000]}))
    return 1


def _prepare(channel: socket.socket, argv: list[str]) -> TunnelDaemon:
    """Everything before the event loop (OSError, ConfigError, StartupError,
    NamespaceUnavailable)."""
    source, level, name, socket_dir = argv[3:7]
    setup_logging(level)
    cfg = load(source)
    prepared = Prepared(ProxySettings(wg=cfg, path=cfg.path))
    try:
        daemon = TunnelDaemon(
            name or f"py{os.getpid()}", prepared, channel, socket_dir=socket_dir or user_socket_dir()
        )
        daemon.resolve_endpoints()
        daemon.link = enter_namespace(link_plan(cfg))
    except BaseException:
        prepared.close()
        raise
    return daemon


def main(argv: list[str]) -> int:
    channel = socket.socket(fileno=int(argv[1]))
    channel.set_inheritable(False)  # (the `ip` run in the namespace must not hold it)
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(argv[2]):  # the program died before the prctl
        return 1
    try:
        daemon = _prepare(channel, argv)
    except (OSError, ConfigError, StartupError, NamespaceUnavailable) as e:
        return _fail(channel, e)
    channel.setblocking(False)
    return run_daemon(daemon)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
