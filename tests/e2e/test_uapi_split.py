"""Requests and replies that do not fit one message (WireGuard's test of
split netlink/UAPI replies), through `wg setconf` and `wg show`, on a daemon
in ns0; and `wg show` of an interface that does not exist."""

from tests.e2e.conftest import impls
from tests.e2e.netns import genkey


def setconf(world, dev, lines):
    path = world.keyfile("\n".join(lines))
    world.wg("setconf", dev.iface, path)


@impls()
def test_one_peer_with_130560_allowed_ips(world):
    dev = world.daemon("0")
    lines = ["[Interface]", f"PrivateKey={genkey()[0]}", "[Peer]", f"PublicKey={genkey()[1]}"]
    lines += [f"AllowedIPs={a}.{b}.0.0/16,{a:x}::{b:x}/128" for a in range(1, 256) for b in range(256)]
    setconf(world, dev, lines)
    words = world.wg("show", dev.iface, "allowed-ips").stdout.split()
    # the peer's key and 255 x 256 x 2 networks
    assert len(words) == 255 * 256 * 2 + 1
    assert len(set(words[1:])) == 255 * 256 * 2
    world.remove(dev)


@impls()
def test_forty_peers_with_52_networks_each(world):
    dev = world.daemon("0")
    lines = ["[Interface]", f"PrivateKey={genkey()[0]}"]
    peers = {}
    for a in range(1, 41):
        pub = genkey()[1]
        peers[pub] = {f"{a}.{b}.0.0/16" for b in range(1, 53)}
        lines += ["[Peer]", f"PublicKey={pub}"] + [f"AllowedIPs={n}" for n in sorted(peers[pub])]
    setconf(world, dev, lines)
    rows = world.wg("show", dev.iface, "allowed-ips").stdout.splitlines()
    assert len(rows) == 40
    got = {}
    for row in rows:
        words = row.split()
        assert len(words) == 53, row
        got[words[0]] = set(words[1:])
    assert got == peers
    world.remove(dev)


@impls()
def test_29_empty_peers_and_one_with_allowed_ips(world):
    dev = world.daemon("0")
    empty = [genkey()[1] for _ in range(29)]
    last = genkey()[1]
    lines = []
    for pub in empty:
        lines += ["[Peer]", f"PublicKey={pub}"]
    lines += ["[Peer]", f"PublicKey={last}", "AllowedIPs=255.2.3.4/32,abcd::255/128"]
    setconf(world, dev, lines)
    conf = world.wg("showconf", dev.iface).stdout
    assert conf.count("[Peer]") == 30
    rows = dict(r.split("\t") for r in world.wg("show", dev.iface, "allowed-ips").stdout.splitlines())
    assert rows == {**{p: "(none)" for p in empty}, last: "255.2.3.4/32 abcd::255/128"}
    world.remove(dev)


@impls()
def test_show_of_a_missing_interface_fails(world):
    r = world.wg("show", f"nx{world.id}", check=False)
    assert r.returncode != 0
    assert r.stdout == ""
