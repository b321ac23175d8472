"""A path whose MTU is smaller than the tunnel's packets need (issue 33, "2.
A smaller path MTU"): three namespaces of a `World`, A and B joined by a
router R whose link to B has MTU 1280, the tunnels at MTU 1420:

    ns1 (A)                       ns0 (R)                        ns2 (B)
    wgA: the implementation       forwards IPv4 and IPv6         wgB: the newest
         under test                                                   wireguard-go
    pa 10.1.0.1/24  ----- MTU 1500 ----- ra 10.1.0.254/24
       fd01::1/64                           fd01::fe/64
                                         rb 10.2.0.254/24 ----- MTU 1280 ----- pb 10.2.0.1/24
                                            fd02::fe/64                           fd02::1/64

    inside: wgA 192.168.241.1/24 fd00::1/112; wgB 192.168.241.2/24 fd00::2/112
            and the hosts 192.168.241.3 and fd00::3 (a second destination
            that no earlier packet has taught A's kernel a path MTU for)

Every inner address is a host (/32, /128) in the other side's AllowedIPs,
so a daemon probing its path with an in-tunnel ping to its peer's address
(RFC 8899 DPLPMTUD, confirmed by a stock peer's kernel) has one to use.

R's path behaviours (nft in R; this kernel has no netem):
  "fragments"     R forwards fragments, and sends ICMP "fragmentation needed"
                  / "packet too big" for what does not fit, as any router;
  "no-fragments"  as above, but no fragment ever leaves R (a netdev egress
                  hook on both links, after R's own fragmentation): a
                  firewall, NAT or load balancer that drops fragments;
  "black-hole"    fragments pass, but R's ICMP errors are filtered.  An IPv4
                  datagram without DF still crosses (R fragments it); an
                  IPv6 one over 1280 bytes is lost without a word (routers
                  never fragment IPv6).

`python -m tests.e2e.pathlab` runs every case for both implementations on
A (wireguard-go newest on B) and prints the table of RELIABILITY.md.
"""

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass

from tests.e2e.netns import World, need
from tests.e2e.topology import Pair, wait_up

A, R, B = "1", "0", "2"
PATH_MTU = 1280
OUTER = {
    "v4": {"a": "10.1.0.1/24", "ra": "10.1.0.254/24", "rb": "10.2.0.254/24", "b": "10.2.0.1/24"},
    "v6": {"a": "fd01::1/64", "ra": "fd01::fe/64", "rb": "fd02::fe/64", "b": "fd02::1/64"},
}
ENDPOINT = {"v4": "10.2.0.1:2", "v6": "[fd02::1]:2"}
# the second destination on B (see the module's docstring)
FRESH = {"v4": "192.168.241.3", "v6": "fd00::3"}
BEHAVIOURS = ("fragments", "no-fragments", "black-hole")

# A fragment is an IPv4 packet with MF or an offset, or an IPv6 packet with
# a fragment header (UDP fragmented by a host carries no other extension
# header before it).  The egress hook runs after the kernel fragments.
NO_FRAGMENTS = """
table netdev nofrag {
    chain ra { type filter hook egress device "ra" priority 0;
        ip frag-off & 0x3fff != 0 counter drop; ip6 nexthdr ipv6-frag counter drop; }
    chain rb { type filter hook egress device "rb" priority 0;
        ip frag-off & 0x3fff != 0 counter drop; ip6 nexthdr ipv6-frag counter drop; }
}
"""
# the errors a router sends when a packet does not fit
NO_ICMP = """
table inet noicmp {
    chain out { type filter hook output priority 0;
        icmp type destination-unreachable counter drop; icmpv6 type packet-too-big counter drop; }
}
"""
RULES = {"fragments": None, "no-fragments": NO_FRAGMENTS, "black-hole": NO_ICMP}


