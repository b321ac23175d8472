"""A network namespace an ordinary user owns, with the kernel's TCP/IP stack on
one end of a veth pair and the engine's packet socket on the other.

    enter_namespace(plan) -> PacketLink

unshare(CLONE_NEWUSER | CLONE_NEWNET) makes the calling process root of a new
user namespace (mapped to the user's own uid and gid, nothing else) and puts
it in a new network namespace that user namespace owns, so it may configure
that namespace and nothing of the host's.  Sockets made before the call stay
in the host's namespace (the outer UDP socket, the proxy's listening sockets);
every socket made after it is in the new one, where the routes of the
peers' AllowedIPs lead to the veth end `wg0` (its address the config's
Address) and the frames it sends reach the engine's end `wg0e`.

The kernel refuses CLONE_NEWUSER to a process with more than one thread
(EINVAL): this runs before the event loop and before any thread.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vpncrypt.dataplane.io import _ethtool_value
from vpncrypt.proxy.packet_link import PacketLink, open_packet_socket

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000

STACK_IF = "wg0"  # the namespace's stack: Address, routes
ENGINE_IF = "wg0e"  # the engine's packet socket
# Locally administered unicast MACs (bit 1 of the first byte set, bit 0 clear):
# the link is private to the namespace, so fixed ones never meet another.
STACK_MAC = bytes.fromhex("020000000001")
ENGINE_MAC = bytes.fromhex("020000000002")

# The legacy ethtool set commands (linux/ethtool.h): transmit checksum, scatter-
# gather, TSO, GSO, GRO.  All off on the stack's end: it must hand over whole
# packets of at most the MTU with their checksums computed (PacketLink has no
# virtio_net_hdr to carry a checksum offset or a segment size).
_ETHTOOL_OFF = {"tx-checksum": 0x17, "scatter-gather": 0x19, "tso": 0x1F, "gso": 0x24, "gro": 0x2C}


class NamespaceUnavailable(Exception):
    """No user namespace for this user here (the message says why, in one line)."""


@dataclass(frozen=True)
class LinkPlan:
    """What the namespace's stack is given: the MTU, the config's Address
    (interfaces), the prefixes routed to the tunnel; the engine's batch and
    the largest packet it reads."""

    mtu: int
    addresses: Sequence[ipaddress.IPv4Interface | ipaddress.IPv6Interface]
    routes: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]
    batch: int
    max_packet: int


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        e = ctypes.get_errno()
        why = {
            1: "not permitted (unprivileged user namespaces off, or a seccomp filter)",
            28: "the user namespace limit is reached (user.max_user_namespaces)",
            22: "refused (the process has threads, or the kernel has no user namespaces)",
        }.get(e, os.strerror(e))
        raise NamespaceUnavailable(
            f"cannot create a user and network namespace: {why}; this version of vpncrypt proxy "
            "needs user namespaces (a userspace-stack fallback is planned)"
        )


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _map_ids(uid: int, gid: int) -> None:
    """The user's uid and gid as 0 inside (and no supplementary groups, which
    an unprivileged user must give up before writing gid_map)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def _ip_command() -> str:
    found = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NamespaceUnavailable("cannot set up the namespace: the ip command (iproute2) is not installed")
    return found


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def ip_batch(plan: LinkPlan) -> list[str]:
    """The `ip -batch` lines that build the namespace's link (ip stops at the
    first that fails; `replace` where an Address's own prefix route may
    already be there)."""
    lines = [
        "link set lo up",
        f"link add {STACK_IF} address {_mac(STACK_MAC)} mtu {plan.mtu} type veth "
        f"peer name {ENGINE_IF} address {_mac(ENGINE_MAC)} mtu {plan.mtu}",
        # no ARP or neighbour discovery: the stack sends every frame to its own
        # MAC, which the engine's packet socket takes whatever its address
        f"link set {STACK_IF} arp off up",
        f"link set {ENGINE_IF} arp off up",
    ]
    for a in plan.addresses:
        lines.append(f"address add {a.with_prefixlen} dev {STACK_IF}" + (" nodad" if a.version == 6 else ""))
    for net in _unique(plan.routes):
        lines.append(f"route replace {net.with_prefixlen} dev {STACK_IF}")
    return lines


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _unique(nets: Iterable[Network]) -> list[Network]:
    out: list[Network] = []
    for n in nets:
        if n not in out:
            out.append(n)
    return out


def _sysctls_before() -> None:
    """IPv6 on new links: no router solicitations or RAs, no DAD (the stack's
    end would otherwise send them into the tunnel, where no peer takes them).
    Best effort: a host without IPv6 has no such files."""
    for key, value in (("accept_ra", "0"), ("router_solicitations", "0"), ("dad_transmits", "0")):
        try:
            _write(f"/proc/sys/net/ipv6/conf/default/{key}", value)
        except OSError:
            pass


def _offloads_off() -> None:
    for name, cmd in _ETHTOOL_OFF.items():
        try:
            _ethtool_value(STACK_IF, cmd, 0)
        except OSError as e:
            raise NamespaceUnavailable(f"cannot turn {name} off on {STACK_IF}: {e.strerror}") from None
    try:
        _ethtool_value(ENGINE_IF, _ETHTOOL_OFF["gro"], 0)
        _write(f"/proc/sys/net/ipv6/conf/{ENGINE_IF}/disable_ipv6", "1")
    except OSError:
        pass


def enter_namespace(plan: LinkPlan) -> PacketLink:
    """Unshare, map the ids, build the link; returns the engine's PacketLink
    (NamespaceUnavailable with one line on any failure)."""
    uid, gid = os.getuid(), os.getgid()
    ip = _ip_command()
    _unshare(CLONE_NEWUSER | CLONE_NEWNET)
    try:
        _map_ids(uid, gid)
    except OSError as e:
        raise NamespaceUnavailable(f"cannot map ids in the new user namespace: {e.strerror}") from None
    _sysctls_before()
    r = subprocess.run(
        [ip, "-batch", "-"],
        input="\n".join(ip_batch(plan)) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["failed"])[-1]
        raise NamespaceUnavailable(f"cannot set up the namespace's link: ip: {why}")
    _offloads_off()
    sock = open_packet_socket(ENGINE_IF)
    return PacketLink(sock, ENGINE_IF, STACK_MAC, mtu=plan.max_packet, batch=plan.batch)
