"""Linux TUN device: create (TUNSETIFF, IFF_TUN | IFF_NO_PI), set the MTU,
bring it up, add addresses. The device is not persistent, so the kernel
deletes it when the file descriptor is closed (close() also deletes it
explicitly in case the fd was inherited elsewhere)."""
from __future__ import annotations

import errno
import fcntl
import ipaddress
import logging
import os
import re
import socket
import struct
import subprocess
from typing import Iterable, Optional

log = logging.getLogger("vpncrypt.tun")

TUN_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_UP = 0x1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCGIFMTU = 0x8921
SIOCSIFMTU = 0x8922
IFNAMSIZ = 16
DEFAULT_MTU = 1420

_NAME_RE = re.compile(r"^[A-Za-z0-9_=+.-]{1,15}$")


class TunError(OSError):
    pass


def validate_interface_name(name: str) -> str:
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid interface name {name!r}: 1-15 characters "
                         "of letters, digits and _=+.-")
    return name


def _ifreq(name: str, fmt: str = "", *values) -> bytes:
    data = struct.pack(f"{IFNAMSIZ}s" + fmt, name.encode(), *values)
    return data.ljust(40, b"\0")


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise TunError(errno.EIO, f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")


class TunDevice:
    """An open TUN interface. ``fileno()`` is non-blocking; use
    loop.add_reader() or read()/write() directly."""

    def __init__(self, name: str, fd: int):
        self.name = name
        self._fd = fd

    @classmethod
    def create(cls, name: str, *, mtu: int = DEFAULT_MTU, up: bool = True,
               addresses: Iterable = ()) -> "TunDevice":
        validate_interface_name(name)
        try:
            fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise TunError(e.errno, f"cannot open {TUN_PATH}: {e.strerror}") from None
        try:
            try:
                ifr = fcntl.ioctl(fd, TUNSETIFF, _ifreq(name, "H", IFF_TUN | IFF_NO_PI))
            except OSError as e:
                raise TunError(e.errno, f"cannot create TUN device {name}: {e.strerror}") from None
            actual = ifr[:IFNAMSIZ].split(b"\0", 1)[0].decode()
            dev = cls(actual, fd)
        except BaseException:
            os.close(fd)
            raise
        try:
            dev.set_mtu(mtu)
            if addresses:
                dev.add_addresses(addresses)
            if up:
                dev.set_up(True)
        except BaseException:
            dev.close()
            raise
        log.info("created TUN device %s (mtu %d)", actual, mtu)
        return dev

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("TUN device is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # -- packets
    def read(self, size: int = 65535) -> Optional[bytes]:
        """One IP packet, or None if none is waiting."""
        try:
            return os.read(self.fileno(), size)
        except BlockingIOError:
            return None

    def write(self, packet: bytes) -> int:
        return os.write(self.fileno(), packet)

    # -- interface settings (ioctls on a throwaway socket)
    def _sock_ioctl(self, request: int, arg: bytes) -> bytes:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            return fcntl.ioctl(s.fileno(), request, arg)

    def set_mtu(self, mtu: int) -> None:
        if not 68 <= mtu <= 65535:
            raise ValueError(f"MTU {mtu} out of range (68-65535)")
        try:
            self._sock_ioctl(SIOCSIFMTU, _ifreq(self.name, "i", mtu))
        except OSError as e:
            raise TunError(e.errno, f"cannot set MTU {mtu} on {self.name}: {e.strerror}") from None

    def get_mtu(self) -> int:
        res = self._sock_ioctl(SIOCGIFMTU, _ifreq(self.name, "i", 0))
        return struct.unpack_from("i", res, IFNAMSIZ)[0]

    def set_up(self, up: bool = True) -> None:
        res = self._sock_ioctl(SIOCGIFFLAGS, _ifreq(self.name, "h", 0))
        flags = struct.unpack_from("H", res, IFNAMSIZ)[0]
        flags = (flags | IFF_UP) if up else (flags & ~IFF_UP)
        try:
            self._sock_ioctl(SIOCSIFFLAGS, _ifreq(self.name, "H", flags))
        except OSError as e:
            raise TunError(e.errno, f"cannot bring {self.name} up: {e.strerror}") from None

    def add_addresses(self, addresses: Iterable) -> None:
        for a in addresses:
            iface = ipaddress.ip_interface(a)
            _ip(f"-{iface.version}", "address", "add", str(iface), "dev", self.name)

    def remove_addresses(self, addresses: Iterable) -> None:
        for a in addresses:
            iface = ipaddress.ip_interface(a)
            _ip(f"-{iface.version}", "address", "del", str(iface), "dev", self.name)

    def set_addresses(self, add: Iterable = (), remove: Iterable = ()) -> None:
        self.remove_addresses(remove)
        self.add_addresses(add)

    def add_routes(self, networks: Iterable) -> None:
        """Route ``networks`` (e.g. the peers' AllowedIPs) to this device."""
        for n in networks:
            net = ipaddress.ip_network(n, strict=False)
            _ip(f"-{net.version}", "route", "replace", str(net), "dev", self.name)

    def close(self) -> None:
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        # Explicit delete in case a child process inherited the fd; the
        # kernel removes the non-persistent device when the last fd closes.
        subprocess.run(["ip", "link", "delete", "dev", self.name],
                       capture_output=True)
        os.close(fd)
        log.info("removed TUN device %s", self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_fd", -1) >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass


def create_tun(name: str, *, mtu: int = DEFAULT_MTU, addresses: Iterable = (),
               up: bool = True) -> TunDevice:
    return TunDevice.create(name, mtu=mtu, addresses=addresses, up=up)
