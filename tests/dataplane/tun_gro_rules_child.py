"""Run inside a fresh network namespace by test_tun_gro_rules_netns.py (as root).

    tun_gro_rules_child.py MODE
        MODE on (vnet header, every offload: the daemon's GRO merges what it
        writes) or off (vnet header, offloads forced off: every packet written
        alone, the control).

Batches of UDP datagrams from a virtual peer are written into a TUN with
TunBatch, as the daemon writes what it decrypted; the kernel delivers them to
UDP sockets of this namespace.  Each scenario has its own port; the datagrams
carry their index, so the order a socket receives them in is the order the
kernel's stack delivered them.  TUN writes are processed within write()
(tun_get_user -> netif_receive_skb), so after write_packets returns,
everything the stack accepts is queued on the sockets.

Prints one JSON line: per scenario the indices received in order, the
coalesced count of the writes, and the growth of Udp6InCsumErrors
(/proc/net/snmp6).  Any failure raises.
"""

import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.dataplane import gro_packets as G  # noqa: E402
from tests.dataplane import offload_ref as R  # noqa: E402
from vpncrypt.dataplane.io import OFFLOAD_ALL, TunBatch, offload_names, open_tun  # noqa: E402

LOCAL4, PEER4, CIDR4, VIRT4 = "10.98.0.1", "10.98.1.2", "10.98.0.1/24", "10.98.1.0/24"
LOCAL6, PEER6, CIDR6, VIRT6 = "fd98::1", "fd98:1::2", "fd98::1/64", "fd98:1::/64"
SPORT = 40001
UDP_NO_CHECK6_RX = 102  # include/uapi/linux/udp.h


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def snmp6(name):
    with open("/proc/net/snmp6") as f:
        for line in f:
            k, v = line.split()
            if k == name:
                return int(v)
    raise KeyError(name)


def scenarios():
    """name -> (family, builder(dport) -> packets, socket options)."""

    def d4(i, dport):
        return R.udp_packet(False, PEER4, LOCAL4, SPORT, dport, G.body(i), ip_kw={"ident": 100 + i})

    def d6(i, dport):
        return R.udp_packet(True, PEER6, LOCAL6, SPORT, dport, G.body(i))

    def ext(next_header):
        return lambda p: [d6(0, p), G.udp6_ext(PEER6, LOCAL6, SPORT, p, 1, next_header), d6(2, p), d6(3, p)]

    def frag(v6):
        d = d6 if v6 else d4
        src, dst = (PEER6, LOCAL6) if v6 else (PEER4, LOCAL4)

        def build(p):
            a, b = G.fragments(src, dst, SPORT, p, 1)
            return [d(0, p), a, d(2, p), b, d(3, p)]

        return build

    def zero4(p):
        return [
            R.udp_packet(False, PEER4, LOCAL4, SPORT, p, G.body(i), ip_kw={"ident": 100 + i}, no_csum=True)
            for i in range(4)
        ]

    def zero(p):
        return [G.udp6_zero_csum(PEER6, LOCAL6, SPORT, p, i) for i in range(4)] + [d6(4, p)]

    return {
        "merge4": (4, lambda p: [d4(i, p) for i in range(4)], {}),
        "merge6": (6, lambda p: [d6(i, p) for i in range(4)], {}),
        "dest-options6": (6, ext(G.DEST_OPTIONS), {}),
        "atomic-fragment6": (6, ext(G.FRAGMENT), {}),
        "fragments4": (4, frag(False), {}),
        "fragments6": (6, frag(True), {}),
        "zero-csum4": (4, zero4, {}),
        "zero-csum6": (6, zero, {}),
        "zero-csum6-no-check6-rx": (6, zero, {UDP_NO_CHECK6_RX: 1}),
    }


def main():
    mode = sys.argv[1]
    fd, name = open_tun("vcgro0", vnet_hdr=True)
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "addr", "add", CIDR4, "dev", name)
    sh("ip", "addr", "add", CIDR6, "dev", name, "nodad")
    sh("ip", "link", "set", name, "mtu", "1500", "up")
    sh("ip", "route", "add", VIRT4, "dev", name)
    sh("ip", "route", "add", VIRT6, "dev", name)
    tun = TunBatch(fd, mtu=1500, batch=64, offloads=OFFLOAD_ALL if mode == "on" else 0)
    assert tun.vnet_hdr
    out = {"mode": mode, "offloads": offload_names(tun.offloads), "scenarios": {}}
    for k, (sname, (family, build, opts)) in enumerate(sorted(scenarios().items())):
        port = 6000 + k
        fam = socket.AF_INET6 if family == 6 else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        for opt, val in opts.items():
            s.setsockopt(socket.IPPROTO_UDP, opt, val)
        s.bind((LOCAL6 if family == 6 else LOCAL4, port))
        s.setblocking(False)
        pkts = build(port)
        errors0, coalesced0 = snmp6("Udp6InCsumErrors"), tun.tx_stats.coalesced
        written, err = tun.write_packets(pkts)
        assert written == len(pkts) and err == 0, (sname, written, len(pkts), err)
        got = []
        while True:
            try:
                data = s.recv(65536)
            except BlockingIOError:
                break
            got.append(G.index_of(data))
            want = G.body(got[-1], len(data))
            if sname.startswith("zero-csum6") and got[-1] < 4:
                want = want[:-2] + data[-2:]  # its last two bytes make the sum 0
            assert data == want, f"{sname}: datagram {got[-1]} changed"
        s.close()
        out["scenarios"][sname] = {
            "received": got,
            "coalesced": tun.tx_stats.coalesced - coalesced0,
            "udp6_csum_errors": snmp6("Udp6InCsumErrors") - errors0,
        }
    os.close(fd)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
