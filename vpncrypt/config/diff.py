"""What a SIGHUP reload applies: the file against the running device,
exactly as `wg syncconf` does it, plus the wg-quick extras (MTU, Address)
against the file last applied.

`wg syncconf IFACE FILE` (wireguard-tools, setconf.c) reads the running
configuration over the UAPI and sends the file as a `set`:

* a file without peers replaces every peer (replace_peers);
* otherwise every running peer the file does not name is removed, and every
  peer of the file is set: its AllowedIPs replace the running ones, its
  Endpoint, PresharedKey and PersistentKeepalive are set when the file has
  them; a PresharedKey or PersistentKeepalive that is running but missing
  from the file is cleared;
* PrivateKey, ListenPort and FwMark are set when the file has them.

Setting a peer to what it already has does not touch its sessions, so
unchanged peers keep their handshakes.  What `wg set` changed is put back to
what the file says (a removed peer comes back, a peer the file does not name
goes, a moved port moves back); what the file does not say stays as it is.
"""

from __future__ import annotations

from typing import Any

from . import ops as op
from .keytypes import PresharedKey, PublicKey, ZERO_KEY
from .model import Config, DEFAULT_MTU


def syncconf_operations(running: Any, new: Config) -> list[op.Operation]:
    """Operations that `wg syncconf` would send to turn `running` (an
    InterfaceSnapshot: what `get=1` reports) into what `new` says."""
    ops: list[op.Operation] = []
    ni = new.interface
    running_peers = {bytes(p.public_key): p for p in running.peers}
    file_keys = {bytes(p.public_key) for p in new.peers}
    if not new.peers:
        ops.append(op.ReplacePeers())
    else:
        for pk in running_peers:
            if pk not in file_keys:
                ops.append(op.RemovePeer(PublicKey(pk)))
    if ni.private_key is not None:
        ops.append(op.SetPrivateKey(None if ni.private_key.is_zero() else ni.private_key))
    if ni.listen_port is not None:
        ops.append(op.SetListenPort(ni.listen_port))
    if "FwMark" in ni.lines:
        ops.append(op.SetFwmark(ni.fwmark))
    for p in new.peers:
        r = running_peers.get(bytes(p.public_key))
        psk = p.preshared_key
        if psk is None and r is not None and r.preshared_key is not None and any(r.preshared_key):
            psk = PresharedKey(ZERO_KEY)
        keepalive = p.persistent_keepalive if "PersistentKeepalive" in p.lines else None
        if keepalive is None and r is not None and r.persistent_keepalive:
            keepalive = 0
        ops.append(
            op.PeerUpdate(
                public_key=p.public_key,
                preshared_key=psk,
                endpoint=p.endpoint,
                persistent_keepalive=keepalive,
                replace_allowed_ips=True,
                allowed_ips=tuple(p.allowed_ips),
            )
        )
    return ops


def extras_operations(old: Config, new: Config) -> list[op.Operation]:
    """The wg-quick extras that changed between the file last applied and
    `new`: MTU, and Address lines added or removed (addresses someone else
    put on the interface are never touched)."""
    ops: list[op.Operation] = []
    oi, ni = old.interface, new.interface
    if (oi.mtu or DEFAULT_MTU) != (ni.mtu or DEFAULT_MTU):
        ops.append(op.SetMTU(ni.mtu or DEFAULT_MTU))
    old_addr, new_addr = list(oi.addresses), list(ni.addresses)
    add = tuple(a for a in new_addr if a not in old_addr)
    remove = tuple(a for a in old_addr if a not in new_addr)
    if add or remove:
        ops.append(op.SetAddresses(add=add, remove=remove))
    return ops
