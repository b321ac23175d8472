"""WireGuard inside a Python program, without root: an asyncio API.

    async with await vpncrypt.userspace.open_tunnel("wg.conf") as tun:
        reader, writer = await tun.open_connection("host.behind.peer", 80)

The tunnel runs in a child process (tunnel_handle.py says why), `vpncrypt proxy`'s
machinery without its front ends (child.py); the program's sockets are made
there, in the tunnel's namespace, and passed back over a UNIX socket pair
(channel.py: the requests and answers) to be wrapped by the program's loop.
"""

from vpncrypt.userspace.tunnel_handle import Tunnel, TunnelClosed, open_tunnel

__all__ = ["Tunnel", "TunnelClosed", "open_tunnel"]
