"""Roaming, the crypto-routing filter and a private-key change, in the moved
topology (tests/e2e/topology.py)."""

import secrets

import pytest

from tests.e2e.conftest import impls
from tests.e2e.netns import genkey
from tests.e2e.topology import moved_pair, udp_listen, udp_send


@impls()
@pytest.mark.parametrize("family", ["v4", "v6"])
def test_roaming(world, family):
    """wg1 moves (v4: ns0's loopback renumbered to 127.212.121.99 and listen
    port 9999; v6: from IPv4 outside to [::1] and listen port 9998): wg2
    follows to exactly the new endpoint on the first packet."""
    p = moved_pair(world)
    p.endpoints("127.0.0.1", "127.0.0.1")
    inner = "fd00::2" if family == "v4" else "192.168.241.2"
    world.ping("1", inner)
    if family == "v4":
        world.ip("0", "-4", "address", "del", "127.0.0.1/8", "dev", "lo")
        world.ip("0", "-4", "address", "add", "127.212.121.99/8", "dev", "lo")
        port, endpoint, expect = "9999", "127.0.0.1:2", "127.212.121.99:9999"
    else:
        port, endpoint, expect = "9998", "[::1]:2", "[::1]:9998"
    world.wg_set(p.dev[1], "listen-port", port)
    world.wg_set(p.dev[1], "peer", p.pub(2), "endpoint", endpoint)
    world.ping("1", inner)
    assert world.endpoints(p.dev[2]) == f"{p.pub(1)}\t{expect}"
    world.assert_running()


@impls()
def test_crypto_routing_filter(world):
    """wg1 takes 192.168.241.0/24 from wg2.  A second peer with the more
    specific 192.168.241.2/32 makes a packet from wg2 with that source
    address unacceptable (it is not wg2's any more): dropped, though it was
    authentic, so wg2's new endpoint (a new listen port) is still learnt."""
    p = moved_pair(world)
    p.endpoints("[::1]", "[::1]")
    world.wg_set(p.dev[1], "peer", p.pub(2), "allowed-ips", "192.168.241.0/24")
    probe = secrets.token_bytes(8)
    got = udp_listen(world, "1", 1111)
    udp_send(world, "2", "192.168.241.1", 1111, probe)
    assert got.result() == probe, f"the control datagram did not arrive\n{world.logs()}"

    more_specific = genkey()[1]
    world.wg_set(p.dev[1], "peer", more_specific, "allowed-ips", "192.168.241.2/32")
    world.wg_set(p.dev[2], "listen-port", "9997")
    got = udp_listen(world, "1", 1111)
    udp_send(world, "2", "192.168.241.1", 1111, probe)
    assert got.result() == b"", "a packet from an address routed to another peer was delivered"
    world.wg_set(p.dev[1], "peer", more_specific, "remove")
    assert world.endpoints(p.dev[1]) == f"{p.pub(2)}\t[::1]:9997"
    world.assert_running()


@impls()
def test_private_key_change_then_immediate_handshake(world):
    """wg1 takes a new private key; wg2 swaps the old public key for the new
    one: the very next ping (one try, 1 s) handshakes and gets through."""
    p = moved_pair(world)
    p.endpoints("127.0.0.1", "127.0.0.1")
    p.set_peer(1, "192.168.241.2/32", "127.0.0.1:2")
    p.set_peer(2, "192.168.241.1/32", listen_port=True)
    world.ping("1", "192.168.241.2")
    key3, pub3 = genkey()
    world.wg_set(p.dev[1], private=key3)
    world.wg_set(
        p.dev[2],
        "peer",
        pub3,
        "preshared-key",
        "PSK",
        "allowed-ips",
        "192.168.241.1/32",
        "peer",
        p.pub(1),
        "remove",
        psk=p.psk,
    )
    # one packet, 1 s: the handshake with the new key is the first thing
    # sent, not a retry after 5 s (REKEY_TIMEOUT)
    world.ping("1", "192.168.241.2", wait=1)
    world.assert_running()
