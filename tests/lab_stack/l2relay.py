"""Bridge two interfaces through user space with AF_PACKET sockets, for the kernel-stack lab.

Stands in for the engine in the user-namespace design: the kernel's own TCP/IP stack
(in a network namespace the unprivileged user owns) hands frames to user space through a
veth's AF_PACKET socket, with no /dev/net/tun. One frame is one recv and one send here,
so the figure is a lower bound on that path. This kernel has no netem, so delay and loss
come from timed_relay.py's timed queue.

    python l2relay.py IFACE_A IFACE_B SECONDS [DELAY_MS LOSS]
"""

from __future__ import annotations

import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timed_relay import relay  # noqa: E402

ETH_P_ALL = 0x0003


def open_if(name: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((name, 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return s


def main() -> None:
    a, b = open_if(sys.argv[1]), open_if(sys.argv[2])
    delay_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    loss = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    # our own sends come back on the socket as PACKET_OUTGOING: skip them
    n = relay(
        a, b, delay_ms, loss, keep=lambda addr: addr[2] != socket.PACKET_OUTGOING, seconds=float(sys.argv[3])
    )
    print(f"l2relay: {n} frames", flush=True)


if __name__ == "__main__":
    main()
