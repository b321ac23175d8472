"""`vpncrypt proxy -c FILE`: the steps, in the order the kernel requires.

Before the unshare (one thread, in the host's namespace): the config read, the
host-side helper forked (for [TCPServerTunnel]), the outer UDP socket and the
front ends' listening sockets made, the peers' Endpoint names resolved.  Then
the unshare and the namespace's link (namespace.py).  Then the event loop:
the daemon (vpncrypt.daemon.daemon.Daemon: the same Device, engine, UAPI
server and timers as `vpncrypt up`) on the packet link, and the front ends.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import stat
from collections.abc import Callable, Coroutine
from typing import Any

from vpncrypt.config.model import Config
from vpncrypt.config import ConfigError, syncconf_operations
from vpncrypt.daemon.control import ControlError
from vpncrypt.daemon.daemon import Daemon, StartupError, describe
from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.daemon.data_plane import BATCH, MAX_PACKET
from vpncrypt.daemon.udpsocket import open_udp_sockets
from vpncrypt.daemon.uapi import apply_operations, socket_path, start_uapi_server
from vpncrypt.proxy.dialer import IPAddress, TunnelDialer, as_address
from vpncrypt.proxy.forwards import client_tunnel, server_tunnel
from vpncrypt.proxy.host_connector import HostConnector
from vpncrypt.proxy.http_proxy import MAX_HEAD, HttpFront
from vpncrypt.proxy.namespace import LinkPlan
from vpncrypt.proxy.packet_link import PacketLink
from vpncrypt.proxy.settings import Front, HostPort, ProxySettings
from vpncrypt.proxy.socks5 import Socks5Front
from vpncrypt.wire import DEFAULT_MTU

log = logging.getLogger("vpncrypt.proxy")

STACK_NAME = "kernel TCP/IP stack in a user+network namespace (veth + AF_PACKET, no TUN)"


def user_socket_dir() -> str:
    """$XDG_RUNTIME_DIR/vpncrypt, else /tmp/vpncrypt-UID (made 0700, and
    refused if it is not the user's own directory)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = os.path.join(base, "vpncrypt") if base else f"/tmp/vpncrypt-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise StartupError(f"{path}: not a directory of this user's with mode 0700")
    return path


class LinkDevice:
    """What the Daemon asks of its interface, for the namespace's link: it is
    the process's own, so it is never deleted or moved, and its MTU is fixed."""

    def __init__(self, name: str, link: PacketLink, mtu: int) -> None:
        self.name, self.link, self.mtu = name, link, mtu

    def gone(self) -> bool:
        return False

    def in_home_namespace(self) -> bool:
        return True

    def get_mtu(self) -> int:
        return self.mtu

    def close(self) -> None:
        self.link.sock.close()


def _listen(bind: HostPort) -> socket.socket:
    """A listening TCP socket on the host (an empty host: every address,
    IPv6 and IPv4 where the host has both)."""
    if not bind.host and socket.has_dualstack_ipv6():
        return socket.create_server(("", bind.port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
    infos = socket.getaddrinfo(bind.host or "0.0.0.0", bind.port, type=socket.SOCK_STREAM)
    family, _t, _p, _c, addr = infos[0]
    return socket.create_server(addr[:2], family=family, backlog=128)


class Prepared:
    """What is made before the unshare."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        # first: it inherits none of the sockets below; always, since a
        # listen-port change over the UAPI needs a socket in the host's namespace
        self.host = HostConnector.fork()
        self.listeners: list[tuple[Front, socket.socket]] = []
        self.udp: list[socket.socket] = []
        try:
            self.udp = open_udp_sockets(settings.wg.interface.listen_port or 0)
        except OSError:
            self.close()
            raise
        for front in settings.fronts:
            if front.bind is None:
                continue
            try:
                self.listeners.append((front, _listen(front.bind)))
            except OSError as e:
                self.close()
                raise StartupError(
                    f"{settings.path}:{front.line}: [{front.kind}] BindAddress: cannot listen on "
                    f"{front.bind}: {e.strerror or e}"
                ) from None

    def close(self) -> None:
        for _f, s in self.listeners:
            s.close()
        for s in self.udp:
            s.close()
        self.host.close()


def link_plan(cfg: Config) -> LinkPlan:
    iface = cfg.interface
    routes = [net for p in cfg.peers for net in p.allowed_ips]
    return LinkPlan(
        mtu=iface.mtu or DEFAULT_MTU,
        addresses=tuple(iface.addresses),
        routes=routes,
        batch=BATCH,
        max_packet=MAX_PACKET,
    )


class ProxyControl(DeviceControl):
    """The UAPI's control, with a new listen port checked where the socket
    will be (the host's namespace), not in the tunnel's: by making that
    socket, which rebind() then takes (the helper closes its copy in a
    thread of its own, so a second socket on the port could race it)."""

    def _check_port(self, port: int) -> None:
        if not port or port == self.d.listen_port:
            return
        try:
            self.d.reserve_outer(port)
        except OSError as e:
            raise ControlError(e.errno or errno.EADDRINUSE, e.strerror or str(e)) from None


class ProxyDaemon(Daemon):
    """The daemon on a namespace's packet link, with the proxy's front ends."""

    def __init__(self, name: str, prepared: Prepared, *, socket_dir: str) -> None:
        super().__init__(name, prepared.settings.path, socket_dir=socket_dir)
        self.prepared = prepared
        self.settings = prepared.settings
        self.link: PacketLink | None = None
        self.found: dict[str, Any] = {}  # Endpoint host -> its address, or the OSError
        self.servers: list[asyncio.AbstractServer] = []
        self.connections: set[asyncio.Task[None]] = set()
        self.v6 = prepared.udp[0].family == socket.AF_INET6
        self.reserved: tuple[int, socket.socket] | None = None  # ProxyControl's, for rebind()
        self.control = ProxyControl(self)

    def resolve_endpoints(self) -> None:
        """The peers' Endpoint names, looked up in the host's namespace (so
        before the unshare, blocking: no thread may exist yet).  Once: the
        namespace has no route to the host's resolver, so a name that does
        not resolve now is a ConfigError naming its line (`vpncrypt up`
        would keep trying)."""
        cfg = self.settings.wg
        self.found = self._look_up(self._names_of(cfg), {})
        for p in cfg.peers:
            got = self.found.get(p.endpoint.host) if p.endpoint is not None else None
            if isinstance(got, OSError):
                line = p.line_of("Endpoint")
                raise ConfigError(
                    f"{cfg.path}:{line}: [Peer] Endpoint: {describe(got)}", path=cfg.path, line=line
                )

    def reserve_outer(self, port: int) -> None:
        """The socket for a new listen port, made now (ProxyControl's check)."""
        self._drop_reserved()
        self.reserved = (port, self.prepared.host.outer_udp(port))

    def _drop_reserved(self) -> None:
        if self.reserved is not None:
            self.reserved[1].close()
            self.reserved = None

    def _outer_sockets(self, port: int, count: int) -> list[socket.socket]:
        """rebind()'s new socket (one: the proxy has one queue), made by the
        helper in the host's namespace: one made here would be in the
        tunnel's namespace, with no way to the peers."""
        if self.reserved is not None and self.reserved[0] == port:
            sock, self.reserved = self.reserved[1], None
            return [sock]
        self._drop_reserved()
        return [self.prepared.host.outer_udp(port)]

    def routable(self, addr: IPAddress) -> bool:
        return any(addr in net for net in self._dp.allowed_ips() if net.version == addr.version)

    async def start(self) -> None:
        assert self.link is not None, "enter the namespace first"
        self.loop = asyncio.get_running_loop()
        self._catch_signals_early()
        cfg = self.settings.wg
        self._make_dataplane(cfg)
        self._use_sockets(self.prepared.udp)
        self._not_served_already()
        self.mtu = cfg.interface.mtu or DEFAULT_MTU
        self.tun = LinkDevice(self.interface, self.link, self.mtu)  # type: ignore[assignment]
        self.config = self._with_addresses(cfg, self.found)
        apply_operations(syncconf_operations(self.control.snapshot(), self.config), self.control)
        self._dp.start_inner(self.udps, [self.link], loop=self.loop, mtu=self.mtu, on_fatal=self._on_fatal)
        self._checkpoint()
        self.uapi = await start_uapi_server(
            socket_path(self.interface, self.socket_dir),
            self.control,
            extensions_in_get=False,
            # in the user namespace the user is uid 0 and every other uid
            # (root's too) the overflow uid: only the user gets in
            allowed_uids=(0,),
        )
        log.info("UAPI socket %s", socket_path(self.interface, self.socket_dir))
        await self._start_fronts()
        self._checkpoint()
        self._running()

    def _serve(
        self, handler: Callable[..., Coroutine[Any, Any, None]]
    ) -> Callable[..., Coroutine[Any, Any, None]]:
        """The handler, with its task kept (so close() ends the connections)."""

        async def run(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.connections.add(task)
            try:
                await handler(r, w)
            finally:
                self.connections.discard(task)

        return run

    def tunnel_dialer(self) -> TunnelDialer:
        """A dialer through the tunnel, with the config's DNS servers (wg-quick's
        DNS: addresses are servers, other entries search domains, not used here)."""
        dns = [a for a in map(as_address, self.settings.wg.interface.dns) if a is not None]
        return TunnelDialer(dns, self.routable)

    async def _start_fronts(self) -> None:
        dialer = self.tunnel_dialer()
        for front, sock in self.prepared.listeners:
            limit = MAX_HEAD if front.kind == "http" else 1 << 16
            handler = self._front_handler(front, dialer)
            self.servers.append(await asyncio.start_server(self._serve(handler), sock=sock, limit=limit))
            log.info("[%s] on %s", front.kind, front.bind)
        for front in self.settings.fronts:
            if front.kind == "TCPServerTunnel":
                assert front.target is not None
                handler = server_tunnel(self.prepared.host, front.target)
                self.servers.append(
                    await asyncio.start_server(self._serve(handler), host=None, port=front.listen_port)
                )
                log.info(
                    "[TCPServerTunnel] on port %d inside the tunnel, to %s", front.listen_port, front.target
                )

    def _front_handler(self, front: Front, dialer: TunnelDialer) -> Callable[..., Coroutine[Any, Any, None]]:
        if front.kind == "Socks5":
            return Socks5Front(dialer, front.username, front.password, self.prepared.host).handle
        if front.kind == "http":
            return HttpFront(dialer, front.username, front.password).handle
        assert front.target is not None
        return client_tunnel(dialer, front.target)

    def reload(self) -> None:
        log.warning(
            "SIGHUP: vpncrypt proxy does not reload its config yet (peers change over its UAPI socket)"
        )

    async def _undo(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)
        self.servers = []
        self._drop_reserved()
        await super()._undo()
        self.prepared.close()
