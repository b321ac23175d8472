"""Run inside a fresh network namespace by test_tun_batch.py (as root).

Creates a TUN device, writes UDP packets (to a socket bound in the namespace)
and ICMP echo requests (to the tun's own address) with vc_tun_write_batch, and
reads the echo replies back with vc_tun_read_batch.  Prints "OK" at the end;
any failure raises."""

import select
import socket
import struct
import subprocess
import sys
import time

from vpncrypt.dataplane import TunBatch, open_tun

LOCAL, PEER = "10.77.0.1", "10.77.0.2"


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(proto: int, src: str, dst: str, body: bytes, ident: int) -> bytes:
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(body),
        ident,
        0x4000,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + body


def udp_packet(src, sport, dst, dport, data, ident):
    length = 8 + len(data)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 17, length)
    u = struct.pack("!HHHH", sport, dport, length, 0) + data
    c = csum(pseudo + u) or 0xFFFF
    u = u[:6] + struct.pack("!H", c) + u[8:]
    return ipv4(17, src, dst, u, ident)


def icmp_echo(src, dst, ident, seq, data):
    m = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + data
    m = m[:2] + struct.pack("!H", csum(m)) + m[4:]
    return ipv4(1, src, dst, m, seq)


def main():
    mtu = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    fd, name = open_tun("vctun0")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", LOCAL + "/24", "dev", name], check=True)
    subprocess.run(["ip", "link", "set", name, "mtu", str(mtu), "up"], check=True)
    tun = TunBatch(fd, mtu=mtu, batch=16)

    # nothing queued yet (IPv6 is off in the namespace): read returns 0, not an error
    assert tun.read()[0] == 0

    # 1. UDP packets written to the tun arrive at a socket bound in the namespace.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOCAL, 0))
    port = s.getsockname()[1]
    datas = [
        bytes((i + j) & 0xFF for j in range(n)) for i, n in enumerate([1, 100, 1000, mtu - 28, 0, 555] * 7)
    ]
    pkts = [udp_packet(PEER, 40000 + i, LOCAL, port, d, i) for i, d in enumerate(datas)]
    written, err = tun.write_packets(pkts)
    assert (written, err) == (len(pkts), 0), (written, err)
    s.settimeout(2)
    for i, d in enumerate(datas):
        m, src = s.recvfrom(65536)
        assert m == d and src == (PEER, 40000 + i), (i, len(m), src)

    # a malformed packet is dropped (EINVAL or silently) and the rest still goes
    written, err = tun.write_packets([b"\x45\x00", pkts[1]])
    assert written >= 1
    m, src = s.recvfrom(65536)
    assert m == datas[1]

    # 2. ICMP echo requests to the tun's address: the replies come back on the tun.
    n_req = 40
    reqs = [
        icmp_echo(PEER, LOCAL, 0x1234, seq, bytes([seq]) * (seq * 30 % (mtu - 28))) for seq in range(n_req)
    ]
    written, err = tun.write_packets(reqs)
    assert (written, err) == (n_req, 0)
    replies = {}
    deadline = time.monotonic() + 5
    batches = 0
    while len(replies) < n_req and time.monotonic() < deadline:
        select.select([fd], [], [], 0.5)
        n, view, off, ln = tun.read()
        assert 0 <= n <= tun.batch
        batches += n > 0
        for i in range(n):
            assert off[i] + ln[i] <= tun.slab_size and ln[i] <= mtu
            p = bytes(view[off[i] : off[i] + ln[i]])
            if p[0] >> 4 != 4 or p[9] != 1:
                continue
            ihl = (p[0] & 15) * 4
            assert csum(p[:ihl]) == 0
            icmp = p[ihl:]
            assert csum(icmp) == 0
            typ, code, _, ident, seq = struct.unpack("!BBHHH", icmp[:8])
            assert (typ, code, ident) == (0, 0, 0x1234)
            assert socket.inet_ntoa(p[12:16]) == LOCAL and socket.inet_ntoa(p[16:20]) == PEER
            replies[seq] = icmp[8:]
    assert sorted(replies) == list(range(n_req)), sorted(replies)
    for seq, data in replies.items():
        assert data == bytes([seq]) * (seq * 30 % (mtu - 28))
    assert batches < n_req  # several replies per read call
    print("OK", len(pkts), n_req, batches)


if __name__ == "__main__":
    main()
