"""Every byte through the tunnel with the TUN offloads on and forced off:
TCP at the default MSS and at odd ones, UDP sent as UDP_SEGMENT
super-datagrams that end in a short segment, IPv4 and IPv6 inside; between
two vpncrypt daemons and against the current wireguard-go (with its TUN
offloads, and with TSO off on its interface)."""

import json
import sys

import pytest

V6 = {"A": "fd20::1", "B": "fd20::2"}


def _tunnel(lab, kind_a, kind_b, env=None):
    a, b = lab.node("A", kind_a), lab.node("B", kind_b)
    pa = {"public": b.public, "allowed": f"{b.inner}/32, {V6['B']}/128", "endpoint": f"{b.outer}:51820"}
    pb = {"public": a.public, "allowed": f"{a.inner}/32, {V6['A']}/128"}
    a.start(a.conf([pa]), env=env if kind_a == "vpncrypt" else None)
    b.start(b.conf([pb]), env=env if kind_b == "vpncrypt" else None)
    for n in (a, b):
        n.run("ip", "-6", "address", "add", f"{V6[n.side]}/64", "dev", n.iface, "nodad")
    a.ping(b)
    return a, b


def _stream(lab, src, dst, proto, n, seed, extra=0, v6=False):
    """n bytes (TCP, extra: the MSS) or n datagrams (UDP, extra: the GSO
    segment size) from src to dst, every byte checked at dst."""
    host = V6[dst.side] if v6 else dst.inner
    port = 7000 + seed
    args = [proto, host, str(port), str(n), str(seed)]
    if extra:
        args += ["--mss" if proto == "tcp" else "--gso", str(extra)]
    check = (sys.executable, "-m", "vpncrypt.bench.streamcheck")
    recv = lab.popen_in(dst.side, *check, "recv", *args)
    assert "listening" in recv.stdout.readline(), recv.stderr.read()
    lab.run_in(src.side, *check, "send", *args, timeout=120)
    out, err = recv.communicate(timeout=120)
    res = json.loads(out.strip().splitlines()[-1])
    assert res["ok"], (proto, host, extra, res, err)
    if proto == "tcp":
        assert res["checked"] == n and res["lost"] == 0, res
    return res


def _all_streams(lab, a, b):
    results = []
    for src, dst in ((a, b), (b, a)):
        results.append(_stream(lab, src, dst, "tcp", 6 << 20, 1))  # default MSS
        results.append(_stream(lab, src, dst, "tcp", 2 << 20, 2, extra=1187))  # odd MSS
        results.append(_stream(lab, src, dst, "tcp", 2 << 20, 3, extra=536, v6=True))
        results.append(_stream(lab, src, dst, "tcp", 4 << 20, 4, v6=True))
        for seed, gso, v6 in ((5, 1000, False), (6, 1301, True), (7, 0, False)):
            r = _stream(lab, src, dst, "udp", 3000, seed, extra=gso, v6=v6)
            assert r["lost"] <= 30, r  # paced: next to nothing lost on a veth
            assert r["reordered"] == 0, r  # one flow: the kernel without offloads keeps its order
            results.append(r)
    return results


def _path_drops(node):
    """Drops on the tunnel's path (no_route counts the interface's own IPv6
    multicast chatter, which has no peer)."""
    return {k: v for k, v in node.counters().items() if k.startswith("drop_") and v and k != "drop_no_route"}


def _offload_counters(node):
    return {k: v for k, v in node.counters().items() if k.startswith("tun_")}


def test_vpncrypt_both_ends_offloads_on(lab):
    a, b = _tunnel(lab, "vpncrypt", "vpncrypt")
    _all_streams(lab, a, b)
    ca, cb = _offload_counters(a), _offload_counters(b)
    # the kernel handed super-packets to read and took coalesced ones: the offloads ran
    assert ca["tun_rx_superpackets"] > 0 and cb["tun_rx_superpackets"] > 0, (ca, cb)
    assert ca["tun_tx_coalesced"] > 0 and cb["tun_tx_coalesced"] > 0, (ca, cb)
    assert _path_drops(a) == {} and _path_drops(b) == {}, (a.counters(), b.counters())


def test_vpncrypt_both_ends_offloads_forced_off(lab):
    a, b = _tunnel(lab, "vpncrypt", "vpncrypt", env={"VPNCRYPT_TUN_OFFLOADS": "off"})
    _all_streams(lab, a, b)
    ca = _offload_counters(a)
    assert ca["tun_rx_superpackets"] == 0 and ca["tun_tx_coalesced"] == 0, ca
    assert _path_drops(a) == {} and _path_drops(b) == {}


def test_vpncrypt_two_threads(lab):
    a, b = _tunnel(lab, "vpncrypt", "vpncrypt", env={"VPNCRYPT_THREADS": "2"})
    _all_streams(lab, a, b)
    assert _path_drops(a) == {} and _path_drops(b) == {}


@pytest.mark.parametrize("tso", ["on", "off"])
def test_against_current_wireguard_go(lab, tso):
    a, b = _tunnel(lab, "vpncrypt", "wggo-current")
    if tso == "off":  # wireguard-go's own TUN offloads off (as `ethtool -K IFACE tso off`)
        b.run(
            sys.executable,
            "-c",
            "import sys; from vpncrypt.dataplane.io import set_tso; set_tso(sys.argv[1], False)",
            b.iface,
        )
    _all_streams(lab, a, b)
    assert _path_drops(a) == {}, a.counters()
