"""A removed peer is forgotten everywhere (issue 17, F2): after many peers
were added (with an endpoint) and removed through the UAPI, nothing in the
daemon's Python objects still holds one of their public keys, at info level
and with the debug trace on.  (40,000 such cycles used to grow the daemon
by 14 MB: the debug trace's endpoint memory kept every key ever seen.)"""

import gc
import logging
import types

import pytest

from tests.daemon.fakes import StubHost
from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.daemon.uapi import handle_request
from vpncrypt.protocol import events as E
from vpncrypt.protocol import keys

PRIV = bytes(range(1, 33))
CYCLES = 300
_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    logging.Logger,
)


def _reachable_keys(root, size=32) -> set:
    """Every bytes/bytearray of `size` bytes reachable from `root` through
    instances and containers (not through classes, modules or functions:
    they hold no peer's state)."""
    seen, found, stack = set(), set(), [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (bytes, bytearray)):
            if len(o) == size:
                found.add(bytes(o))
            continue
        if isinstance(o, _OPAQUE):
            continue
        stack.extend(gc.get_referents(o))
    return found


def _churn(control, host, publics, debug_events: bool):
    for i, pub in enumerate(publics):
        body = (
            f"public_key={pub.hex()}\nendpoint=192.0.2.{i % 250 + 1}:{1000 + i}\n"
            f"allowed_ip=10.{i // 256 % 256}.{i % 256}.0/24\n"
        )
        assert handle_request("set=1", body, control) == b"errno=0\n\n"
        if debug_events:
            # the data plane's events for the peer: a handshake and a move
            peer = host.device.peers[pub]
            host.dataplane.trace.events(
                [
                    E.HandshakeInitiated(peer=peer, attempt=2),
                    E.EndpointChanged(peer=peer, endpoint=("192.0.2.250", 2000 + i), previous=None),
                ]
            )
        # removed one way or the other: remove=true, or every peer replaced
        if i % 10 == 9:
            assert handle_request("set=1", "replace_peers=true\n", control) == b"errno=0\n\n"
        else:
            assert (
                handle_request("set=1", f"public_key={pub.hex()}\nremove=true\n", control) == b"errno=0\n\n"
            )


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG], ids=["info", "debug"])
def test_removed_peers_leave_nothing_behind(level):
    trace_log = logging.getLogger("vpncrypt.trace")
    old = trace_log.level
    trace_log.setLevel(level)
    host = StubHost(PRIV)
    try:
        control = DeviceControl(host)
        kept = keys.public_from_private(bytes([7] * 32))
        assert (
            handle_request("set=1", f"public_key={kept.hex()}\nendpoint=192.0.2.7:7\n", control)
            == b"errno=0\n\n"
        )
        publics = [keys.public_from_private(bytes([9, n % 256, n // 256] + [9] * 29)) for n in range(CYCLES)]
        assert len(set(publics)) == CYCLES
        _churn(control, host, publics, debug_events=level == logging.DEBUG)
        # (a replace_peers above removed `kept` too: add it back)
        assert (
            handle_request("set=1", f"public_key={kept.hex()}\nendpoint=192.0.2.7:7\n", control)
            == b"errno=0\n\n"
        )
        assert set(host.device.peers) == {kept}
        trace = host.dataplane.trace
        assert set(trace._endpoints) <= {kept}
        left = _reachable_keys(host) & set(publics)
        assert not left, f"{len(left)} of {CYCLES} removed peers' keys still held"
        assert kept in _reachable_keys(host)  # the scan does find a peer's key
    finally:
        trace_log.setLevel(old)
        host.close()


def test_trace_endpoints_are_kept_only_for_the_debug_trace():
    trace_log = logging.getLogger("vpncrypt.trace")
    old = trace_log.level
    host = StubHost(PRIV)
    try:
        pub = keys.public_from_private(bytes([5] * 32))
        trace_log.setLevel(logging.INFO)
        host.dataplane.trace.endpoint_set(pub, ("192.0.2.1", 1))
        assert host.dataplane.trace._endpoints == {}
        trace_log.setLevel(logging.DEBUG)
        host.dataplane.trace.endpoint_set(pub, ("192.0.2.1", 1))
        assert host.dataplane.trace._endpoints == {pub: ("192.0.2.1", 1)}
    finally:
        trace_log.setLevel(old)
        host.close()


def test_trace_drops_what_it_kept_of_peers_removed_elsewhere():
    """A peer removed without the Control (the Device dropping a peer with
    the interface's own key, a stop) is forgotten too, once such entries
    add up: the trace never holds more than twice the peers it had when it
    last recorded one (here one at a time) plus 64."""
    trace_log = logging.getLogger("vpncrypt.trace")
    old = trace_log.level
    trace_log.setLevel(logging.DEBUG)
    host = StubHost(PRIV)
    try:
        dev = host.device
        for n in range(500):
            pub = keys.public_from_private(bytes([3, n % 256, n // 256] + [3] * 29))
            peer = dev.add_peer(pub, endpoint=("192.0.2.1", 1000 + n))
            host.dataplane.trace.events(
                [E.EndpointChanged(peer=peer, endpoint=("192.0.2.2", n + 1), previous=None)]
            )
            dev.remove_peer(pub)
            assert len(host.dataplane.trace._endpoints) <= 2 * 1 + 64
    finally:
        trace_log.setLevel(old)
        host.close()
