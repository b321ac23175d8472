"""Handshake load for the lab benches tests.benchlab.handshake_flood and
tests.benchlab.reconnect_storm.

* UdpBatch: sendmmsg/recvmmsg through ctypes on one UDP socket, each message
  with its own source address (an IP_PKTINFO control message), so that one
  socket speaks for thousands of source addresses.  The addresses come from an
  "any-IP" route (`ip route add local 10.200.0.0/16 dev lo` in the sender's
  namespace: every address of the range is local, none is configured one by
  one) and a route back to the range in the receiver's namespace.
* netns_socket: a UDP socket made inside a named network namespace (setns on
  this thread only, and back), so that a generator can run in the bench's own
  process.
* WireGuard initiations in bulk, built with vpncrypt.protocol's Noise code:
  unknown_initiations (valid mac1 from static keys the victim does not know),
  nomac_initiations (random bytes of an initiation's size and type), and
  StormPeer (a peer the victim knows, with the Noise state kept after the
  static key, so that a retry costs one AEAD for the new timestamp; its
  keepalive() checks a victim's response the way the initiator does and
  returns the first transport message of the new session).
* Small lab pieces both benches add to vpncrypt.bench.nslab's Lab: the any-IP routes, a
  background CPU load (--busy) and the UDP socket's drop count.
"""

import ctypes
import ctypes.util
import ipaddress
import os
import shutil
import socket
import struct

from vpncrypt.protocol import keys
from vpncrypt.protocol.cookie import CookieState
from vpncrypt.protocol.noise_ik import ZERO_PSK, ik_initiator_read, init_state
from vpncrypt.protocol.messages import (
    HDR_INITIATION,
    INIT_MAC1,
    RESP_MAC1,
    RESPONSE_LEN,
    pack_initiation_body,
    pack_transport_header,
)
from vpncrypt.protocol.noise import (
    CONSTRUCTION,
    HASH,
    IDENTIFIER,
    LABEL_COOKIE,
    LABEL_MAC1,
    MAC,
    SymmetricState,
    aead_nonce,
    tai64n,
)

ANYIP_NET = ipaddress.ip_network("10.200.0.0/16")  # the generators' source addresses
MAX_SOURCES = ANYIP_NET.num_addresses - 2
IPPROTO_IP, IP_PKTINFO, IP_FREEBIND = 0, 8, 15
SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
MSG_DONTWAIT = 0x40
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


# ============================================================ batched UDP


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


class _SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint16),
        ("port", ctypes.c_uint16),
        ("addr", ctypes.c_uint8 * 4),
        ("zero", ctypes.c_uint8 * 8),
    ]


class _PktinfoCmsg(ctypes.Structure):
    # struct cmsghdr (len, level, type) + struct in_pktinfo (ifindex, spec_dst, addr)
    _fields_ = [
        ("len", ctypes.c_size_t),
        ("level", ctypes.c_int),
        ("type", ctypes.c_int),
        ("ifindex", ctypes.c_int),
        ("spec_dst", ctypes.c_uint8 * 4),
        ("addr", ctypes.c_uint8 * 4),
        ("pad", ctypes.c_uint8 * 4),
    ]


_CMSG_LEN = ctypes.sizeof(ctypes.c_size_t) + 2 * ctypes.sizeof(ctypes.c_int) + 12
_libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Mmsghdr), ctypes.c_uint, ctypes.c_int]
_libc.recvmmsg.argtypes = [
    ctypes.c_int,
    ctypes.POINTER(_Mmsghdr),
    ctypes.c_uint,
    ctypes.c_int,
    ctypes.c_void_p,
]


