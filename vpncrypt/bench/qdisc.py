"""A fair queue on an interface: fq_codel as its root qdisc, set through
rtnetlink (RTM_NEWQDISC, as `tc qdisc replace dev IFACE root fq_codel`
does), with no `tc` process.

fq_codel (RFC 8290) gives each flow its own queue and serves new, sparse
flows (a ping, a DNS query, a TCP handshake) before the bulk ones, and CoDel
drops from a flow whose packets wait longer than its target (5 ms), so a
bulk flow backs off before it fills the queue.  The kernel's defaults are
kept (10240 packets, 1024 flows, target 5 ms, interval 100 ms).

Only `bench tunnel --vpncrypt-tun-qdisc fq_codel` uses it: on a TUN the
qdisc never holds a backlog (the TUN driver never stops its queue; packets
wait in its own ring, which no qdisc reaches), so the daemon does not set
one (measured: BENCHMARKS.md, latency under load).
"""

from __future__ import annotations

import errno
import os
import socket
import struct

# <linux/netlink.h>, <linux/rtnetlink.h>, <linux/pkt_sched.h>
NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_DUMP = 0x300
TCA_KIND = 1
TC_H_ROOT = 0xFFFFFFFF

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
_RTATTR = struct.Struct("=HH")  # len, type
_NLMSGERR = struct.Struct("=i")


class QdiscError(OSError):
    pass


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attr(kind: int, payload: bytes) -> bytes:
    n = _RTATTR.size + len(payload)
    return _RTATTR.pack(n, kind) + payload + bytes(_align(n) - n)


def _message(msg_type: int, flags: int, seq: int, body: bytes) -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body


def _request(sock: socket.socket, msg: bytes, seq: int) -> list[tuple[int, bytes]]:
    """Send `msg`; the messages of the answer up to the ACK or NLMSG_DONE,
    as (type, payload).  A netlink error is a QdiscError with its errno."""
    sock.send(msg)
    out: list[tuple[int, bytes]] = []
    while True:
        data = sock.recv(1 << 16)
        off = 0
        while off + _NLMSGHDR.size <= len(data):
            length, mtype, _flags, mseq, _pid = _NLMSGHDR.unpack_from(data, off)
            if length < _NLMSGHDR.size:
                raise QdiscError(errno.EPROTO, "rtnetlink: a malformed answer")
            payload = data[off + _NLMSGHDR.size : off + length]
            off += _align(length)
            if mseq != seq:
                continue
            if mtype == NLMSG_ERROR:
                (err,) = _NLMSGERR.unpack_from(payload)
                if err:
                    raise QdiscError(-err, os.strerror(-err))
                return out
            if mtype == NLMSG_DONE:
                return out
            out.append((mtype, payload))


def _ifindex(ifname: str) -> int:
    try:
        return socket.if_nametoindex(ifname)
    except OSError as e:
        raise QdiscError(errno.ENODEV, f"{ifname}: no such interface") from e


def set_root_qdisc(ifname: str, kind: str) -> None:
    """Make a `kind` qdisc with the kernel's default parameters the root
    qdisc of `ifname`, replacing what is there (needs CAP_NET_ADMIN).
    QdiscError (an OSError with the errno) if the kernel refuses: ENODEV
    for no such interface, ENOENT for a scheduler the kernel does not have."""
    index = _ifindex(ifname)
    tcm = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, index, 0, TC_H_ROOT, 0)
    body = tcm + _attr(TCA_KIND, kind.encode() + b"\0")
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        try:
            _request(sock, _message(RTM_NEWQDISC, flags, 1, body), 1)
        except QdiscError as e:
            raise QdiscError(e.errno, f"{ifname}: setting the {kind} qdisc: {e.strerror}") from None


def set_fq_codel(ifname: str) -> None:
    """fq_codel as `ifname`'s root qdisc (see set_root_qdisc for the errors;
    ENOENT: a kernel built without CONFIG_NET_SCH_FQ_CODEL)."""
    set_root_qdisc(ifname, "fq_codel")


def root_qdisc(ifname: str) -> str | None:
    """The kind of `ifname`'s root qdisc ("fq_codel", "pfifo_fast", "noqueue"...), or None."""
    index = _ifindex(ifname)
    body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, index, 0, 0, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        answer = _request(sock, _message(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 2, body), 2)
    for mtype, payload in answer:
        if mtype != RTM_NEWQDISC or len(payload) < _TCMSG.size:
            continue
        _f, _p1, _p2, qindex, _handle, parent, _info = _TCMSG.unpack_from(payload)
        if qindex != index or parent != TC_H_ROOT:
            continue
        off = _TCMSG.size
        while off + _RTATTR.size <= len(payload):
            alen, atype = _RTATTR.unpack_from(payload, off)
            if alen < _RTATTR.size:
                break
            if atype == TCA_KIND:
                return payload[off + _RTATTR.size : off + alen].split(b"\0", 1)[0].decode()
            off += _align(alen)
    return None
