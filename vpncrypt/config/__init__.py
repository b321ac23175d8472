"""Configuration: the `wg setconf` file format (plus wg-quick's Address, MTU
and DNS), its model, and the reload diff."""

from .diff import extras_operations, syncconf_operations
from .keytypes import KeyFormatError, PresharedKey, PrivateKey, PublicKey
from .model import DEFAULT_MTU, Config, ConfigError, InterfaceConfig, PeerConfig
from .ops import (
    Endpoint,
    Operation,
    PeerUpdate,
    RemovePeer,
    ReplacePeers,
    SetAddresses,
    SetFwmark,
    SetListenPort,
    SetMTU,
    SetPrivateKey,
)
from .parser import load_config, parse_config, parse_endpoint

__all__ = [
    "Config",
    "ConfigError",
    "DEFAULT_MTU",
    "Endpoint",
    "InterfaceConfig",
    "KeyFormatError",
    "Operation",
    "PeerConfig",
    "PeerUpdate",
    "PresharedKey",
    "PrivateKey",
    "PublicKey",
    "RemovePeer",
    "ReplacePeers",
    "SetAddresses",
    "SetFwmark",
    "SetListenPort",
    "SetMTU",
    "SetPrivateKey",
    "extras_operations",
    "load_config",
    "parse_config",
    "parse_endpoint",
    "syncconf_operations",
]