def _links(w):
    w.ip(A, "link", "add", "pa", "type", "veth", "peer", "name", "ra", "netns", w.n(R))
    w.ip(B, "link", "add", "pb", "type", "veth", "peer", "name", "rb", "netns", w.n(R))
    for k, dev in ((A, "pa"), (R, "ra"), (R, "rb"), (B, "pb")):
        # no duplicate address detection: the v6 addresses are usable at once
        w.sysctl(k, f"net.ipv6.conf.{dev}.accept_dad", 0)
    for k, dev in ((R, "rb"), (B, "pb")):
        w.ip(k, "link", "set", dev, "mtu", str(PATH_MTU))
    links = ((A, "pa", "a"), (R, "ra", "ra"), (R, "rb", "rb"), (B, "pb", "b"))
    for fam in ("v4", "v6"):
        for k, dev, key in links:
            w.ip(k, "address", "add", OUTER[fam][key], "dev", dev, *(["nodad"] if fam == "v6" else []))
    for k, dev, _ in links:
        w.ip(k, "link", "set", dev, "up")
    for k, dev, _ in links:
        wait_up(w, k, dev)
    for fam in ("v4", "v6"):
        w.ip(A, "route", "add", "default", "via", OUTER[fam]["ra"].split("/")[0])
        w.ip(B, "route", "add", "default", "via", OUTER[fam]["rb"].split("/")[0])
    w.sysctl(R, "net.ipv4.ip_forward", 1)
    w.sysctl(R, "net.ipv6.conf.all.forwarding", 1)


def path_lab(w: World, outer: str, behaviour: str, peer_binary: str) -> Pair:
    """The lab above, R set to `behaviour`, the implementation under test
    (the World's) on A, `peer_binary` on B; A has B's endpoint over `outer`
    ("v4" or "v6"), and one small ping each way has made the handshake."""
    need("nft")
    _links(w)
    rules = RULES[behaviour]
    if rules:
        w.nft(R, rules)
    p = Pair(w)
    p.dev[1] = w.daemon(A)
    p.dev[2] = w.daemon(B, binary=peer_binary)
    p.configure()
    for d in p.dev.values():
        s = w.ip(d.ns, "link", "show", "dev", d.iface).stdout
        assert " mtu 1420 " in s, s
    wga, wgb = p.dev[1], p.dev[2]
    w.ip(B, "address", "add", f"{FRESH['v4']}/32", "dev", wgb.iface)
    w.ip(B, "address", "add", f"{FRESH['v6']}/128", "dev", wgb.iface, "nodad")
    hosts = "192.168.241.2/32,192.168.241.3/32,fd00::2/128,fd00::3/128"
    w.wg_set(wga, "peer", p.pub(2), "allowed-ips", hosts, "endpoint", ENDPOINT[outer])
    w.ping(A, "192.168.241.2")
    w.ping(B, "192.168.241.1")
    return p


@dataclass
class Transfer:
    size: int
    delivered: int  # bytes the receiver took in order
    seconds: float
    result: dict  # the stream checker's verdict ({} if it was stopped)

    @property
    def whole(self) -> bool:
        return bool(self.result.get("ok")) and self.result.get("checked") == self.size


PORT = 7300
CHECK = (sys.executable, "-m", "vpncrypt.bench.streamcheck")


def _received(w, port) -> int:
    """The in-order bytes B's end of the connection has taken
    (tcp_info's bytes_received), 0 while there is none."""
    out = w._run(["ss", "-N", w.n(B), "-tinH", "state", "established", f"( sport = :{port} )"]).stdout
    return sum(int(n) for n in re.findall(r"bytes_received:(\d+)", out))


# A transfer that has not taken in this much more within `stall` seconds is
# stalled.  A working tunnel carries megabytes a second even on a loaded
# 2-core machine (8 MiB in 0.4-2 s here: 16x this in 5 s at the slowest);
# wireguard-go through fragments trickles in bursts between retransmission
# timeouts (0.15 to 1.3 MB in 5 to 100 s), which is no progress.
PROGRESS = 256 << 10


