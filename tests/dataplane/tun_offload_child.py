"""Run inside a fresh network namespace by test_tun_offload_netns.py (as root).

    tun_offload_child.py FAMILY MODE MSS [READ_MTU]
        FAMILY 4 or 6; MODE on (vnet header, every offload), off (vnet header,
        offloads forced off), tso-off (every offload, then TSO switched off as
        `ethtool -K tso off` does) or plain (no vnet header); MSS for the TCP
        client; READ_MTU the largest packet TunBatch takes (default 1500, the
        link's MTU; above it, as the daemon's 65535, the link gets MTU 9000 and
        single UDP datagrams of up to 6000 bytes go through too).

A TUN reflects traffic back into the namespace: packets the kernel routes to
the virtual peers V1/V2 are read from the TUN (TunBatch: super-packets split),
their addresses are rewritten (to V1 -> from V2 to L, to V2 -> from V1 to L;
checksums recomputed by the independent Python model), and they are written
back (TunBatch: coalesced into super-packets).  So a TCP connection from L to
V1 is accepted by a listener on L, seeing the client as V2.  Through it: a TCP
stream each way (3 MiB and 1 MiB) and UDP datagrams sent with UDP_SEGMENT (the
kernel's own UDP GSO), every byte checked.  Prints one JSON line with the
counters; any failure raises.
"""

import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.dataplane import offload_ref as R  # noqa: E402
from tests.dataplane.offload_helpers import read_packets  # noqa: E402
from vpncrypt.dataplane.io import (
    OFFLOAD_ALL,
    TunBatch,
    get_tso,
    offload_names,  # noqa: E402
    open_tun,
    set_tso,
)

ADDR = {
    4: ("10.99.0.1", "10.99.1.1", "10.99.1.2", "10.99.0.1/24", "10.99.1.0/24"),
    6: ("fd99::1", "fd99:1::1", "fd99:1::2", "fd99::1/64", "fd99:1::/64"),
}
TCP_PORT, UDP_PORT = 5201, 5202
UP_BYTES, DOWN_BYTES = 3 << 20, 1 << 20
UDP_SIZE, UDP_BURSTS, UDP_PER_BURST = 1200, 40, 16
UDP_SEGMENT = 103
BIG_DATAGRAMS = 24  # 2504 to 5954 bytes of UDP payload


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def stream_bytes(n, seed):
    return random.Random(seed).randbytes(n)


def udp_datagram(seq):
    body = random.Random(seq).randbytes(UDP_SIZE - 4 if seq % 7 else 333)
    return struct.pack("!I", seq) + body


def exchange(sock, data):
    """Send data (then FIN) while receiving everything up to the peer's FIN."""
    sender = threading.Thread(target=lambda: (sock.sendall(data), sock.shutdown(socket.SHUT_WR)))
    sender.start()
    got = bytearray()
    while True:
        b = sock.recv(1 << 16)
        if not b:
            break
        got += b
    sender.join(30)
    return bytes(got)


class Reflector:
    def __init__(self, family, tun):
        self.family = family
        self.tun = tun
        fam = socket.AF_INET if family == 4 else socket.AF_INET6
        local, v1, v2 = (socket.inet_pton(fam, a) for a in ADDR[family][:3])
        self.local, self.swap = local, {v1: v2, v2: v1}
        self.reflected = self.ignored = 0

    def rewrite(self, pkt):
        v6 = self.family == 6
        if len(pkt) < (40 if v6 else 20) or pkt[0] >> 4 != self.family:
            return None
        src_at, alen = (8, 16) if v6 else (12, 4)
        dst = pkt[src_at + alen : src_at + 2 * alen]
        proto = pkt[6] if v6 else pkt[9]
        if dst not in self.swap or proto not in (R.TCP, R.UDP):
            return None
        out = bytearray(pkt)
        out[src_at : src_at + 2 * alen] = self.swap[dst] + self.local
        if not v6:
            out[10:12] = b"\0\0"
            out[10:12] = struct.pack("!H", R.checksum(bytes(out[:20])))
        return R.with_l4_csum(bytes(out))

    def pump(self, timeout=0.02):
        r, _, _ = select.select([self.tun.fd], [], [], timeout)
        if not r:
            return
        for _ in range(8):
            packets = read_packets(self.tun)
            if not packets:
                return
            out = []
            for p in packets:
                q = self.rewrite(p)
                if q is None:
                    self.ignored += 1
                else:
                    out.append(q)
            if out:
                written, err = self.tun.write_packets(out)
                assert written == len(out) and err == 0, (written, len(out), err)
                self.reflected += len(out)


