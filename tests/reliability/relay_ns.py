"""tests/reliability/relay.py's relay process, run inside a test namespace
(`ip netns exec NS python3 -m tests.reliability.relay_ns '{"PORT": ["HOST", PORT2]}'`):
its two sockets listen on every address of the namespace instead of
127.0.0.1 only, and a datagram the relay would send to 127.0.0.1:PORT goes to
HOST:PORT2 instead when PORT is in the map.  So one end of the relay can be a
daemon in another namespace (reached over the veth), the other a daemon in
the relay's own namespace.  Everything else is relay.py unchanged."""

import json
import socket as _socket
import sys

from tests.reliability import relay

MAP = {int(k): (v[0], int(v[1])) for k, v in json.loads(sys.argv[1]).items()}


class _Socket(_socket.socket):
    def bind(self, addr):
        if addr[0] == "127.0.0.1":
            addr = ("0.0.0.0", addr[1])
        return super().bind(addr)

    def sendto(self, data, *args):
        addr = args[-1]
        if addr[0] == "127.0.0.1" and addr[1] in MAP:
            args = args[:-1] + (MAP[addr[1]],)
        return super().sendto(data, *args)


class _SocketModule:
    def __getattr__(self, name):
        return getattr(_socket, name)

    socket = _Socket


if __name__ == "__main__":
    relay.socket = _SocketModule()
    relay._relay_main()
