"""A request is checked whole before any of it is applied, over the UAPI and
at a reload (issue 17, F5): a value that passes the parser but that the
device cannot take (a zone over 32 bits, an IPv6 endpoint on an IPv4-only
host, a port in use) refuses the request with its errno, changes nothing,
and logs no traceback.

wireguard-go (0.0.20250522) answers errno=0 to any zone and fails later,
when it sends; vpncrypt refuses what it cannot send to (a stricter choice,
documented in vpncrypt.daemon.uapi): EINVAL for a number no scope id holds,
EADDRNOTAVAIL for a name no interface has."""

import errno
import ipaddress
import logging
import socket

import pytest

from tests.daemon.fakes import FakeControl, stub_host
from vpncrypt.config import parse_config, syncconf_operations
from vpncrypt.config.ops import (
    Endpoint,
    PeerUpdate,
    RemovePeer,
    SetAddresses,
    SetFwmark,
    SetListenPort,
    SetMTU,
    SetPrivateKey,
)
from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.daemon.control import ControlError
from vpncrypt.daemon.uapi import UAPIError, apply_operations, handle_request
from vpncrypt.daemon.udpsocket import open_udp_socket
from vpncrypt.endpoints import pack_endpoint, resolve_endpoint
from vpncrypt.protocol import keys

PRIV = bytes(range(1, 33))
K2, K3, K4 = (keys.public_from_private(bytes([n] * 32)) for n in (2, 3, 4))


@pytest.fixture
def host():
    with stub_host(PRIV) as h:
        yield h


def _free_port():
    s = open_udp_socket(0)
    port = s.getsockname()[1]
    s.close()
    return port


def _short(op):
    """A test id: the operation with the fields it sets (no key bytes)."""
    import dataclasses

    shown = []
    for f in dataclasses.fields(op):
        v = getattr(op, f.name)
        if f.name == "public_key" or v == f.default:
            continue
        shown.append(f"{f.name}={v!r}" if not isinstance(v, bytes) else f"{f.name}=<{len(v)} bytes>")
    return f"{type(op).__name__}({', '.join(shown)})"


def _errors(caplog):
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


# ---------------------------------------------------------------- zones


@pytest.mark.parametrize("zone", ["4294967296", "0004294967296", "9" * 30])
def test_zone_over_32_bits_refuses_the_request_before_anything(host, caplog, zone):
    # sin6_scope_id is 32 bits (RFC 3493, 3.3): 4294967296 fits nowhere
    control = DeviceControl(host)
    port = host.listen_port
    new_port = _free_port()
    body = (
        f"listen_port={new_port}\npublic_key={K2.hex()}\nallowed_ip=10.0.0.2/32\n"
        f"public_key={K3.hex()}\nendpoint=[fe80::1%{zone}]:1\n"
    )
    with caplog.at_level(logging.DEBUG):
        assert handle_request("set=1", body, control) == b"errno=-22\n\n"
    assert host.listen_port == port
    assert host.device.peers == {}
    assert _errors(caplog) == []


def test_zone_at_32_bits_is_taken_and_listed(host):
    control = DeviceControl(host)
    body = f"public_key={K2.hex()}\nendpoint=[fe80::1%4294967295]:1\n"
    assert handle_request("set=1", body, control) == b"errno=0\n\n"
    answer = handle_request("get=1", "", control).decode()
    assert "endpoint=[fe80::1%4294967295]:1\n" in answer


def test_zone_range_in_the_endpoint_helpers():
    with pytest.raises(OSError) as ei:
        resolve_endpoint(Endpoint("fe80::1%4294967296", 1))
    assert ei.value.errno == errno.EINVAL
    assert resolve_endpoint(Endpoint("fe80::1%4294967295", 1)) == ("fe80::1", 1, 0, 4294967295)
    with pytest.raises(ValueError):
        pack_endpoint(("fe80::1", 1, 0, 4294967296))
    assert len(pack_endpoint(("fe80::1", 1, 0, 4294967295))) == 48  # sizeof(vc_endpoint)


def test_reload_with_an_oversized_zone_keeps_every_peer(host, tmp_path):
    """At SIGHUP the same endpoint in the file used to remove the running
    peers the file does not name, then fail while applying."""
    control = DeviceControl(host)
    apply_operations(
        [
            PeerUpdate(public_key=K2, allowed_ips=(ipaddress.ip_network("10.0.0.2/32"),)),
            PeerUpdate(public_key=K3, allowed_ips=(ipaddress.ip_network("10.0.0.3/32"),)),
        ],
        control,
    )
    cfg = parse_config(
        f"[Interface]\nPrivateKey = {keys.encode(PRIV)}\n\n"
        f"[Peer]\nPublicKey = {keys.encode(K4)}\nAllowedIPs = 10.0.0.4/32\n"
        "Endpoint = [fe80::1%4294967296]:1\n"
    )
    ops = syncconf_operations(control.snapshot(), cfg)
    assert RemovePeer(K2) in ops  # what used to be applied first
    with pytest.raises(ControlError) as ei:
        apply_operations(ops, control)
    assert ei.value.errno == errno.EINVAL
    assert set(host.device.peers) == {K2, K3}
    assert host.device.peers[K2].allowed_ips == ["10.0.0.2/32"]


