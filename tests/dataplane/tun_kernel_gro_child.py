"""Run inside a fresh network namespace by test_tun_kernel_gro_netns.py (as root).

The kernel's own GRO fed the arrivals of gro_reorder_cases.py: a TUN opened
with IFF_NAPI hands each write to napi_gro_receive, and with the device's
gro_flush_timeout set, the end of each NAPI poll flushes only what is older
than the current jiffy (napi_complete_done), so a sequence written at once is
coalesced as one poll would coalesce it.  A packet socket on the TUN sees what
GRO delivers: one skb per super-packet, whose first sequence number and
payload length give [first segment, segment count].

A jiffy boundary (4 ms at HZ=250) or the timer falling inside a sequence can
only flush earlier, that is split a super-packet, never merge more: each case
is written up to TRIES times (a new source port each time) and the run with
the fewest deliveries is reported.

Prints one JSON line: {"ipv4": {case: [[first, count], ...]}, "ipv6": {...}}.
"""

import json
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.dataplane.gro_reorder_cases import CASES, MSS, SEQ0, arrivals  # noqa: E402
from vpncrypt.dataplane.io import IFF_NO_PI, IFF_TUN, open_tun  # noqa: E402

IFF_NAPI = 0x0010  # include/uapi/linux/if_tun.h
ETH_P_ALL = 3
TRIES = 5
FLUSH_TIMEOUT_NS = 50_000_000  # the held super-packets' timer: 50 ms
PEER4, LOCAL4 = "10.97.1.2", "10.97.0.1"
PEER6, LOCAL6 = "fd97:1::2", "fd97::1"


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def setup():
    fd, name = open_tun("vckgro0", flags=IFF_TUN | IFF_NO_PI | IFF_NAPI)
    os.set_blocking(fd, True)
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "addr", "add", f"{LOCAL4}/24", "dev", name)
    sh("ip", "addr", "add", f"{LOCAL6}/64", "dev", name, "nodad")
    sh("ip", "link", "set", name, "mtu", "1500", "up")
    with open(f"/sys/class/net/{name}/gro_flush_timeout", "w") as f:
        f.write(str(FLUSH_TIMEOUT_NS))
    ps = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    ps.bind((name, 0))
    return fd, ps


def delivered(ps, v6, sport):
    """[first segment, count] of each skb of flow sport the stack received,
    until none has come for 0.2 s (four times the flush timer)."""
    ps.settimeout(0.2)
    out = []
    while True:
        try:
            data, addr = ps.recvfrom(1 << 17)
        except TimeoutError:
            return out
        if addr[2] == socket.PACKET_OUTGOING:
            continue  # the stack's answers (RSTs): not what GRO delivered
        l3 = 40 if v6 else 20
        if len(data) < l3 + 20 or (data[6] if v6 else data[9]) != 6:
            continue
        if struct.unpack("!H", data[l3 : l3 + 2])[0] != sport:
            continue
        seq = struct.unpack("!I", data[l3 + 4 : l3 + 8])[0]
        payload = len(data) - l3 - (data[l3 + 12] >> 4) * 4
        out.append([(seq - SEQ0) // MSS, -(-payload // MSS)])


def main():
    fd, ps = setup()
    result = {}
    sport = 41000
    for v6, fam in ((False, "ipv4"), (True, "ipv6")):
        addrs = (PEER6, LOCAL6) if v6 else (PEER4, LOCAL4)
        result[fam] = {}
        for case in sorted(CASES):
            best = None
            for _ in range(TRIES):
                sport += 1
                for p in arrivals(case, v6, addrs=addrs, sport=sport):
                    os.write(fd, p)
                got = delivered(ps, v6, sport)
                if best is None or len(got) < len(best):
                    best = got
            result[fam][case] = best
    print(json.dumps(result))


if __name__ == "__main__":
    main()