class UdpBatch:
    """`size` message slots of at most `slot` bytes for sendmmsg (each with a
    destination and a source address) or recvmmsg."""

    def __init__(self, size: int, slot: int = 2048):
        self.size, self.slot = size, slot
        self.buf = ctypes.create_string_buffer(size * slot)
        self.iov = (_Iovec * size)()
        self.msgs = (_Mmsghdr * size)()
        self.names = (_SockaddrIn * size)()
        self.cmsgs = (_PktinfoCmsg * size)()
        base = ctypes.addressof(self.buf)
        for i in range(size):
            self.iov[i].base = base + i * slot
            self.iov[i].len = slot
            h = self.msgs[i].hdr
            h.iov = ctypes.pointer(self.iov[i])
            h.iovlen = 1
            h.name = ctypes.addressof(self.names[i])
            h.namelen = ctypes.sizeof(_SockaddrIn)
            c = self.cmsgs[i]
            c.len, c.level, c.type = _CMSG_LEN, IPPROTO_IP, IP_PKTINFO

    def set(self, i: int, data: bytes, dest, source: bytes | None = None) -> None:
        """Slot i sends `data` to dest (ip, port) from `source` (4 bytes, or
        None: the socket's own address)."""
        ctypes.memmove(ctypes.addressof(self.buf) + i * self.slot, data, len(data))
        self.iov[i].len = len(data)
        n = self.names[i]
        n.family = socket.AF_INET
        n.port = socket.htons(dest[1])
        n.addr[:] = socket.inet_aton(dest[0])
        h = self.msgs[i].hdr
        if source is None:
            h.control, h.controllen = None, 0
        else:
            self.cmsgs[i].spec_dst[:] = source
            h.control = ctypes.addressof(self.cmsgs[i])
            h.controllen = ctypes.sizeof(_PktinfoCmsg)

    def send(self, fd: int, count: int, start: int = 0, flags: int = 0) -> int:
        """sendmmsg slots start..start+count-1; returns how many went (0 when
        the socket would block)."""
        n = _libc.sendmmsg(fd, ctypes.byref(self.msgs[start]), count, flags)
        if n < 0:
            err = ctypes.get_errno()
            if err in (11, 105, 111):  # EAGAIN, ENOBUFS, ECONNREFUSED: none sent this time
                return 0
            raise OSError(err, os.strerror(err))
        return n

    def recv(self, fd: int) -> int:
        """recvmmsg without waiting into every slot; returns the count."""
        for i in range(self.size):
            self.iov[i].len = self.slot
            h = self.msgs[i].hdr
            h.name, h.namelen, h.control, h.controllen = None, 0, None, 0
        n = _libc.recvmmsg(fd, self.msgs, self.size, MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err == 11:
                return 0
            raise OSError(err, os.strerror(err))
        return n

    def received(self, i: int) -> bytes:
        return ctypes.string_at(ctypes.addressof(self.buf) + i * self.slot, self.msgs[i].len)

    def first_byte(self, i: int) -> int:
        return self.buf.raw[i * self.slot] if self.msgs[i].len else -1


def netns_socket(ns: str, port: int = 0, buffers: int = 32 << 20) -> socket.socket:
    """A non-blocking UDP socket bound to 0.0.0.0:port in network namespace
    `ns` (/var/run/netns/NS), with big buffers and IP_FREEBIND (it sends from
    the any-IP range)."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        finally:
            if _libc.setns(here, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to this namespace")
    finally:
        os.close(here)
        os.close(there)
    s.setsockopt(IPPROTO_IP, IP_FREEBIND, 1)
    for opt in (SO_RCVBUFFORCE, SO_SNDBUFFORCE):
        s.setsockopt(socket.SOL_SOCKET, opt, buffers)
    s.bind(("0.0.0.0", port))
    s.setblocking(False)
    return s


def source_address(i: int) -> bytes:
    """The i-th source address of the any-IP range (i from 0), as 4 bytes."""
    return (ANYIP_NET[1 + i % MAX_SOURCES]).packed


# ============================================================ initiations


def unknown_initiation_bodies(victim_pub: bytes, n: int, crypto) -> list[bytes]:
    """n initiation bodies (the 116 bytes before mac1) from fresh static keys
    the victim does not know."""
    from vpncrypt.protocol.noise_ik import wg_initiation_from
    import time

    out = []
    for i in range(n):
        body, pending = wg_initiation_from(
            crypto,
            keys.generate_private(),
            victim_pub,
            int.from_bytes(os.urandom(4), "little"),
            keys.generate_private(),
            time.time() + i,
        )
        pending.wipe()
        out.append(body)
    return out


def unknown_initiations(victim_pub: bytes, n: int, crypto) -> list[bytes]:
    """n initiations (148 bytes, valid mac1, zero mac2) from static keys the
    victim does not know."""
    cookie = CookieState(victim_pub)
    return [cookie.add_macs(body, 0.0) for body in unknown_initiation_bodies(victim_pub, n, crypto)]


def nomac_initiations(n: int) -> list[bytes]:
    """n messages of an initiation's type and size (148 bytes) whose other
    bytes are random: a wrong mac1."""
    return [HDR_INITIATION + os.urandom(144) for _ in range(n)]


def mac1_key(public: bytes) -> bytes:
    return HASH(LABEL_MAC1, public)


def cookie_key(public: bytes) -> bytes:
    return HASH(LABEL_COOKIE, public)


class StormPeer:
    """A peer of the victim for the reconnect storm.  One ephemeral key per
    peer: a retry is a new initiation (new sender index and TAI64N timestamp,
    mac1, mac2 once it holds a cookie) that reuses the Noise state up to the
    encrypted static key, so it costs the generator one AEAD and not two
    X25519; the victim's work per initiation is the same as for a fresh one."""

    __slots__ = ("private", "public", "e_private", "e_public", "enc_static", "ck", "h", "k")

    def __init__(self, private, public, e_private, e_public, enc_static, ck, h, k):
        self.private, self.public = private, public
        self.e_private, self.e_public = e_private, e_public
        self.enc_static, self.ck, self.h, self.k = enc_static, ck, h, k

    def initiation(self, crypto, sender_index: int, unix_now: float) -> tuple[bytes, bytes]:
        """(the 116 bytes before mac1, the encrypted timestamp)."""
        enc_ts = crypto.seal(self.k, aead_nonce(0), tai64n(unix_now), self.h)
        return pack_initiation_body(sender_index, self.e_public, self.enc_static, enc_ts), enc_ts

    def keepalive(self, crypto, enc_ts: bytes, response: bytes) -> bytes | None:
        """The response to this peer's initiation with timestamp `enc_ts`,
        checked as the initiator checks it (mac1, then the empty payload's
        tag under the keys the handshake derives); None if it fails, else the
        session's first transport message (a keepalive, counter 0), which a
        WireGuard initiator sends at once and which confirms the session to
        the responder."""
        if (
            len(response) != RESPONSE_LEN
            or response[:4] != b"\x02\x00\x00\x00"
            or MAC(mac1_key(self.public), response[: RESP_MAC1[0]]) != response[RESP_MAC1[0] : RESP_MAC1[1]]
        ):
            return None
        ss = SymmetricState(CONSTRUCTION, crypto)
        ss.ck[:], ss.h[:] = self.ck, self.h
        ss.mix_hash(enc_ts)  # the state after the initiation
        try:
            ik_initiator_read(ss, self.e_private, self.private, response[12:44], ZERO_PSK, response[44:60])
            send_key, _recv = ss.split()
        except Exception:  # AuthenticationError, DHError
            return None
        finally:
            ss.wipe()
        receiver = int.from_bytes(response[4:8], "little")
        return pack_transport_header(receiver, 0) + crypto.seal(send_key, aead_nonce(0), b"", b"")


def _make_storm_peers(args):
    victim_pub, n = args
    from vpncrypt.crypto import get_backend

    crypto = get_backend("native")
    start = init_state(CONSTRUCTION, IDENTIFIER, victim_pub, crypto)
    out = []
    for _ in range(n):
        priv = keys.generate_private()
        pub = keys.public_from_private(priv)
        e_priv = keys.generate_private()
        e_pub = keys.public_from_private(e_priv)
        # the initiator's first message up to its timestamp (as
        # handshake.ik_initiator_write); the timestamp is encrypted per attempt
        ss = start.copy()
        ss.mix_hash(e_pub)
        ss.mix_key(e_pub)
        ss.mix_key(keys.dh(e_priv, victim_pub))
        enc_s = ss.encrypt_and_hash(pub)
        ss.mix_key(keys.dh(priv, victim_pub))
        out.append((priv, pub, e_priv, e_pub, enc_s, bytes(ss.ck), bytes(ss.h), bytes(ss.k)))
        ss.wipe()
    return out


def make_storm_peers(victim_pub: bytes, n: int, workers: int | None = None) -> list[StormPeer]:
    """n peers for the victim, made in a process pool of `workers` (default:
    one per core)."""
    workers = workers or os.cpu_count() or 1
    chunk = 500
    jobs = [(victim_pub, min(chunk, n - i)) for i in range(0, n, chunk)]
    parts = _pool_map(_make_storm_peers, jobs, workers)
    return [StormPeer(*t) for part in parts for t in part]


def _worker_init():
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the bench's own handlers
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_map(fn, jobs, workers):
    """fn over jobs, in a pool of `workers` forked processes (in this
    process if one is enough)."""
    import multiprocessing

    if workers == 1 or len(jobs) <= 1:
        return [fn(j) for j in jobs]
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init)
    try:
        parts = pool.map(fn, jobs)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return parts