def transfer(w, size: int, stall: float = 5.0, seed: int = 33, limit: float = 0) -> Transfer:
    """`size` bytes of TCP from A to B (192.168.241.2), every byte compared
    by the receiver (vpncrypt.bench.streamcheck).  Stopped once fewer than
    PROGRESS bytes have arrived in `stall` seconds: a path that drops the
    stream's segments fails within seconds instead of waiting out TCP's
    retries.  `limit`: stop after this many seconds anyway (0: never; the
    tests set none, a stall ends a failing run)."""
    need("ss")
    args = ["tcp", "192.168.241.2", str(PORT), str(size), str(seed), "--timeout", "600"]
    recv = w.popen(B, *CHECK, "recv", *args)
    assert "listening" in recv.stdout.readline(), recv.stderr.read()
    start = last = time.monotonic()
    send = w.popen(A, *CHECK, "send", *args)
    delivered = mark = 0
    while recv.poll() is None:
        now = time.monotonic()
        delivered = max(delivered, _received(w, PORT))
        if delivered >= mark + PROGRESS:
            mark, last = delivered, now
        if now - last > stall or (limit and now - start > limit):
            for proc in (recv, send):
                proc.kill()
                proc.wait(10)
            return Transfer(size, delivered, now - start, {})
        time.sleep(0.1)
    seconds = time.monotonic() - start
    out, err = recv.communicate(timeout=30)
    send.wait(30)
    lines = out.strip().splitlines()
    assert lines, f"the stream checker said nothing: {err}"
    result = json.loads(lines[-1])
    return Transfer(size, result["checked"], seconds, result)


def df_ping(w, addr: str, size: int) -> str:
    """One ping from A of `size` payload bytes with DF (-M do), its output
    and errors: what the sender is told."""
    r = w.run(A, "ping", "-c", "1", "-W", "3", "-M", "do", "-s", str(size), addr, check=False, timeout=30)
    return r.stdout + r.stderr


def told_mtu(out: str):
    """The MTU a DF ping was told: by an ICMP "fragmentation needed" / ICMPv6
    "packet too big" (ping's wording), or None."""
    m = re.search(r"Frag needed and DF set \(mtu = (\d+)\)|Packet too big: mtu=(\d+)", out)
    return int(m.group(1) or m.group(2)) if m else None


# ---- the table of RELIABILITY.md ----------------------------------------------
MiB = 1 << 20


def _measure(dut: str, peer: str, outer: str, behaviour: str, size: int, a) -> Transfer:
    w = World(dut)
    try:
        path_lab(w, outer, behaviour, peer)
        return transfer(w, size, stall=a.stall, limit=a.limit)
    finally:
        problems = w.close()
        assert not problems, problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.e2e.pathlab", description=__doc__.split("\n\n")[0])
    p.add_argument("--vpncrypt-go", default=None, help="vpncrypt-go to test (default: the venv's)")
    p.add_argument("--wireguard-go", default=os.environ.get("VPNCRYPT_WIREGUARD_GO_NEWEST"))
    p.add_argument("--mib", type=int, default=8)
    p.add_argument("--stall", type=float, default=5.0, help="stop a transfer stalled this long (s)")
    p.add_argument("--limit", type=float, default=0, help="stop any transfer after this long (s)")
    a = p.parse_args(argv)
    assert a.wireguard_go, "--wireguard-go or $VPNCRYPT_WIREGUARD_GO_NEWEST"
    if a.vpncrypt_go is None:
        from tests.installed import script

        a.vpncrypt_go = script("vpncrypt-go")
    size = a.mib * MiB
    duts = {"vpncrypt-go": a.vpncrypt_go, "wireguard-go": a.wireguard_go}
    print(f"| path (MTU {PATH_MTU}) | outer | " + " | ".join(f"{d} -> wireguard-go" for d in duts) + " |")
    print("|---|---|" + "---|" * len(duts))
    for behaviour in BEHAVIOURS:
        for outer in ("v4", "v6"):
            cells = []
            for binary in duts.values():
                t = _measure(binary, a.wireguard_go, outer, behaviour, size, a)
                if t.whole:
                    cells.append(f"{a.mib} MiB in {t.seconds:.1f} s")
                else:
                    cells.append(f"{t.delivered} B of {a.mib} MiB, stopped at {t.seconds:.1f} s")
            print(f"| {behaviour} | IPv{outer[1]} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