# ---------------------------------------------------------------- the device decides


def test_ipv6_endpoint_on_an_ipv4_only_host_changes_nothing(caplog):
    with stub_host(PRIV, v6=False) as host:
        control = DeviceControl(host)
        port = host.listen_port
        body = f"listen_port={_free_port()}\npublic_key={K2.hex()}\nendpoint=[2001:db8::1]:51820\n"
        assert handle_request("set=1", body, control) == f"errno=-{errno.EAFNOSUPPORT}\n\n".encode()
        assert host.listen_port == port and host.device.peers == {}
        assert _errors(caplog) == []


def test_listen_port_in_use_changes_nothing(host):
    control = DeviceControl(host)
    taken = open_udp_socket(0)
    try:
        port = taken.getsockname()[1]
        new_key = bytes([9] * 32)
        before = host.device.private_key
        body = f"private_key={new_key.hex()}\nlisten_port={port}\npublic_key={K2.hex()}\n"
        assert handle_request("set=1", body, control) == f"errno=-{errno.EADDRINUSE}\n\n".encode()
        assert host.device.private_key == before  # not set before the port failed
        assert host.device.peers == {}
        # the port the daemon already has is no conflict
        same = f"listen_port={host.listen_port}\npublic_key={K2.hex()}\n"
        assert handle_request("set=1", same, control) == b"errno=0\n\n"
    finally:
        taken.close()


# ---------------------------------------------------------------- operations from any source


@pytest.mark.parametrize(
    "bad",
    [
        SetListenPort(65536),
        SetListenPort(-1),
        SetListenPort(True),
        SetFwmark(4294967296),
        SetFwmark(-1),
        SetMTU(67),
        SetMTU(65536),
        SetPrivateKey(b"short"),
        PeerUpdate(public_key=K2, persistent_keepalive=65536),
        PeerUpdate(public_key=K2, persistent_keepalive=-1),
        PeerUpdate(public_key=K2, endpoint=Endpoint("192.0.2.1", -1)),
        PeerUpdate(public_key=K2, endpoint=Endpoint("192.0.2.1", 65536)),
        PeerUpdate(public_key=K2, allowed_ips=("10.0.0.0/8",)),
        PeerUpdate(public_key=b"\x01" * 31),
        PeerUpdate(public_key=K2, preshared_key=b"\x01" * 33),
        SetAddresses(add=("10.0.0.1/24",)),
    ],
    ids=_short,
)
def test_operations_out_of_range_are_refused_whole(bad):
    """Whoever built the operations (a config file's diff, not only the UAPI
    parser), the last one out of range refuses all of them."""
    c = FakeControl()
    with pytest.raises(UAPIError) as ei:
        apply_operations([SetListenPort(1), PeerUpdate(public_key=K3), bad], c)
    assert ei.value.errno == errno.EINVAL
    assert c.calls == [] and c.listen_port == 0 and c.peers == {}


@pytest.mark.parametrize(
    "good",
    [
        SetListenPort(0),
        SetListenPort(65535),
        SetFwmark(0),
        SetFwmark(4294967295),
        SetMTU(68),
        SetMTU(65535),
        PeerUpdate(public_key=K2, persistent_keepalive=0),
        PeerUpdate(public_key=K2, persistent_keepalive=65535),
        PeerUpdate(public_key=K2, endpoint=Endpoint("192.0.2.1", 0)),  # as wireguard-go
        PeerUpdate(public_key=K2, endpoint=Endpoint("192.0.2.1", 65535)),
        SetAddresses(add=(ipaddress.ip_interface("10.0.0.1/24"),)),
    ],
    ids=_short,
)
def test_operations_at_the_bounds_are_applied(good):
    c = FakeControl()
    apply_operations([good], c)
    assert len(c.calls) == 1


def test_a_refused_request_over_the_socket_changes_nothing(host):
    """The same through handle_request with a refused endpoint port after a
    listen port: EINVAL, and the port is the old one."""
    control = DeviceControl(host)
    port = host.listen_port
    body = f"listen_port={_free_port()}\npublic_key={K2.hex()}\nendpoint=192.0.2.1:65536\n"
    assert handle_request("set=1", body, control) == b"errno=-22\n\n"
    assert host.listen_port == port


def test_dual_stack_probe_leaves_the_port_free(host):
    """The listen-port check opens and closes a socket: the port is free
    again for the rebind that follows."""
    control = DeviceControl(host)
    port = _free_port()
    assert handle_request("set=1", f"listen_port={port}\n", control) == b"errno=0\n\n"
    assert host.listen_port == port
    assert host.sock.family in (socket.AF_INET6, socket.AF_INET)
