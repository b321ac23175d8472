"""The channel's messages (vpncrypt/userspace/channel.py): what the tunnel's
process takes, what it refuses, and the exceptions its answers become."""

import errno
import json
import socket

import pytest

from vpncrypt.userspace.channel import ProtocolError, decode, encode, error_of, parse_request


def request(**fields):
    return parse_request(decode(json.dumps({"id": 7, **fields}).encode()))


def test_requests_taken():
    assert request(op="connect", host="fd77::1", port=65535).host == "fd77::1"
    assert request(op="listen", host="", port=0).backlog == 100
    udp = request(op="udp", family=6, local=None, remote=["fd77::1", 7])
    assert (udp.family, udp.local, udp.remote) == (6, None, ("fd77::1", 7))
    assert request(op="resolve", host="a" * 253).host == "a" * 253


@pytest.mark.parametrize(
    "fields",
    [
        {"op": "connect", "host": "peer.test", "port": 80},  # names are resolved first
        {"op": "connect", "host": "10.0.0.1", "port": 65536},  # RFC 793: 16-bit ports
        {"op": "connect", "host": "10.0.0.1", "port": -1},
        {"op": "connect", "host": "10.0.0.1", "port": True},
        {"op": "connect", "host": "", "port": 80},  # only listen takes every address
        {"op": "listen", "host": "", "port": 80, "backlog": 0},
        {"op": "resolve", "host": "a" * 254},  # RFC 1035, 2.3.4: 253 at most
        {"op": "resolve", "host": ""},
        {"op": "udp", "family": 5},
        {"op": "udp", "family": 4, "remote": ["10.0.0.1"]},
        {"op": "mount"},
        {"op": "connect", "host": "10.0.0.1", "port": 80, "id": 0},  # id 0 is the start's answer
    ],
)
def test_requests_refused(fields):
    with pytest.raises(ProtocolError):
        request(**fields)


@pytest.mark.parametrize("data", [b"\xff", b"[1]", b'{"id": "7"}', b'{"id": 1.5}', b"{" + b" " * 4096 + b"}"])
def test_messages_refused(data):
    with pytest.raises(ProtocolError):
        decode(data)


def test_a_message_is_at_most_4096_bytes():
    assert len(encode({"id": 1, "host": "x" * 4000})) <= 4096
    with pytest.raises(OSError) as e:
        encode({"id": 1, "host": "x" * 4096})
    assert e.value.errno == errno.EMSGSIZE


def test_answers_as_asyncio_raises_them():
    refused = error_of({"id": 3, "errno": errno.ECONNREFUSED, "error": "Connect call failed"})
    assert isinstance(refused, ConnectionRefusedError) and refused.errno == 111
    unknown = error_of({"id": 3, "gai": socket.EAI_NONAME, "error": "x: no such name"})
    assert isinstance(unknown, socket.gaierror) and unknown.errno == socket.EAI_NONAME
    assert error_of({"id": 3, "addresses": []}) is None
