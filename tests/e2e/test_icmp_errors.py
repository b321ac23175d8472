"""ICMP errors for packets the tunnel cannot carry, as the Linux module sends
them (drivers/net/wireguard/device.c, wg_xmit): a packet routed into the
interface that no peer's AllowedIPs cover, or whose peer has no endpoint,
is answered with "destination unreachable", host unreachable (IPv4) or
address unreachable (IPv6), so `ping` says so at once instead of waiting
out its timeout.  wireguard-go drops such packets in silence.

Two daemons in ns1 and ns2 (tests/e2e/topology.py routed_pair) without
endpoints: from ns1, 192.168.241.9 and fd00::9 are routed into wg1 (its
/24 and /112) and no peer has them; 192.168.241.2 and fd00::2 are the
peer's, which has no endpoint."""

import time

from tests.e2e.conftest import impls
from tests.e2e.netns import SOCKET_DIR
from tests.e2e.topology import routed_pair
from vpncrypt.daemon.uapiclient import get_device

NO_GO = "wireguard-go drops a packet without a peer or an endpoint in silence, where the module answers it"
# an ICMP destination unreachable (type 3, code 1, checksum 0xfcfe over the
# zero rest) quoting a UDP datagram's header: an error, which must never be answered
SEND_ERROR = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
quoted = bytes.fromhex("4500001c000040004011" + "0000" + "c0a8f109c0a8f101") + bytes(8)
msg = bytearray(b"\\x03\\x01\\x00\\x00\\x00\\x00\\x00\\x00" + quoted)
s_ = 0
for i in range(0, len(msg), 2):
    s_ += (msg[i] << 8) | msg[i + 1]
while s_ >> 16:
    s_ = (s_ & 0xFFFF) + (s_ >> 16)
msg[2:4] = (~s_ & 0xFFFF).to_bytes(2, "big")
s.sendto(bytes(msg), ("192.168.241.9", 0))
"""


def counters(dev) -> dict:
    got, ours = get_device(dev.iface, SOCKET_DIR)
    assert ours
    return got["counters"]


def wait_for(dev, key, value, timeout=20.0) -> dict:
    """The daemon's counters once `key` (a name, or a function of the
    counters) has reached `value` (an event to wait for, not a time to meet:
    the deadline only ends a test that would hang)."""
    get = key if callable(key) else lambda c: c.get(key, 0)
    deadline = time.monotonic() + timeout
    while True:
        c = counters(dev)
        if get(c) >= value or time.monotonic() > deadline:
            return c
        time.sleep(0.05)


def answered(c) -> int:
    return c.get("engine_icmp_errors_sent", 0) + c.get("engine_icmp_errors_limited", 0)


def unreachable(world, addr) -> str:
    """One ping to addr from ns1 (IPv6: ping -6), its output; it must fail."""
    r = world.run("1", "ping", "-c", "1", "-W", "5", addr, check=False, timeout=30)
    assert r.returncode != 0, r.stdout
    return r.stdout


# The kernel's own IPv6 multicast (router solicitations, MLD reports) has no
# peer either, and comes at moments of its own: kept out of the tunnel, so the
# drops counted are the test's packets alone.
NO_MULTICAST = """
table inet quiet {
    chain out {
        type filter hook output priority 0;
        oifname "wg*" ip6 daddr ff00::/8 drop
    }
}
"""


@impls(wireguard_go_bug=NO_GO)
def test_unreachable_without_peer_or_endpoint(world):
    world.nft("1", NO_MULTICAST)
    p = routed_pair(world)
    wg1 = p.dev[1]
    for addr in ("192.168.241.9", "192.168.241.2"):  # no peer; a peer without an endpoint
        out = unreachable(world, addr)
        assert "Destination Host Unreachable" in out, (addr, out, world.logs())
        assert "From 192.168.241." in out, out
    for addr in ("fd00::9", "fd00::2"):
        out = unreachable(world, addr)
        assert "Destination unreachable: Address unreachable" in out, (addr, out, world.logs())
        # from the interface's own address, as the module's: the sender's (fd00::1,
        # or the link-local one while fd00::1 is still tentative)
        assert "From fd00::1 " in out or "From fe80::" in out, out
    c = wait_for(wg1, answered, 4)
    assert c["engine_icmp_errors_sent"] == 4 and c["engine_icmp_errors_limited"] == 0, c
    assert c["drop_no_route"] == 2 and c["drop_no_endpoint"] == 2, c
    # an ICMP error routed into the tunnel is dropped, not answered; a ping
    # after it (answered: the 5th) shows the daemon has done with it
    world.run("1", "python3", "-c", SEND_ERROR)
    c = wait_for(wg1, "drop_no_route", 3)
    assert "Destination Host Unreachable" in unreachable(world, "192.168.241.9")
    c = wait_for(wg1, answered, 5)
    assert c["drop_no_route"] == 4, c
    assert c["engine_icmp_errors_sent"] == 5 and c["engine_icmp_errors_limited"] == 0, c
    world.assert_running()


@impls(wireguard_go_bug=NO_GO)
def test_rate_limited_per_sender(world):
    """A burst of 20 pings to an address no peer has: 6 errors (the kernel's
    per-destination burst) and one more for each second the burst took at
    most, the rest counted as limited; the daemon is fine."""
    world.nft("1", NO_MULTICAST)
    p = routed_pair(world)
    start = time.monotonic()
    r = world.run("1", "ping", "-c", "20", "-i", "0.002", "-W", "1", "192.168.241.9", check=False, timeout=60)
    took = time.monotonic() - start
    assert r.returncode != 0, r.stdout
    assert "Destination Host Unreachable" in r.stdout, (r.stdout, world.logs())
    c = wait_for(p.dev[1], answered, 20)
    sent, limited = c["engine_icmp_errors_sent"], c["engine_icmp_errors_limited"]
    assert sent + limited == 20 and 6 <= sent <= 6 + int(took) + 1, (c, took)
    world.assert_running()
