"""Where a UAPI socket is: /var/run/wireguard/IFACE.sock, as `wg` and
wireguard-go look for it.  A module of its own so that the client side
(`vpncrypt show`, daemon.uapiclient) finds it without importing the server
(daemon.uapi pulls in config and the protocol: 0.3 s of every show)."""

from __future__ import annotations

import os

DEFAULT_SOCKET_DIR = "/var/run/wireguard"


def socket_path(interface: str, directory: str = DEFAULT_SOCKET_DIR) -> str:
    return os.path.join(directory, f"{interface}.sock")
