"""sd_notify(3), spoken directly: datagrams to $NOTIFY_SOCKET.

All functions are no-ops (returning False) when not run by systemd with
Type=notify, so the daemon can call them unconditionally.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Mapping, Optional


def _address(env: Mapping[str, str]) -> Optional[str]:
    addr = env.get("NOTIFY_SOCKET")
    if not addr:
        return None
    if addr.startswith("@"):
        return "\0" + addr[1:]  # abstract namespace
    if addr.startswith("/"):
        return addr
    return None  # vsock etc.: not supported


def notify(state: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Send ``state`` (newline-separated VAR=value lines). True if sent."""
    env = os.environ if env is None else env
    addr = _address(env)
    if addr is None:
        return False
    # Never blocks: a receiver that stops reading (its queue full) must not stall
    # the daemon's event loop, and with it the tunnel.  The message is dropped.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as s:
        try:
            s.connect(addr)
            s.send(state.encode("utf-8"))
        except OSError:  # EAGAIN (queue full), ECONNREFUSED, ENOENT, ...
            return False
    return True


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def ready(status: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> bool:
    msg = "READY=1"
    if status:
        msg += f"\nSTATUS={_clean(status)}"
    return notify(msg, env)


def status(text: str, env: Optional[Mapping[str, str]] = None) -> bool:
    return notify(f"STATUS={_clean(text)}", env)


def watchdog(env: Optional[Mapping[str, str]] = None) -> bool:
    return notify("WATCHDOG=1", env)


def stopping(status: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> bool:
    msg = "STOPPING=1"
    if status:
        msg += f"\nSTATUS={_clean(status)}"
    return notify(msg, env)


def reloading(env: Optional[Mapping[str, str]] = None) -> bool:
    """Tell systemd a reload started (send ready() when done). Includes
    MONOTONIC_USEC as Type=notify-reload (systemd >= 253) requires."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}", env)


def watchdog_interval(env: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """Seconds between WATCHDOG=1 pings (half of WatchdogSec=), or None if
    the watchdog is not enabled for this process."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    try:
        n = int(usec)
    except ValueError:
        return None
    if n <= 0:
        return None
    return n / 1e6 / 2
