"""An in-memory Control for UAPI tests: records every call."""
from __future__ import annotations

import ipaddress

from vpncrypt.daemon.control import Control, InterfaceSnapshot, PeerSnapshot


class FakeControl(Control):
    def __init__(self):
        self.private_key = None
        self.listen_port = 0
        self.fwmark = 0
        self.peers: dict[bytes, PeerSnapshot] = {}
        self.calls: list[tuple] = []
        self.counters = {"drop_bad_mac": 3, "drop_no_route": 7}

    def snapshot(self) -> InterfaceSnapshot:
        return InterfaceSnapshot(private_key=self.private_key, listen_port=self.listen_port,
                                 fwmark=self.fwmark, peers=list(self.peers.values()),
                                 counters=dict(self.counters))

    def set_private_key(self, key):
        self.calls.append(("set_private_key", key))
        self.private_key = key

    def set_listen_port(self, port):
        self.calls.append(("set_listen_port", port))
        self.listen_port = port

    def set_fwmark(self, fwmark):
        self.calls.append(("set_fwmark", fwmark))
        self.fwmark = fwmark

    def replace_peers(self):
        self.calls.append(("replace_peers",))
        self.peers.clear()

    def has_peer(self, public_key):
        return bytes(public_key) in self.peers

    def remove_peer(self, public_key):
        self.calls.append(("remove_peer", bytes(public_key)))
        self.peers.pop(bytes(public_key), None)

    def upsert_peer(self, update):
        self.calls.append(("upsert_peer", update))
        pk = bytes(update.public_key)
        p = self.peers.get(pk)
        if p is None:
            p = self.peers[pk] = PeerSnapshot(public_key=pk, allowed_ips=[])
        if update.preshared_key is not None:
            p.preshared_key = None if not any(update.preshared_key) else bytes(update.preshared_key)
        if update.endpoint is not None:
            p.endpoint = update.endpoint
        if update.persistent_keepalive is not None:
            p.persistent_keepalive = update.persistent_keepalive
        allowed = [] if update.replace_allowed_ips else list(p.allowed_ips)
        for net in update.allowed_ips:
            net = ipaddress.ip_network(net)
            # an allowed IP moves from whichever peer had it
            for other in self.peers.values():
                if other is not p and net in other.allowed_ips:
                    other.allowed_ips = [n for n in other.allowed_ips if n != net]
            if net not in allowed:
                allowed.append(net)
        p.allowed_ips = allowed

    def set_mtu(self, mtu):
        self.calls.append(("set_mtu", mtu))

    def set_addresses(self, add, remove):
        self.calls.append(("set_addresses", tuple(add), tuple(remove)))

    def call_names(self):
        return [c[0] for c in self.calls]
