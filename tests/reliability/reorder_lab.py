"""TCP through a reordering path (issue 31 item 7) between two tunnel ends in
namespaces A and B, vpncrypt and wireguard-go side by side, vpncrypt's TUN
offloads on and off.  The path: a relay that only reorders
(tests/reliability/relay.py: no loss, no duplicates, no delays, no damage;
per datagram, at the relay's Python speed: 100-200 Mbit/s here), or with
--tc, HTB and u32 on the veth (at the kernel's speed; see tc_reorder).

A benchmark, not a test (its figures need a quiet machine; the lab test
test_reorder_path.py checks the bytes):

    python -m tests.reliability.reorder_lab [--seconds 10] [--repeat 2]
        [--reorder 0.02 | --every N] [--depth 16 | --tc 16,200[,1]] [--configs vc-vc,...]

prints one JSON line per run: A sends to B for SECONDS (iperf3), and the
figures are the sender's TcpRetransSegs (nstat in A), the goodput, the
receiver's out-of-order queueings and the D-SACKs the sender got (each a
segment it resent for nothing).  The runs of one repeat alternate the
configurations, so that a load that comes and goes on the machine falls on
all of them.
"""

import argparse
import json
import sys
import time

from tests.interop.lab import PORT, REPO, Lab
from tests.reliability.relay import HostileRelay, Impairments

FAKE_B_PORT = 65000  # the relay's name for B's port (mapped to B's outer address)

# name -> (kind in A, kind in B, extra arguments of `vpncrypt up`)
CONFIGS = {
    "vc-vc": ("vpncrypt", "vpncrypt", ()),
    "vc-vc-off": ("vpncrypt", "vpncrypt", ("--tun-offloads", "off")),
    # the defaults from 4 cores up (vpncrypt.cli.up: default_threads, default_queues)
    "vc-vc-q2t2": ("vpncrypt", "vpncrypt", ("--queues", "2", "--threads", "2")),
    "vc-vc-q2t2-off": ("vpncrypt", "vpncrypt", ("--queues", "2", "--threads", "2", "--tun-offloads", "off")),
    "vc-wggo": ("vpncrypt", "wggo-current", ()),
    "vc-off-wggo": ("vpncrypt", "wggo-current", ("--tun-offloads", "off")),
    "wggo-vc-off": ("wggo-current", "vpncrypt", ("--tun-offloads", "off")),
    "wggo-vc": ("wggo-current", "vpncrypt", ()),
    "wggo-wggo": ("wggo-current", "wggo-current", ()),
}
NSTAT = ("TcpRetransSegs", "TcpExtTCPDSACKRecvSegs", "TcpExtTCPOFOQueue", "TcpExtTCPSACKReorder")


def reorder_only(rate: float, depth: int, every: int = 0) -> Impairments:
    """Each datagram held back, with probability rate, until 1..depth later
    ones have passed (50 ms at most), or with every: every every-th datagram
    until depth later ones have; nothing else done to any."""
    return Impairments(
        drop=0.0,
        duplicate=0.0,
        reorder=rate,
        reorder_depth=depth,
        reorder_every=every,
        delay=0.0,
        corrupt=0.0,
    )


class NamespaceRelay(HostileRelay):
    """HostileRelay with its process in namespace ns (relay_ns.py)."""

    cwd = REPO

    def __init__(self, imp, seed, ns, port_map):
        super().__init__(imp, seed)
        self.ns, self.port_map = ns, port_map

    def argv(self):
        return ["ip", "netns", "exec", self.ns, sys.executable, "-m", "tests.reliability.relay_ns"] + [
            json.dumps(self.port_map)
        ]


def tc_reorder(lab: Lab, every: int, rate_mbit: int, by_counter: bool = False) -> None:
    """A kernel-speed reordering path on the veth (no relay: this kernel has
    no netem): HTB with a class at the veth's speed and a slow one, and a u32
    filter that sends one data message in `every` (a power of 2) to the slow
    class, so each of those comes out after the ones sent just behind it.
    The filter looks at the first ciphertext byte (IPv4 + UDP headers, 28
    bytes, and the 16-byte data header: byte 44), random for each message;
    by_counter: at the counter's low byte (byte 36) instead, which picks the
    same place in every send of a sender whose sends have a period that is a
    multiple of `every` (a pattern, not a random path: kept to show how much
    that decides).  A UDP GSO send is one skb to tc: its datagrams go to a
    class together, as one."""
    slow = f"{rate_mbit}mbit"
    at = 36 if by_counter else 44
    for side in "AB":
        dev = lab.veth[side]
        for cmd in (
            f"qdisc add dev {dev} root handle 1: htb default 10",
            f"class add dev {dev} parent 1: classid 1:10 htb rate 20gbit",
            f"class add dev {dev} parent 1: classid 1:20 htb rate {slow} ceil {slow}",
            f"filter add dev {dev} parent 1: protocol ip u32 match u8 4 0xff at 28"
            f" match u8 0 {every - 1:#x} at {at} flowid 1:20",
        ):
            lab.run_in(side, "tc", *cmd.split())


