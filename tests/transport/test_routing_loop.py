"""The seal refuses the device's own datagram routed back into the tunnel
(native/wg_loop.c and its reference): a packet read from the TUN that is UDP
from the listen port to the endpoint of the very peer AllowedIPs picks for it,
on both tables.  Anything else that merely looks like it is sealed."""

import pytest

from tests.packets import udp
from tests.transport.helpers import KEY_AB, KEY_BA, install, table_with_peer
from vpncrypt.transport import status as S

PORT = 51820


def looping_table(backend, endpoint, routes=("192.0.2.0/24", "2001:db8::/32")):
    """Peer A, whose AllowedIPs hold its own endpoint, with a session; the
    device's listen port 51820."""
    t, pid = table_with_peer(backend, routes=routes, endpoint=endpoint)
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    t.set_listen_port(PORT)
    return t, pid


@pytest.mark.parametrize(
    "endpoint, src, dst",
    [
        (("192.0.2.1", PORT), "192.0.2.77", "192.0.2.1"),
        (("2001:db8::1", PORT), "2001:db8::77", "2001:db8::1"),
        # a dual-stack socket's IPv4 peer, as the socket layer may name it
        (("::ffff:192.0.2.1", PORT), "192.0.2.77", "192.0.2.1"),
    ],
)
def test_own_datagram_to_the_peer_is_refused_and_counted(backend, endpoint, src, dst):
    t, pid = looping_table(backend, endpoint)
    own = udp(src, dst, PORT, PORT, b"\x04" + bytes(47))
    res = t.seal([own, own], 0.0)
    assert res.status == [S.ROUTING_LOOP, S.ROUTING_LOOP]
    assert res.datagrams == []
    assert t.stats(pid, 0.0).drops == {"routing_loop": 2}
    assert t.routing_loops == (2, pid)
    # a staged packet (the peer's own, sealed after a handshake) is refused too
    assert t.seal([own], 0.0, peer=pid).status == [S.ROUTING_LOOP]


def test_only_that_datagram(backend):
    t, pid = looping_table(backend, ("192.0.2.1", PORT))
    near = [
        udp("192.0.2.77", "192.0.2.1", PORT + 1, PORT, b"x"),  # another source port
        udp("192.0.2.77", "192.0.2.1", PORT, PORT + 1, b"x"),  # another destination port
        udp("192.0.2.77", "192.0.2.2", PORT, PORT, b"x"),  # another address of the peer's
    ]
    # a later fragment of our datagram: its bytes where the ports would be
    # are payload (offset 8 x 8 bytes, More Fragments clear)
    frag = bytearray(udp("192.0.2.77", "192.0.2.1", PORT, PORT, b"x" * 40))
    frag[6:8] = (8).to_bytes(2, "big")
    near.append(bytes(frag))
    res = t.seal(near, 0.0)
    assert res.status == [S.OK] * 4
    assert t.routing_loops == (0, -1)
    assert t.stats(pid, 0.0).drops == {}


def test_onion_routing_through_the_same_interface_is_carried(backend):
    """Peer B's endpoint lies inside A's AllowedIPs: our datagram to B goes
    out sealed for A, which is no loop (the Linux module carries it)."""
    t, a = looping_table(backend, ("192.0.2.1", PORT))
    b = t.add_peer()
    t.route_add(b, "198.51.100.0/24")
    t.set_endpoint(b, ("192.0.2.1", 7))
    to_b = udp("192.0.2.77", "192.0.2.1", PORT, 7, b"\x01" + bytes(147))
    res = t.seal([to_b], 0.0)
    assert res.status == [S.OK] and res.peers == [a]
    assert t.routing_loops == (0, -1)


def test_no_listen_port_no_check(backend):
    t, pid = table_with_peer(backend, routes=("192.0.2.0/24",), endpoint=("192.0.2.1", PORT))
    install(t, pid, 1, 9, KEY_AB, KEY_BA, True)
    own = udp("192.0.2.77", "192.0.2.1", PORT, PORT, b"x")
    assert t.seal([own], 0.0).status == [S.OK]
    t.set_listen_port(PORT)
    assert t.seal([own], 0.0).status == [S.ROUTING_LOOP]
    t.set_listen_port(0)
    assert t.seal([own], 0.0).status == [S.OK]
