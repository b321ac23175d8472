"""vpncrypt.userspace from a program run as nobody with no capability,
against the lab's wireguard-go peer: bytes both ways over TCP (a 3 MiB file
fetched, every byte compared), a server inside the tunnel that the peer
reaches, UDP round trips, names from the peer's DNS server only, IPv6, and
the errors asyncio's own calls raise."""

import errno
import filecmp
import os
import secrets
import socket

import pytest

from tests.userspace.conftest import Program


@pytest.fixture(scope="module")
def traffic(lab, conf):
    """One tunnel's whole session (program.py traffic): its JSON line."""
    out = lab.nobody_dir("traffic-out")
    program = Program(lab, "traffic", conf, out)
    result = program.line()
    program.finish()
    result["out"] = out
    return result


@pytest.mark.parametrize("key", ["v4", "v6", "name"])
def test_tcp_every_byte(lab, traffic, key):
    """GET /blob from 10.77.0.1, from [fd77::1] and from peer.test (a name
    only the peer's DNS server knows), through open_connection."""
    assert traffic[key] == "HTTP/1.0 200 OK"
    got = os.path.join(traffic["out"], key)
    assert os.path.getsize(got) == 3 << 20
    assert filecmp.cmp(got, lab.blob, shallow=False), "the bytes differ"


def test_udp_round_trips(traffic):
    """A connected endpoint (remote_addr, IPv4 and IPv6) and a bound one
    (local_addr the tunnel's address, sendto): 1200 random bytes echoed by
    the peer's UDP port 7, from the address sent to."""
    assert traffic["udp4"] == {"same": True, "from": ["10.77.0.1", 7]}
    assert traffic["udp6"] == {"same": True, "from": ["fd77::1", 7]}
    assert traffic["udp_local"] == {"same": True, "from": ["10.77.0.1", 7]}


def test_getaddrinfo_through_the_tunnel(traffic):
    """peer.test is known to the peer's DNS server only (10.77.0.1:53, the
    config's DNS): A and AAAA, as getaddrinfo's tuples; an unknown name is
    socket.gaierror, as asyncio's getaddrinfo raises."""
    assert traffic["gai"] == [
        [socket.AF_INET, ["10.77.0.1", 8000]],
        [socket.AF_INET6, ["fd77::1", 8000, 0, 0]],
    ]
    unknown = traffic["gai_unknown"]
    assert unknown["type"] == "gaierror" and unknown["errno"] == socket.EAI_NONAME
    assert "nowhere.test" in unknown["text"]


def test_connection_refused(traffic):
    """Port 1 on the peer: its stack's reset comes back as asyncio's ConnectionRefusedError."""
    refused = traffic["refused"]
    assert refused["type"] == "ConnectionRefusedError" and refused["errno"] == errno.ECONNREFUSED, refused


def test_outside_every_allowed_ips(traffic):
    """10.99.0.1 is in no peer's AllowedIPs: EHOSTUNREACH saying so, for TCP and UDP."""
    for key in ("outside", "outside_udp"):
        error = traffic[key]
        assert error["errno"] == errno.EHOSTUNREACH, error
        assert "10.99.0.1: outside every peer's AllowedIPs" in error["text"], error


def test_server_inside_the_tunnel(lab, server_conf):
    """start_server(cb, None, 0) listens in the tunnel: the peer connects to
    10.77.0.3 and gets its 200,000 bytes back reversed."""
    program = Program(lab, "server", server_conf)
    port = program.line()["port"]
    assert 0 < port < 65536
    data = secrets.token_bytes(200_000)
    client = (
        "import socket, sys\n"
        f"s = socket.create_connection(('10.77.0.3', {port}), timeout=30)\n"
        "s.sendall(sys.stdin.buffer.read()); s.shutdown(socket.SHUT_WR)\n"
        "got = b''\n"
        "while chunk := s.recv(65536): got += chunk\n"
        "sys.stdout.buffer.write(got)\n"
    )
    r = lab.at_peer(client, data)
    assert r.stdout == data[::-1], r.stderr
    assert program.line() == {"served": len(data)}
    program.tell("end")
    program.finish()


def test_tunnel_from_a_config_object(lab, conf):
    program = Program(lab, "object", conf)
    assert program.line() == {"gai": [["10.77.0.1", 80]]}
    program.finish()


def test_malformed_requests_are_einval(lab, traffic):
    """A request the tunnel's process cannot take (a name where an address
    belongs, an unknown operation) is answered EINVAL, and the tunnel serves on."""
    for key in ("bad_host", "bad_op"):
        assert traffic[key]["errno"] == errno.EINVAL, traffic[key]
    assert "an IP address expected" in traffic["bad_host"]["text"]
    assert traffic["after_bad"] == "HTTP/1.0 200 OK"


@pytest.mark.parametrize(
    "text, why",
    [
        ("Address = 10.77.0.9/33\n", ":2: [Interface] Address: "),
        ("ListenPort = 70000\n", ":2: [Interface] ListenPort: "),
    ],
)
def test_config_error_is_one_line_and_nothing_runs(lab, text, why):
    """open_tunnel raises OSError with the config error's text (FILE:LINE:
    [Section] Key: reason); the tunnel's process is gone when it returns."""
    good = lab.config(lab.add_peer("10.77.0.9"), "10.77.0.9", "")
    conf = lab.write_config("bad", good.replace("[Interface]\n", "[Interface]\n" + text, 1))
    program = Program(lab, "refused", conf)
    result = program.line()
    program.finish()
    assert result["children"] == []
    error = result["error"]
    assert error["type"] == "OSError" and error["errno"] == errno.EINVAL, error
    assert error["text"].startswith(f"[Errno 22] {conf}{why}"), error