def open_cookie_reply(crypto, ckey: bytes, reply: bytes, mac1: bytes) -> bytes | None:
    """The cookie of a cookie reply to the message whose mac1 is `mac1`."""
    try:
        return crypto.xopen(ckey, reply[8:32], reply[32:64], mac1)
    except Exception:
        return None


INIT_MAC1_OFFSET = INIT_MAC1[0]


# ============================================================ lab pieces


def add_anyip(lab, sender: str, receiver: str, via: str) -> None:
    """Every address of ANYIP_NET is local in `sender`'s namespace; the
    receiver routes the range back via `via` (the sender's veth address)."""
    lab.run_in(sender, "ip", "route", "add", "local", str(ANYIP_NET), "dev", "lo")
    lab.run_in(receiver, "ip", "route", "add", str(ANYIP_NET), "via", via)


def start_busy(lab, side: str, seconds: float):
    """A process keeping every core busy (stress-ng --cpu N, else N Python
    busy loops), for at most `seconds`; stop it with lab.stop_proc."""
    import sys

    n = os.cpu_count() or 1
    if shutil.which("stress-ng"):
        cmd = ["stress-ng", "--cpu", str(n), "--timeout", f"{int(seconds) + 1}s", "--quiet"]
    else:
        cmd = [
            sys.executable,
            "-c",
            "import multiprocessing as m, time, sys\n"
            "def spin(t):\n"
            "    while time.monotonic() < t: pass\n"
            f"end = time.monotonic() + {seconds}\n"
            f"ps = [m.Process(target=spin, args=(end,)) for _ in range({n})]\n"
            "[p.start() for p in ps]; [p.join() for p in ps]\n",
        ]
    return lab.spawn("busy", side, cmd)


