"""SOCKS5 UDP ASSOCIATE (RFC 1928, 7) through the tunnel: datagrams to the
peer's UDP echo (port 7) by IPv4, IPv6 and name, each answer with the
header that names its source; what must be dropped gets no answer."""

import json
import secrets
import sys

from tests.proxy.conftest import SOCKS_PORT
from tests.proxy.lab import PEER_NAME


def associate(lab, cases, answers):
    """The answers to `cases`' datagrams ((frag, atyp, host, port, payload)),
    sorted (one that waits for a name's lookup may come after later ones)."""
    payload = json.dumps([[*case[:4], case[4].hex()] for case in cases])
    cmd = (sys.executable, "-m", "tests.proxy.udp_client", str(SOCKS_PORT), str(answers))
    return sorted(json.loads(lab.world.run("h", *cmd, input=payload, timeout=120).stdout))


def test_udp_round_trips(lab, proxy):
    data = [secrets.token_bytes(n) for n in (1, 1200, 1400)]
    cases = [
        (0, 1, "10.77.0.1", 7, data[0]),
        (0, 4, "fd77::1", 7, data[1]),
        (0, 3, PEER_NAME, 7, data[2]),  # resolved through the tunnel: its A record is the first
    ]
    want = [
        [1, "10.77.0.1", 7, data[0].hex()],
        [4, "fd77::1", 7, data[1].hex()],
        [1, "10.77.0.1", 7, data[2].hex()],
    ]
    assert associate(lab, cases, 3) == sorted(want), proxy.log()[-2000:]


def test_udp_dropped(lab, proxy):
    """A name that does not resolve, a target outside every AllowedIPs, port
    0, a fragment (FRAG 1, which the RFC lets a relay drop): no answer, so
    the one answer that comes is the echo of the last datagram."""
    ok = secrets.token_bytes(32)
    cases = [
        (0, 3, "nope.test", 7, b"x"),
        (0, 1, "192.0.2.1", 7, b"x"),
        (0, 1, "10.77.0.1", 0, b"x"),
        (1, 1, "10.77.0.1", 7, b"x"),
        (0, 1, "10.77.0.1", 7, ok),
    ]
    assert associate(lab, cases, 1) == [[1, "10.77.0.1", 7, ok.hex()]]
