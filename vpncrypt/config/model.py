"""The parsed configuration: what a `wg setconf` file (plus the wg-quick
extras Address/MTU/DNS) says."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..wire import DEFAULT_MTU
from .keytypes import PresharedKey, PrivateKey, PublicKey
from .ops import Endpoint

__all__ = ["DEFAULT_MTU", "Config", "ConfigError", "InterfaceConfig", "PeerConfig"]


class ConfigError(ValueError):
    """A configuration problem. The message names the file, the line and the
    key (``/etc/vpncrypt/wg0.conf:7: [Peer] AllowedIPs: ...``) and never
    contains key material."""

    def __init__(self, message: str, *, path: Optional[str] = None, line: Optional[int] = None):
        super().__init__(message)
        self.path = path
        self.line = line


@dataclass(frozen=True)
class PeerConfig:
    public_key: PublicKey
    preshared_key: Optional[PresharedKey] = None
    allowed_ips: tuple = ()  # IPv4Network/IPv6Network, host bits cleared
    endpoint: Optional[Endpoint] = None
    persistent_keepalive: int = 0  # seconds, 0 = off
    line: int = 0  # line of the [Peer] header (0 if built in code)
    lines: dict = field(default_factory=dict, compare=False, hash=False)  # key -> line

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)

    def __repr__(self) -> str:
        return (
            f"PeerConfig(public_key={self.public_key!r}, "
            f"preshared_key={'<set>' if self.preshared_key else None}, "
            f"allowed_ips={[str(n) for n in self.allowed_ips]}, "
            f"endpoint={str(self.endpoint) if self.endpoint else None}, "
            f"persistent_keepalive={self.persistent_keepalive})"
        )


@dataclass(frozen=True)
class InterfaceConfig:
    private_key: Optional[PrivateKey] = None
    listen_port: Optional[int] = None  # None: not given (random port)
    fwmark: int = 0  # 0 = off
    addresses: tuple = ()  # IPv4Interface/IPv6Interface (wg-quick Address)
    mtu: Optional[int] = None  # wg-quick MTU; None: default (1420)
    dns: tuple = ()  # wg-quick DNS: recorded but ignored
    table: object = None  # wg-quick Table: None (auto), "off", a number or name
    lines: dict = field(default_factory=dict, compare=False, hash=False)  # key -> line

    def line_of(self, key: str) -> int:
        return self.lines.get(key, 0)

    def __repr__(self) -> str:
        return (
            f"InterfaceConfig(private_key={'<set>' if self.private_key else None}, "
            f"listen_port={self.listen_port}, fwmark={self.fwmark}, "
            f"addresses={[str(a) for a in self.addresses]}, mtu={self.mtu}, table={self.table})"
        )


@dataclass(frozen=True)
class Config:
    interface: InterfaceConfig = field(default_factory=InterfaceConfig)
    peers: tuple = ()  # PeerConfig, in file order
    path: str = "<string>"
    warnings: tuple = ()  # notes for the caller (e.g. "DNS is ignored")

    @property
    def effective_mtu(self) -> int:
        return self.interface.mtu or DEFAULT_MTU

    def peer(self, public_key: bytes) -> Optional[PeerConfig]:
        for p in self.peers:
            if p.public_key == public_key:
                return p
        return None