def tunnel(lab: Lab, kinds, extra, imp, seed: int):
    """Nodes A and B (kinds), joined through a relay in A (imp: its
    impairments; None: straight over the veth); returns (a, b, relay or
    None) once a ping has crossed."""
    a, b = lab.node("A", kinds[0]), lab.node("B", kinds[1])
    for node, other, args in ((a, b, extra), (b, a, extra)):
        conf = node.conf([{"public": other.public, "inner": other.inner}])
        if node.kind == "vpncrypt":
            node.start_vpncrypt(conf, extra_args=args)
        else:
            node.start(conf)
    if imp is None:
        a.wg("set", a.iface, "peer", b.public, "endpoint", f"{b.outer}:{PORT}")
        a.ping(b)
        return a, b, None
    relay = NamespaceRelay(imp, seed, lab.ns["A"], {FAKE_B_PORT: [b.outer, PORT]})
    port_for_a, port_for_b = relay.start(PORT, FAKE_B_PORT)
    try:
        a.wg("set", a.iface, "peer", b.public, "endpoint", f"127.0.0.1:{port_for_a}")
        b.wg("set", b.iface, "peer", a.public, "endpoint", f"{a.outer}:{port_for_b}")
        deadline = time.monotonic() + 30
        while not a.ping(b, count=1, check=False):
            assert time.monotonic() < deadline, lab.logs()
    except BaseException:
        relay.stop()
        raise
    return a, b, relay


def nstat(lab: Lab, side: str) -> dict:
    r = lab.run_in(side, "nstat", "-az", "--json", *NSTAT)
    return json.loads(r.stdout)["kernel"]


def one_run(name: str, seconds: float, imp, seed: int, tc=None) -> dict:
    """One configuration: through the relay (imp), or through tc (every,
    rate_mbit) when imp is None."""
    kinds = CONFIGS[name][:2]
    lab = Lab()
    try:
        if tc:
            tc_reorder(lab, tc[0], tc[1], by_counter=tc[2:] == (1,))
        a, b, relay = tunnel(lab, kinds, CONFIGS[name][2], imp, seed)
        relay_stats = {"to_b": {"reordered": None, "forwarded": None}}
        try:
            srv = lab.popen_in("B", "iperf3", "-s", "-1", "-B", b.inner)
            time.sleep(0.5)
            a0, b0 = nstat(lab, "A"), nstat(lab, "B")
            r = lab.run_in("A", "iperf3", "-J", "-c", b.inner, "-t", str(seconds), timeout=seconds + 60)
            a1, b1 = nstat(lab, "A"), nstat(lab, "B")
            srv.wait(30)
        finally:
            if relay:
                relay_stats = relay.stop()
        end = json.loads(r.stdout)["end"]
        return {
            "config": name,
            "seconds": seconds,
            "goodput_mbit": round(end["sum_received"]["bits_per_second"] / 1e6, 1),
            "retrans_segs": a1["TcpRetransSegs"] - a0["TcpRetransSegs"],
            "dsack_segs_at_sender": a1["TcpExtTCPDSACKRecvSegs"] - a0["TcpExtTCPDSACKRecvSegs"],
            "sack_reorder_at_sender": a1["TcpExtTCPSACKReorder"] - a0["TcpExtTCPSACKReorder"],
            "ofo_queued_at_receiver": b1["TcpExtTCPOFOQueue"] - b0["TcpExtTCPOFOQueue"],
            "relay_reordered_to_b": relay_stats["to_b"]["reordered"],
            "relay_forwarded_to_b": relay_stats["to_b"]["forwarded"],
        }
    finally:
        lab.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--reorder", type=float, default=0.02)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--every", type=int, default=0, help="the relay reorders every EVERY-th datagram instead")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument(
        "--tc",
        metavar="EVERY,MBIT[,1]",
        help="reorder with tc on the veth instead of the relay: "
        "one data message in EVERY (a power of 2) through a class of MBIT Mbit/s, "
        "picked by a ciphertext byte (random), or with ,1 by the counter (a pattern)",
    )
    args = ap.parse_args(argv)
    names = args.configs.split(",")
    imp = None if args.tc else reorder_only(args.reorder, args.depth, args.every)
    tc = tuple(int(x) for x in args.tc.split(",")) if args.tc else None
    if tc and (len(tc) not in (2, 3) or tc[0] < 2 or tc[0] & (tc[0] - 1)):
        ap.error(f"--tc {args.tc}: EVERY (a power of 2 from 2 up),MBIT[,1]")
    for k in range(args.repeat):
        for name in names:
            row = one_run(name, args.seconds, imp, seed=k + 1, tc=tc)
            print(json.dumps({"repeat": k, "path": args.tc and f"tc {args.tc}", **row}), flush=True)


if __name__ == "__main__":
    main()