def main():
    family, mode, mss = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    read_mtu = int(sys.argv[4]) if len(sys.argv) > 4 else 1500
    local, v1, _v2, local_cidr, virt = ADDR[family]
    fd, name = open_tun("vcoff0", vnet_hdr=mode != "plain")
    sh("ip", "link", "set", "lo", "up")
    extra = ["nodad"] if family == 6 else []
    sh("ip", "addr", "add", local_cidr, "dev", name, *extra)
    sh("ip", "link", "set", name, "mtu", "9000" if read_mtu > 1500 else "1500", "up")
    sh("ip", "route", "add", virt, "dev", name)
    tun = TunBatch(fd, mtu=read_mtu, batch=64, offloads=0 if mode == "off" else OFFLOAD_ALL)
    assert tun.vnet_hdr == (mode != "plain")
    if mode == "tso-off":
        assert get_tso(name)
        set_tso(name, False)
        assert not get_tso(name)
    if mode in ("on", "tso-off"):
        assert {"csum", "tso"} <= set(offload_names(tun.offloads)), tun.offloads
    else:
        assert tun.offloads == 0
    refl = Reflector(family, tun)
    fam = socket.AF_INET if family == 4 else socket.AF_INET6
    up, down = stream_bytes(UP_BYTES, 1), stream_bytes(DOWN_BYTES, 2)
    result, errors = {}, []

    def server():
        try:
            ls = socket.socket(fam, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((local, TCP_PORT))
            ls.listen(1)
            ls.settimeout(30)
            c, peer = ls.accept()
            c.settimeout(30)
            result["server_peer"] = peer[0]
            result["up"] = exchange(c, down)
            c.close()
            ls.close()
        except Exception as e:  # reported by the main thread
            errors.append(f"server: {e!r}")

    def client():
        try:
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
            s.settimeout(30)
            s.connect((v1, TCP_PORT))
            result["client_mss"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
            result["down"] = exchange(s, up)
            s.close()
        except Exception as e:
            errors.append(f"client: {e!r}")

    threads = [threading.Thread(target=server), threading.Thread(target=client)]
    threads[0].start()
    time.sleep(0.2)
    threads[1].start()
    deadline = time.monotonic() + 60
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        refl.pump()
    assert not any(t.is_alive() for t in threads), f"TCP did not finish: {errors}"
    assert not errors, errors
    assert result["up"] == up, f"upstream bytes differ: {len(result['up'])} of {len(up)}"
    assert result["down"] == down, f"downstream bytes differ: {len(result['down'])} of {len(down)}"
    assert socket.inet_pton(fam, result["server_peer"]) == refl.swap[socket.inet_pton(fam, v1)]
    tcp_rx = dict(ffi_stats(tun))

    # UDP: bursts sent with UDP_SEGMENT (one sendmsg, one GSO super-datagram)
    rs = socket.socket(fam, socket.SOCK_DGRAM)
    rs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rs.bind((local, UDP_PORT))
    rs.setblocking(False)
    ss = socket.socket(fam, socket.SOCK_DGRAM)
    ss.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, UDP_SIZE)
    seen = {}
    seq = 0
    for burst in range(UDP_BURSTS):
        grams = [udp_datagram(seq + i) for i in range(UDP_PER_BURST)]
        # all but the last of one UDP_SEGMENT send must be UDP_SIZE bytes
        full = [g for g in grams if len(g) == UDP_SIZE]
        short = [g for g in grams if len(g) != UDP_SIZE]
        for chunk in ([b"".join(full)] if full else []) + short:
            ss.sendto(chunk, (v1, UDP_PORT))
        seq += UDP_PER_BURST
        t_end = time.monotonic() + 5
        while len(seen) < seq and time.monotonic() < t_end:
            refl.pump(0.01)
            while True:
                try:
                    d, peer = rs.recvfrom(65536)
                except BlockingIOError:
                    break
                n = struct.unpack("!I", d[:4])[0]
                assert d == udp_datagram(n), f"datagram {n} corrupted"
                assert n not in seen, f"datagram {n} twice"
                seen[n] = peer[0]
    missing = sorted(set(range(seq)) - set(seen))
    assert not missing, f"{len(missing)} datagrams lost, first {missing[:5]}"
    big = 0
    if read_mtu > 1500:
        # single datagrams longer than the part of a read that lands in its
        # slot: each one read whole, not a super-packet
        plain = socket.socket(fam, socket.SOCK_DGRAM)
        for i in range(BIG_DATAGRAMS):
            d = struct.pack("!I", 1 << 31 | i) + random.Random(-1 - i).randbytes(2500 + 150 * i)
            plain.sendto(d, (v1, UDP_PORT))
            t_end = time.monotonic() + 5
            got = None
            while got is None and time.monotonic() < t_end:
                refl.pump(0.01)
                try:
                    got, _peer = rs.recvfrom(65536)
                except BlockingIOError:
                    pass
            assert got == d, f"big datagram {i}: {'lost' if got is None else 'corrupted'}"
            big += 1
    stats = {
        "mode": mode,
        "family": family,
        "offloads": offload_names(tun.offloads),
        "client_mss": result["client_mss"],
        "reflected": refl.reflected,
        "tcp_rx": tcp_rx,
        "rx": dict(ffi_stats(tun)),
        "tx": dict(tx_stats(tun)),
        "udp_datagrams": seq,
        "big_datagrams": big,
    }
    print(json.dumps(stats))


def ffi_stats(tun):
    st = tun.rx_stats
    if st is None:
        return {}
    return {
        k: getattr(st, k)
        for k in ("reads", "superpackets", "segments", "csum_completed", "dropped", "too_big")
    }


def tx_stats(tun):
    if not tun.vnet_hdr:
        return {}
    st = tun.tx_stats
    return {k: getattr(st, k) for k in ("packets", "writes", "coalesced", "bad_csum", "write_errors")}


if __name__ == "__main__":
    main()
