"""The UDP ASSOCIATE relay's own checks, without a tunnel: the datagram
header (RFC 1928, 7) and the bound on datagrams waiting for a lookup."""

import asyncio

from vpncrypt.proxy.udp_associate import Association, parse_datagram


def test_parse_datagram():
    assert parse_datagram(bytes([0, 0, 0, 1, 10, 77, 0, 1, 0, 7]) + b"hi") == ("10.77.0.1", 7, b"hi")
    assert parse_datagram(bytes([0, 0, 0, 3, 1]) + b"a" + bytes([0, 53])) == ("a", 53, b"")
    assert parse_datagram(bytes([0, 0, 0, 4]) + bytes(15) + bytes([1, 0, 80])) == ("::1", 80, b"")
    dropped = [
        bytes([0, 0, 1, 1, 10, 77, 0, 1, 0, 7]),  # FRAG 1
        bytes([0, 1, 0, 1, 10, 77, 0, 1, 0, 7]),  # RSV not 0
        bytes([0, 0, 0, 1, 10, 77, 0, 1, 0]),  # cut short
        bytes([0, 0, 0, 3, 0, 0, 7]),  # an empty name
        bytes([0, 0, 0, 3, 5]) + b"ab" + bytes([0, 7]),  # a name longer than the datagram
        bytes([0, 0, 0, 2, 10, 77, 0, 1, 0, 7]),  # ATYP 2
        bytes([0, 0, 0, 3, 2]) + "é".encode() + bytes([0, 7]),  # not ASCII
    ]
    assert [parse_datagram(d) for d in dropped] == [None] * len(dropped)


class StuckDialer:
    """A dialer whose lookups never answer."""

    def routable(self, addr):
        return True

    async def resolve(self, host):
        await asyncio.Event().wait()


def test_datagrams_waiting_for_lookups_are_bounded():
    async def run():
        assoc = Association(StuckDialer(), ("127.0.0.1", 0))
        for i in range(300):
            assoc._from_client(
                bytes([0, 0, 0, 3, 6]) + f"n{i:03}.t".encode() + bytes([0, 7]), ("127.0.0.1", 5000)
            )
        waiting = len(assoc.pending)
        assoc._from_client(
            bytes([0, 0, 0, 3, 1]) + b"x" + bytes([0, 7]), ("127.0.0.2", 5000)
        )  # not the client
        assoc.close()
        return waiting

    assert asyncio.run(run()) == 256
