"""Fuzz targets: each takes the raw fuzz input (bytes) and returns normally,
or raises on a finding (an uncaught exception or a broken invariant).

They are used two ways:
  * in-process, by test_replay.py, on every file in corpus/<target>/;
  * under atheris, by run_atheris.py (coverage-guided, bounded time).

Targets
  datagram  the wire parsers (messages.py) and Device.receive_datagram(s) on a
            two-device world with established keys (see World), including the
            under-load / cookie path and the timers;
  uapi      parse_set and the UAPI request framing (uapi_framing.read_request +
            handle_request) against a real Device behind DeviceControl;
  config    parse_config on arbitrary text: only ConfigError may escape.

Everything is deterministic for a given input (fixed keys, seeded rngs, a
fake clock), so a saved input reproduces its finding.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import ipaddress
import logging
import random
from collections import Counter

from tests.packets import ipv4, ipv6
from vpncrypt.config.model import ConfigError
from vpncrypt.config.parser import parse_config
from vpncrypt.daemon import uapi, uapi_framing
from vpncrypt.protocol import Device, Output, keys
from vpncrypt.protocol import messages as M
from vpncrypt.protocol.timers import ProtocolConfig

# ----------------------------------------------------------------------------
# the datagram world

A_ADDR = ("192.0.2.1", 51820)
B_ADDR = ("198.51.100.2", 51820)
A_NETS = ("10.0.0.1/32", "fd00::1/128")
B_NETS = ("10.0.0.2/32", "fd00::2/128", "10.9.0.0/16")
PSK = bytes(range(32))
A_PRIV = keys.clamp(random.Random(1).randbytes(32))
B_PRIV = keys.clamp(random.Random(2).randbytes(32))
# A third key B knows as a peer without ever talking to it (an "unknown" static
# for mac1-valid initiations from elsewhere reaches the peer lookup).
C_PRIV = keys.clamp(random.Random(3).randbytes(32))
# Short timers keep the interesting deadlines within the clock ops' reach; a
# handshake queue of 32 puts a device under load from 4 waiting messages on.
TIMERS = ProtocolConfig(
    rekey_after_time=12.0,
    reject_after_time=18.0,
    rekey_attempt_time=9.0,
    rekey_timeout=1.0,
    keepalive_timeout=2.0,
    cookie_secret_max_age=12.0,
    cookie_secret_latency=0.5,
    max_staged_packets=16,
    handshake_queue_size=32,
)
MAX_RELAY_HOPS = 64
MAX_OPS = 64


# Packets the seed generator (make_corpus.py) has each side seal once: a saved
# data message may legitimately deliver one of these even though this run's
# sender never sent it.
SEED_PACKETS = {
    "A": [ipv4("10.0.0.1", "10.0.0.2", b"seed-a-%d" % i) for i in range(3)]
    + [ipv6("fd00::1", "fd00::2", b"seed-a6")],
    "B": [ipv4("10.0.0.2", "10.0.0.1", b"seed-b-%d" % i) for i in range(3)]
    + [ipv6("fd00::2", "fd00::1", b"seed-b6")],
}


def as_delivered(pkt: bytes) -> bytes:
    """What the receiver may deliver for `pkt` as sent: the sender pads to 16
    bytes with zeros and the receiver cuts at the IP header's total length
    (a sender's packet that claims more than it holds thus gains padding)."""
    pt = pkt + bytes(-len(pkt) & 15)
    if len(pt) >= 20 and pt[0] >> 4 == 4:
        total = (pt[2] << 8) | pt[3]
    elif len(pt) >= 40 and pt[0] >> 4 == 6:
        total = 40 + ((pt[4] << 8) | pt[5])
    else:
        return pkt
    return pt[:total] if 20 <= total <= len(pt) else pkt


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


class Finding(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Finding(msg)


class World:
    """Two devices, A and B, with an established session (A initiated, both
    sides confirmed) and A holding a second, pending initiation whose message
    (`init2`) has not been delivered.  Built from fixed keys and seeded rngs, so
    every World is identical: the seed corpus' messages are valid in it."""

    def __init__(self, backend: str = "native"):
        self.clock = Clock()
        kw = dict(
            wallclock=self.clock.wall,
            backend=backend,
            protocol_config=TIMERS,
            ratelimit_rate=5,
            ratelimit_burst=2,
        )
        self.a = Device(A_PRIV, rng=random.Random(11).randbytes, **kw)
        self.b = Device(B_PRIV, rng=random.Random(12).randbytes, **kw)
        self.a.add_peer(self.b.public_key, preshared_key=PSK, allowed_ips=B_NETS[:2], endpoint=B_ADDR)
        self.b.add_peer(self.a.public_key, preshared_key=PSK, allowed_ips=A_NETS, endpoint=None)
        self.b.add_peer(
            keys.public_from_private(C_PRIV), allowed_ips=["10.3.0.0/24"], endpoint=("203.0.113.3", 4000)
        )
        self.dev = {"A": self.a, "B": self.b}
        self.addr = {"A": A_ADDR, "B": B_ADDR}
        self.sent = {"A": Counter(), "B": Counter()}
        self.delivered = {"A": Counter(), "B": Counter()}
        self.wire = []  # (from, to, datagram): everything the devices emitted
        # handshake + data both ways (key confirmation)
        self.send("A", [ipv4("10.0.0.1", "10.0.0.2", b"hello")])
        self.send("B", [ipv4("10.0.0.2", "10.0.0.1", b"hi")])
        check(self.a.has_session(self.a.peers[self.b.public_key]), "world: no session on A")
        check(self.b.has_session(self.b.peers[self.a.public_key]), "world: no session on B")
        # A's second initiation, kept back
        self.clock.now += TIMERS.rekey_timeout + 0.5
        out = Output()
        peer = self.a.peers[self.b.public_key]
        self.a.handshakes.initiate(peer, self.a.table.clock(self.clock.now), out)
        check(len(out.datagrams) == 1, "world: no second initiation")
        self.init2 = out.datagrams[0][0]
        self.wire.clear()

    # -- moving datagrams

    def force_load(self, on) -> None:
        """B under load from now on (True: one waiting message is a deep
        queue), else only when its queue is deep (False/None; a load that
        began lasts its second).  The load state is the session table's."""
        t = self.b.table
        depth = 1 if on else self.b.config.under_load_queue_depth
        t.configure(dataclasses.replace(t.config, under_load_depth=depth))

    def _check_output(self, side: str, out) -> None:
        check(isinstance(out, Output), f"{side}: receive returned {type(out).__name__}")
        # an exception inside the Device is counted, never raised: for the
        # fuzzer it is a finding
        check(self.dev[side].counters.drops["internal_error"] == 0, f"{side}: internal error")
        peer_nets = [ipaddress.ip_network(n) for n in (A_NETS if side == "B" else B_NETS[:2])]
        other = "A" if side == "B" else "B"
        for data, _addr in out.datagrams:
            check(isinstance(data, bytes), f"{side}: emitted a non-bytes datagram")
            t = M.message_type(data)
            want = {
                M.MSG_INITIATION: M.INITIATION_LEN,
                M.MSG_RESPONSE: M.RESPONSE_LEN,
                M.MSG_COOKIE_REPLY: M.COOKIE_REPLY_LEN,
            }.get(t)
            check(t != 0, f"{side}: emitted a datagram of unknown type {data[:4].hex()}")
            if want is not None:
                check(len(data) == want, f"{side}: emitted type {t} of length {len(data)}")
            else:
                check(
                    len(data) >= M.TRANSPORT_MIN_LEN and len(data) % 16 == 0,
                    f"{side}: emitted a transport message of length {len(data)}",
                )
        for pkt in out.packets:
            check(isinstance(pkt, bytes) and len(pkt) >= 20, f"{side}: delivered a short packet")
            v = pkt[0] >> 4
            src = ipaddress.IPv4Address(pkt[12:16]) if v == 4 else ipaddress.IPv6Address(pkt[8:24])
            check(
                any(src in n for n in peer_nets),
                f"{side}: delivered a packet from {src}, outside the peer's AllowedIPs",
            )
            self.delivered[side][pkt] += 1
            allowed = self.sent[other][pkt] + SEED_PACKETS[other].count(pkt)
            check(
                self.delivered[side][pkt] <= allowed,
                f"{side}: delivered a packet {self.delivered[side][pkt]} times that "
                f"{other} sent {allowed} times: {pkt[:40].hex()}",
            )

    def receive(self, side: str, items) -> Output:
        dev = self.dev[side]
        out = dev.receive_datagrams(items, self.clock.now)
        self._check_output(side, out)
        return out

    def relay(self, side: str, out: Output) -> None:
        """Deliver what `side` emitted to the other device (when addressed to
        it), and so on until quiet or MAX_RELAY_HOPS."""
        queue = [(side, d, dst) for d, dst in out.datagrams]
        hops = 0
        while queue and hops < MAX_RELAY_HOPS:
            hops += 1
            src, data, dst = queue.pop(0)
            self.wire.append((src, dst, data))
            to = "B" if dst == B_ADDR else "A" if dst == A_ADDR else None
            if to is None or to == src:
                continue
            o = self.receive(to, [(data, self.addr[src])])
            queue.extend((to, d, x) for d, x in o.datagrams)

    def send(self, side: str, pkts) -> None:
        for p in pkts:
            self.sent[side][as_delivered(bytes(p))] += 1
        out = self.dev[side].send_packets(pkts, self.clock.now)
        self._check_output(side, out)
        self.relay(side, out)

    def timers(self) -> None:
        for side in ("A", "B"):
            out = self.dev[side].handle_timers(self.clock.now)
            self._check_output(side, out)
            self.relay(side, out)
            nd = self.dev[side].next_deadline()
            check(nd is None or isinstance(nd, float), f"{side}: next_deadline {nd!r}")


def check_parsers(data: bytes) -> None:
    """Every parser either returns a message that packs back to `data` or
    raises MalformedMessage; message_type never raises."""
    t = M.message_type(data)
    check(t in (0, 1, 2, 3, 4), f"message_type returned {t}")
    for name in ("initiation", "response", "cookie_reply", "transport"):
        parse = getattr(M, "parse_" + name)
        try:
            msg = parse(data)
        except M.MalformedMessage:
            continue
        if name == "initiation":
            again = (
                M.pack_initiation_body(msg.sender, msg.ephemeral, msg.static, msg.timestamp)
                + msg.mac1
                + msg.mac2
            )
        elif name == "response":
            again = (
                M.pack_response_body(msg.sender, msg.receiver, msg.ephemeral, msg.empty) + msg.mac1 + msg.mac2
            )
        elif name == "cookie_reply":
            again = M.pack_cookie_reply(msg.receiver, msg.nonce, msg.cookie)
        else:
            receiver, counter, sealed = msg
            again = M.pack_transport_header(receiver, counter) + sealed
        check(again == data, f"parse_{name} does not round-trip")
        check(
            t == {"initiation": 1, "response": 2, "cookie_reply": 3, "transport": 4}[name],
            f"parse_{name} accepted a message of type {t}",
        )


class Reader:
    """Pulls fields out of the fuzz input; past the end everything is empty/zero."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def more(self) -> bool:
        return self.pos < len(self.data)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def u16(self) -> int:
        return self.byte() | (self.byte() << 8)

    def blob(self) -> bytes:
        n = self.u16()
        b = self.data[self.pos : self.pos + n]
        self.pos += len(b)
        return b


# Datagram-input format (what make_corpus.py writes):
#   byte 0  flags: bit0 pynacl backend (else native); bit1 relay what the devices
#           emit to each other; bit2 B starts under load
#   then up to MAX_OPS records, each an op byte and its operands:
#     0  blob         datagram to B from A's address
#     1  blob         datagram to A from B's address
#     2  u16 blob     datagram to B from 203.0.113.7:<u16> (spoofed / roaming)
#     3  n blob*n     one receive_datagrams batch of n (<= 16) datagrams to B, from A
#     4  t            advance the clock (t < 200: t/20 s; else (t-200)*5 s), run timers
#     5  s            B under load: s % 3 == 1 on, else off (unless its queue is deep)
#     6  k blob       A sends a packet: k odd -> blob as a raw packet; even -> an IPv4
#                     (k%4==0) or IPv6 packet to B with blob as payload
#     7  k blob       the same from B to A
#   a blob is a little-endian u16 length and that many bytes (cut at the end).
OP_TO_B, OP_TO_A, OP_SPOOF, OP_BATCH, OP_CLOCK, OP_LOAD, OP_SEND_A, OP_SEND_B = range(8)


def _make_packet(side: str, k: int, payload: bytes) -> bytes:
    if k & 1:
        return payload
    if side == "A":
        return ipv4("10.0.0.1", "10.0.0.2", payload) if k % 4 == 0 else ipv6("fd00::1", "fd00::2", payload)
    return ipv4("10.0.0.2", "10.0.0.1", payload) if k % 4 == 0 else ipv6("fd00::2", "fd00::1", payload)


def datagram_target(data: bytes) -> None:
    r = Reader(data)
    flags = r.byte()
    w = World("pynacl" if flags & 1 else "native")
    relay = bool(flags & 2)
    if flags & 4:
        w.force_load(True)
    for _ in range(MAX_OPS):
        if not r.more():
            break
        op = r.byte() & 7
        if op in (OP_TO_B, OP_TO_A, OP_SPOOF):
            side = "A" if op == OP_TO_A else "B"
            src = w.addr["B" if side == "A" else "A"]
            if op == OP_SPOOF:
                src = ("203.0.113.7", r.u16())
            d = r.blob()
            check_parsers(d)
            out = w.receive(side, [(d, src)])
            if relay:
                w.relay(side, out)
        elif op == OP_BATCH:
            n = r.byte() % 17
            items = []
            for _ in range(n):
                d = r.blob()
                check_parsers(d)
                items.append((d, A_ADDR))
            out = w.receive("B", items)
            if relay:
                w.relay("B", out)
        elif op == OP_CLOCK:
            t = r.byte()
            w.clock.now += t / 20.0 if t < 200 else (t - 200) * 5.0
            w.timers()
        elif op == OP_LOAD:
            w.force_load(r.byte() % 3 == 1)
        else:
            side = "A" if op == OP_SEND_A else "B"
            k = r.byte()
            w.send(side, [_make_packet(side, k, r.blob())])
    # the counters stay consistent: every drop reason is a non-negative count
    for dev in (w.a, w.b):
        for reason, n in dev.drops().items():
            check(isinstance(n, int) and n >= 0, f"drop counter {reason}={n!r}")


# ----------------------------------------------------------------------------
# UAPI


class _StubDaemon:
    """What DeviceControl needs of the daemon, without sockets or a TUN."""

    def __init__(self, device):
        self.device = device
        self.engine = None
        self.listen_port = 51820
        self.fwmark = 0
        self.v6 = True

    def changed(self):
        pass

    def endpoint_set(self, public_key, endpoint):
        pass

    def counters(self, peer_drops=True):
        from vpncrypt.daemon.counter_snapshot import CounterSnapshot

        return CounterSnapshot(drops=dict(self.device.drops(peers=peer_drops)))

    def rebind(self, port):
        self.listen_port = port

    def set_fwmark(self, fwmark):
        self.fwmark = fwmark


class _ExcRecorder(logging.Handler):
    """Records log records that carry an exception: handle_request logs an
    unexpected exception with log.exception (and answers EIO), which for a
    well-behaved control is a bug in the request path."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        if record.exc_info:
            self.records.append(record)


_uapi_log = logging.getLogger("vpncrypt.uapi")
_recorder = _ExcRecorder()
_loop = None


def _control():
    from vpncrypt.daemon.device_control import DeviceControl

    dev = Device(
        B_PRIV,
        rng=random.Random(5).randbytes,
        wallclock=lambda: 1_700_000_000.0,
        backend="native",
        protocol_config=TIMERS,
    )
    dev.add_peer(keys.public_from_private(A_PRIV), preshared_key=PSK, allowed_ips=A_NETS, endpoint=A_ADDR)
    return DeviceControl(_StubDaemon(dev))


def _check_reply(op_line: str, reply: bytes) -> None:
    check(isinstance(reply, bytes) and reply.endswith(b"\n\n"), f"reply not framed: {reply[-20:]!r}")
    lines = reply[:-2].decode("ascii").split("\n")
    check(lines[-1].startswith("errno="), f"reply does not end in errno: {lines[-1]!r}")
    code = int(lines[-1][6:])
    check(code <= 0, f"positive errno {code}")
    if code:
        check(len(lines) == 1, "an error reply carries other lines")
    for ln in lines[:-1]:
        k, sep, v = ln.partition("=")
        check(sep and k and "\n" not in v, f"bad reply line {ln!r}")
    if _recorder.records:
        rec = _recorder.records[0]
        _recorder.records.clear()
        raise Finding(
            f"UAPI {op_line[:30]!r}: unexpected exception answered as EIO: "
            f"{rec.exc_info[0].__name__}: {rec.exc_info[1]}"
        ) from rec.exc_info[1]
    check(code != -5, f"UAPI {op_line[:30]!r} answered EIO")


async def _serve_bytes(data: bytes, control) -> list:
    reader = asyncio.StreamReader(limit=1 << 16)
    reader.feed_data(data)
    reader.feed_eof()
    replies = []
    for _ in range(64):
        req = await uapi_framing.read_request(reader)
        if req is None:
            break
        op_line, body = req
        if op_line is None:
            check(isinstance(body, int) and body > 0, f"framing error {body!r}")
            break
        check(isinstance(op_line, str) and isinstance(body, str), "framing returned non-text")
        reply = uapi.handle_request(op_line, body, control)
        _check_reply(op_line, reply)
        replies.append(reply)
        if isinstance(body, uapi_framing.CutBody):
            check(reply != b"errno=0\n\n", f"a cut body was applied: {body[-60:]!r}")
            break  # the server hangs up: the rest of the request was never read
    return replies


def uapi_target(data: bytes) -> None:
    """byte 0 bit0: the rest is one set=1 body for parse_set (and then applied
    to a Device); else the rest is a byte stream of UAPI requests, as a client
    would write it to the socket."""
    if not data:
        return
    # the uapi logger's records go to the recorder only, for this call
    _recorder.records.clear()
    propagate = _uapi_log.propagate
    _uapi_log.addHandler(_recorder)
    _uapi_log.propagate = False
    try:
        _uapi_target(data)
    finally:
        _uapi_log.removeHandler(_recorder)
        _uapi_log.propagate = propagate


def _uapi_target(data: bytes) -> None:
    global _loop
    mode, rest = data[0], data[1:]
    control = _control()
    if mode & 1:
        text = rest.decode("latin-1")
        try:
            ops = uapi.parse_set(text)
        except uapi.UAPIError as e:
            check(e.errno > 0, f"UAPIError errno {e.errno}")
            return
        check(isinstance(ops, list), "parse_set returned a non-list")
        uapi.apply_operations(ops, control)
        reply = uapi.handle_request("get=1", "", control)
        _check_reply("get=1", reply)
        return
    if _loop is None:
        _loop = asyncio.new_event_loop()
        atexit.register(_loop.close)
    _loop.run_until_complete(_serve_bytes(rest, control))


# ----------------------------------------------------------------------------
# config

_LINE_RE = None


def config_target(data: bytes) -> None:
    """The input as UTF-8 text (undecodable bytes replaced); parse_config must
    return a Config or raise ConfigError naming the file and a line of it; an
    error about a PrivateKey/PresharedKey line must not echo its value, and a
    Config's repr never shows a secret."""
    import re

    global _LINE_RE
    if _LINE_RE is None:
        _LINE_RE = re.compile(r"^fuzz\.conf:(\d+): ")
    text = data.decode("utf-8", "replace")
    try:
        cfg = parse_config(text, "fuzz.conf")
    except ConfigError as e:
        msg = str(e)
        m = _LINE_RE.match(msg)
        check(m is not None, f"ConfigError without file:line: {msg!r}")
        # lines end at "\n" only, as the parser (and wg) count them
        n_lines = text.count("\n") + 1
        check(
            e.line == int(m.group(1)) and 1 <= e.line <= n_lines,
            f"ConfigError line {e.line} / {m.group(1)} outside 1..{n_lines}",
        )
        check(e.path == "fuzz.conf", f"ConfigError path {e.path!r}")
        # An error about a PrivateKey/PresharedKey line never shows its value:
        # the same text with a marker in place of the value must not echo it.
        lines = text.split("\n")
        key, sep, value = lines[e.line - 1].split("#", 1)[0].partition("=") if lines else ("", "", "")
        if sep and value.strip() and "".join(key.split()).lower() in ("privatekey", "presharedkey"):
            marker = "SECRET!MARKER!" + "!" * 30
            lines[e.line - 1] = key + "=" + marker
            try:
                parse_config("\n".join(lines), "fuzz.conf")
            except ConfigError as e2:
                check("SECRET!MARKER" not in str(e2), f"ConfigError echoes a secret key value: {e2}")
        return
    check(isinstance(cfg.peers, tuple), "peers is not a tuple")
    for p in cfg.peers:
        check(len(bytes(p.public_key)) == 32, "a peer key is not 32 bytes")
        if p.preshared_key is not None:
            check(
                "preshared" not in repr(p) or bytes(p.preshared_key).hex() not in repr(p),
                "PeerConfig repr shows the preshared key",
            )
    if cfg.interface.private_key is not None:
        r = repr(cfg)
        check(
            bytes(cfg.interface.private_key).hex() not in r
            and cfg.interface.private_key.to_base64() not in r,
            "Config repr shows the private key",
        )


TARGETS = {
    "datagram": datagram_target,
    "uapi": uapi_target,
    "config": config_target,
}
