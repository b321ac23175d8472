"""An in-memory Control for UAPI tests (records every call), a stand-in for
the daemon over a real Device, and a UAPI server for a test's duration."""

from __future__ import annotations

import contextlib
import ipaddress

from vpncrypt.daemon.control import Control, InterfaceSnapshot, PeerSnapshot
from vpncrypt.daemon.counter_snapshot import CounterSnapshot


class FakeControl(Control):
    def __init__(self):
        self.private_key = None
        self.listen_port = 0
        self.fwmark = 0
        self.peers: dict[bytes, PeerSnapshot] = {}
        self.calls: list[tuple] = []
        self.counters = {"drop_bad_mac": 3, "drop_no_route": 7}

    def snapshot(self) -> InterfaceSnapshot:
        return InterfaceSnapshot(
            private_key=self.private_key,
            listen_port=self.listen_port,
            fwmark=self.fwmark,
            peers=list(self.peers.values()),
            counters=dict(self.counters),
        )

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


class StubHost:
    """What DeviceControl needs of the daemon, over a real DataPlane (the
    Device and its debug trace) but no TUN and no engine: the listen port
    is a real UDP socket, rebound as the daemon does (open the new one,
    then close the old one), so a port in use fails as it would there."""

    def __init__(self, private_key: bytes, v6: bool = True):
        from vpncrypt.daemon.data_plane import DataPlane
        from vpncrypt.daemon.udpsocket import open_udp_socket

        self._open = open_udp_socket
        self.dataplane = DataPlane(private_key)
        self.engine = None
        self.sock = open_udp_socket(0)
        self.listen_port = self.sock.getsockname()[1]
        self.fwmark = 0
        self.v6 = v6
        self.changes = 0

    @property
    def device(self):
        return self.dataplane.device

    def changed(self):
        self.changes += 1

    def endpoint_set(self, public_key, endpoint):
        self.dataplane.trace.endpoint_set(public_key, endpoint)

    def counters(self, peer_drops=True):
        return CounterSnapshot(drops=self.device.drops(peers=peer_drops))

    def rebind(self, port):
        if port and port == self.listen_port:
            return
        new = self._open(port)
        self.sock.close()
        self.sock = new
        self.listen_port = new.getsockname()[1]

    def set_fwmark(self, fwmark):
        self.fwmark = fwmark

    def close(self):
        self.sock.close()


@contextlib.contextmanager
def stub_host(private_key: bytes, v6: bool = True):
    host = StubHost(private_key, v6=v6)
    try:
        yield host
    finally:
        host.close()


@contextlib.contextmanager
def uapi_server(loop_thread, path: str, control, slice_seconds=None):
    """A UAPI server on `path` over `control`, on the test's loop thread;
    closed (and its socket removed) at the end.  slice_seconds=0: it lets
    the loop run after every piece of work."""
    from vpncrypt.daemon.uapi import start_uapi_server

    server = loop_thread.run(start_uapi_server(path, control))
    if slice_seconds is not None:
        server.slice_seconds = slice_seconds

    async def stop():
        server.close()
        await server.wait_closed()

    try:
        yield server
    finally:
        loop_thread.run(stop())
