"""The TCP forwards of wireproxy's config.

[TCPClientTunnel]: a connection accepted on the host's BindAddress goes to
Target through the tunnel.  [TCPServerTunnel]: a connection a peer makes to
ListenPort on the tunnel address goes to Target on the host's network (made
by the helper left in the host's namespace: host_connector.py).  A target
that cannot be reached closes the accepted connection at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from vpncrypt.proxy.dialer import DialError, TunnelDialer, close_writer, splice
from vpncrypt.proxy.host_connector import HostConnector
from vpncrypt.proxy.settings import HostPort

log = logging.getLogger("vpncrypt.proxy")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


def client_tunnel(dialer: TunnelDialer, target: HostPort) -> Handler:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            remote = await dialer.connect(target.host, target.port)
        except DialError as e:
            log.info("[TCPClientTunnel] %s: %s", target, e)
            await close_writer(w)
            return
        await splice((r, w), remote)

    return handle


def server_tunnel(host: HostConnector, target: HostPort) -> Handler:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            remote = await host.connect(target.host, target.port)
        except OSError as e:
            log.info("[TCPServerTunnel] %s: %s", target, e.strerror or e)
            await close_writer(w)
            return
        await splice((r, w), remote)

    return handle
