"""The difference between two configs as operations, for a SIGHUP reload in
the manner of `wg syncconf`: peers that did not change are not touched, so
their sessions survive."""
from __future__ import annotations

from .keys import PresharedKey, ZERO_KEY
from .model import Config, DEFAULT_MTU
from .ops import (Operation, PeerUpdate, RemovePeer, SetAddresses, SetFwmark,
                  SetListenPort, SetMTU, SetPrivateKey)


def _same_endpoint(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a.host, a.port) == (b.host, b.port)


def diff_configs(old: Config, new: Config) -> list[Operation]:
    """Operations that turn a device configured from ``old`` into one
    configured from ``new``.

    Order: removed peers, interface settings, added peers (full), changed
    peers (``update_only=True`` and only the changed fields; a change to
    AllowedIPs sends the full new list with ``replace_allowed_ips``), then
    MTU and Address changes for the TUN device.

    A ListenPort missing from ``new`` leaves the port as it is; an Endpoint
    missing from ``new`` leaves the (possibly roamed) endpoint as it is.
    """
    ops: list[Operation] = []
    new_keys = {p.public_key for p in new.peers}
    for p in old.peers:
        if p.public_key not in new_keys:
            ops.append(RemovePeer(p.public_key))

    oi, ni = old.interface, new.interface
    if oi.private_key != ni.private_key:
        ops.append(SetPrivateKey(ni.private_key))
    if ni.listen_port is not None and ni.listen_port != oi.listen_port:
        ops.append(SetListenPort(ni.listen_port))
    if ni.fwmark != oi.fwmark:
        ops.append(SetFwmark(ni.fwmark))

    for p in new.peers:
        o = old.peer(p.public_key)
        if o is None:
            ops.append(PeerUpdate(
                public_key=p.public_key, preshared_key=p.preshared_key,
                endpoint=p.endpoint, persistent_keepalive=p.persistent_keepalive,
                replace_allowed_ips=True, allowed_ips=tuple(p.allowed_ips)))
            continue
        changes: dict = {}
        if o.preshared_key != p.preshared_key:
            changes["preshared_key"] = (p.preshared_key if p.preshared_key is not None
                                        else PresharedKey(ZERO_KEY))
        if p.endpoint is not None and not _same_endpoint(o.endpoint, p.endpoint):
            changes["endpoint"] = p.endpoint
        if o.persistent_keepalive != p.persistent_keepalive:
            changes["persistent_keepalive"] = p.persistent_keepalive
        if set(o.allowed_ips) != set(p.allowed_ips):
            changes["replace_allowed_ips"] = True
            changes["allowed_ips"] = tuple(p.allowed_ips)
        if changes:
            ops.append(PeerUpdate(public_key=p.public_key, update_only=True, **changes))

    if (oi.mtu or DEFAULT_MTU) != (ni.mtu or DEFAULT_MTU):
        ops.append(SetMTU(ni.mtu or DEFAULT_MTU))
    old_addr, new_addr = list(oi.addresses), list(ni.addresses)
    add = tuple(a for a in new_addr if a not in old_addr)
    remove = tuple(a for a in old_addr if a not in new_addr)
    if add or remove:
        ops.append(SetAddresses(add=add, remove=remove))
    return ops