def udp_drops(lab, side: str, port: int) -> int | None:
    """The drop count of the UDP socket(s) on `port` in a namespace
    (/proc/net/udp's last column)."""
    r = lab.run_in(side, "cat", "/proc/net/udp", "/proc/net/udp6", check=False)
    total, seen = 0, False
    for line in r.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 12 and ":" in parts[1]:
            try:
                if int(parts[1].rsplit(":", 1)[1], 16) == port:
                    total += int(parts[-1])
                    seen = True
            except ValueError:
                continue
    return total if seen else None


def unpack_u32(data: bytes, off: int) -> int:
    return struct.unpack_from("<I", data, off)[0]


# ============================================================ a bench's run


def implementations(text: str) -> list[str] | None:
    """--implementations: a list of vpncrypt and wireguard-go (None if bad)."""
    names = [i.strip() for i in text.split(",") if i.strip()]
    if not names or any(i not in ("vpncrypt", "wireguard-go") for i in names):
        return None
    return names


def report_head(prog: str, builds, lab) -> dict:
    """What every report of these benches starts with: the command, date,
    machine, versions and the run's names."""
    import sys
    import time
    from vpncrypt.bench.machine import cpu_model

    return {
        "command": f"{prog} " + " ".join(sys.argv[3:]) if len(sys.argv) > 2 else "",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": os.uname().release,
        "versions": {
            "wireguard-go-builds": [{k: b[k] for k in ("path", "version")} for b in builds],
            "vpncrypt": __import__("vpncrypt").__version__,
            "python": sys.version.split()[0],
        },
        "run_id": lab.id,
        "namespaces": list(lab.ns.values()),
    }


def report(result: dict, rows: list, as_json: bool, print_table) -> int:
    """Sets result["ok"] (every row ok), prints the JSON or the table;
    returns the exit status."""
    import json

    result["ok"] = bool(rows) and all(r["ok"] for r in rows)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0 if result["ok"] else 1


def runs(impls, builds):
    """(implementation, wireguard-go build or None) in run order."""
    return [(i, None) for i in impls if i == "vpncrypt"] + [("wireguard-go", b) for b in builds]
