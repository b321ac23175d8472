"""Configuration operations shared by the UAPI ``set=1`` parser and the
SIGHUP reload diff (vpncrypt.config.diff_configs).

Both produce a list of these, applied in order by
vpncrypt.daemon.uapi.apply_operations() through a Control object.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Union

from ..endpoints import Endpoint  # noqa: F401  (re-exported: operations carry it)
from .keytypes import PresharedKey, PrivateKey, PublicKey

IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
IPInterface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]


@dataclass(frozen=True)
class SetPrivateKey:
    key: Optional[PrivateKey]  # None: remove the private key


@dataclass(frozen=True)
class SetListenPort:
    port: int  # 0: pick a random port


@dataclass(frozen=True)
class SetFwmark:
    fwmark: int  # 0: no fwmark


@dataclass(frozen=True)
class ReplacePeers:
    """Remove every peer (what follows in the same request adds new ones)."""


@dataclass(frozen=True)
class RemovePeer:
    public_key: PublicKey


@dataclass(frozen=True)
class PeerUpdate:
    """Create or update one peer. ``None`` fields are left unchanged.

    preshared_key: an all-zero key removes the PSK (as in WireGuard).
    persistent_keepalive: seconds, 0 = off.
    replace_allowed_ips: drop the current allowed IPs before adding
    ``allowed_ips``; otherwise ``allowed_ips`` are added to the current ones.
    update_only: do nothing if the peer does not exist yet.
    """

    public_key: PublicKey
    preshared_key: Optional[PresharedKey] = None
    endpoint: Optional[Endpoint] = None
    persistent_keepalive: Optional[int] = None
    replace_allowed_ips: bool = False
    allowed_ips: tuple = ()
    update_only: bool = False


# Only produced by diff_configs (wg-quick extras, not part of the UAPI):
@dataclass(frozen=True)
class SetMTU:
    mtu: int


@dataclass(frozen=True)
class SetAddresses:
    add: tuple = ()  # IPInterface values to add to the TUN device
    remove: tuple = ()  # IPInterface values to remove


Operation = Union[
    SetPrivateKey, SetListenPort, SetFwmark, ReplacePeers, RemovePeer, PeerUpdate, SetMTU, SetAddresses
]
