"""Helpers for the protocol tests: a fake clock, a deterministic rng, IP
packet builders and an in-memory network of sans-I/O devices.  Every device
of a test runs on one backend: the crypto fixture's ("native" or "pynacl")."""

import random
import struct
from collections import defaultdict

from vpncrypt.protocol import Device
from vpncrypt.protocol import keys

A_ADDR = ("192.0.2.1", 51820)
B_ADDR = ("198.51.100.2", 51820)
A_IP = "10.0.0.1"
B_IP = "10.0.0.2"


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def wall(self):
        return 1_700_000_000.0 + self.now


def make_rng(seed):
    return random.Random(seed).randbytes


def ipv4(src, dst, payload=b"x" * 20):
    s = bytes(int(x) for x in src.split("."))
    d = bytes(int(x) for x in dst.split("."))
    return struct.pack(">BBHHHBBH", 0x45, 0, 20 + len(payload), 0, 0, 64, 17, 0) + s + d + payload


def ipv6(src, dst, payload=b"y" * 8):
    import ipaddress

    return (
        struct.pack(">IHBB", 6 << 28, len(payload), 17, 64)
        + ipaddress.IPv6Address(src).packed
        + ipaddress.IPv6Address(dst).packed
        + payload
    )


class Net:
    """Devices keyed by address; datagrams are delivered until quiet."""

    def __init__(self, clock):
        self.clock = clock
        self.devs = {}
        self.delivered = defaultdict(list)
        self.drop = None  # drop(src, dst, data) -> bool
        self.log = []  # (src, dst, data) of every datagram put on the wire

    def add(self, addr, dev):
        self.devs[addr] = dev

    def run(self, src, out):
        self.delivered[src].extend(out.packets)
        queue = [(src, d, dst) for d, dst in out.datagrams]
        hops = 0
        while queue:
            hops += 1
            assert hops < 100000
            s, data, dst = queue.pop(0)
            self.log.append((s, dst, data))
            if self.drop is not None and self.drop(s, dst, data):
                continue
            dev = self.devs.get(dst)
            if dev is None:
                continue
            o = dev.receive_datagram(data, s, self.clock.now)
            self.delivered[dst].extend(o.packets)
            queue.extend((dst, d, x) for d, x in o.datagrams)

    def send(self, addr, pkts):
        self.run(addr, self.devs[addr].send_packets(pkts, self.clock.now))

    def advance(self, to):
        """Move the clock to `to`, firing every device's timers on the way."""
        while True:
            due = [
                (d, a) for a, dev in self.devs.items() if (d := dev.next_deadline()) is not None and d <= to
            ]
            if not due:
                break
            d, _ = min(due)
            self.clock.now = max(self.clock.now, d)
            for a, dev in list(self.devs.items()):
                nd = dev.next_deadline()
                if nd is not None and nd <= self.clock.now:
                    self.run(a, dev.handle_timers(self.clock.now))
        self.clock.now = max(self.clock.now, to)

    def types(self, src=None):
        return [d[0] for s, _, d in self.log if src is None or s == src]


def make_device(crypto, clock, seed, protocol_config=None, **kw):
    """A Device on the backend of `crypto` (a vpncrypt.crypto backend)."""
    return Device(
        keys.clamp(make_rng(seed)(32)),
        rng=make_rng(seed + 10),
        wallclock=clock.wall,
        backend=crypto.name,
        protocol_config=protocol_config,
        **kw,
    )


def make_pair(crypto, clock, psk=None, protocol_config=None, a_endpoint_for_b=None, **kw):
    a = make_device(crypto, clock, 1, protocol_config, **kw)
    b = make_device(crypto, clock, 2, protocol_config, **kw)
    a.add_peer(b.public_key, preshared_key=psk, allowed_ips=[B_IP + "/32", "fd00::2/128"], endpoint=B_ADDR)
    b.add_peer(
        a.public_key, preshared_key=psk, allowed_ips=[A_IP + "/32", "fd00::1/128"], endpoint=a_endpoint_for_b
    )
    net = Net(clock)
    net.add(A_ADDR, a)
    net.add(B_ADDR, b)
    return a, b, net


def a2b(i=0, n=20):
    """An IPv4 packet from A's tunnel address to B's, of n payload bytes i."""
    return ipv4(A_IP, B_IP, bytes([i % 256]) * n)


def b2a(i=0, n=20):
    return ipv4(B_IP, A_IP, bytes([i % 256]) * n)


def established(crypto, clock, **kw):
    """make_pair() with a session: A's first packet delivered to B."""
    a, b, net = make_pair(crypto, clock, **kw)
    net.send(A_ADDR, [a2b(0)])
    assert net.delivered[B_ADDR] == [a2b(0)]
    return a, b, net


def drops(dev, reason):
    return dev.drops().get(reason, 0)


def session(dev, peer_dev, clock):
    """The KeypairInfo of dev's current keypair with peer_dev, or None."""
    return dev.peers[peer_dev.public_key].stats(dev.table.clock(clock.now)).current


def sessions(dev, peer_dev, clock):
    st = dev.peers[peer_dev.public_key].stats(dev.table.clock(clock.now))
    return st.current, st.previous, st.next


def no_internal_errors(*devs):
    return all(d.counters.drops["internal_error"] == 0 for d in devs)
