"""`vpncrypt show`'s output, plain and --json, byte for byte what it was
before it was made fast (issue 31: within 1.5x of `wg show` at 100,000
peers), and the answer read as it arrives parsed as a whole one is.

show_golden/ holds two get answers with 160 varied peers each (preshared
keys, all-zero ones, IPv4/IPv6/zoned endpoints or none, handshakes from
the future to two years ago with ties, transfers from 0 B to TiB,
keepalives, 0 to 4 allowed IPs, peers listed out of the usual order,
followed Endpoint names, counters and kernels; one as vpncrypt answers
get=vpncrypt, one as a foreign daemon answers get=1), and what the code of
f622b74 printed for them at NOW."""

import functools
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from vpncrypt.cli.show import format_show, show_json
from vpncrypt.daemon.uapiclient import UAPIProtocolError, parse_get, read_device

GOLDEN = os.path.join(os.path.dirname(__file__), "show_golden")
NOW = 1_800_000_000


def _golden(name: str) -> str:
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("kind, ours", [("vpncrypt", True), ("other", False)])
def test_plain_and_json_output_as_before(kind, ours):
    dev = parse_get(_golden(f"answer_{kind}.txt"))
    assert format_show("wg0", dev, now=NOW) + "\n" == _golden(f"show_{kind}.txt")
    got = json.dumps({"time": NOW, "interfaces": [show_json("wg0", dev, ours)]}) + "\n"
    assert got == _golden(f"show_{kind}.json")


@pytest.mark.parametrize("kind, ours", [("vpncrypt", True), ("other", False)])
def test_output_made_as_the_answer_arrives_is_the_same(kind, ours):
    """The peers made into text or JSON as they are read (vpncrypt show's
    way): the same bytes, the peers whose Endpoint name is followed (known
    at the answer's end) included."""
    from vpncrypt.cli import show

    data = _golden(f"answer_{kind}.txt").encode()
    for seed in range(3):
        early: dict = {}
        with _served_in_pieces(data, random.Random(seed)) as s:
            dev = read_device(s, "wg0.sock", functools.partial(show._format_early, early))
        assert early  # (peers with no handshake were made early)
        assert format_show("wg0", dev, now=NOW, early=early) + "\n" == _golden(f"show_{kind}.txt")
        made = show._JsonPeers()
        with _served_in_pieces(data, random.Random(seed)) as s:
            dev = read_device(s, "wg0.sock", made.add)
        assert sum(len(peers) for peers, _ in made.parts) == 160
        got = show._json_document(NOW, [show._interface_json("wg0", dev, ours, made)]) + "\n"
        assert got == _golden(f"show_{kind}.json")


def test_json_of_several_interfaces_put_together_as_json_dumps_does():
    """Interfaces' JSON made apart and put together: json.dumps()'s bytes,
    for a time with a fraction, and a daemon's value (a kernel's name)
    that is the text the peers are put in place of."""
    from vpncrypt.cli import show

    texts = [_golden("answer_vpncrypt.txt"), _golden("answer_other.txt")]
    texts[0] = texts[0].replace("vpncrypt_info_chacha=avx2", "vpncrypt_info_chacha=\0peers\0")
    made, whole = [], []
    for name, text, ours in zip(["wg0", "wg1"], texts, [True, False]):
        dev, peers = parse_get(text), show._JsonPeers()
        peers.add(dev["peers"][:70])
        peers.add(dev["peers"][70:])
        made.append(show._interface_json(name, dev, ours, peers))
        whole.append(show_json(name, dev, ours))
    now = 1_800_000_000.123456
    assert show._json_document(now, made) == json.dumps({"time": now, "interfaces": whole})
    assert show._json_document(now, []) == json.dumps({"time": now, "interfaces": []})


def _served_in_pieces(data: bytes, rng: random.Random) -> socket.socket:
    """One end of a socket pair; a thread writes `data` into the other in
    pieces of 1 byte to 100 KiB (a piece cut anywhere: in a line, in a
    UTF-8 character, between a peer's lines), then closes it.  It stops
    for a moment now and then, so that the reader finds nothing to read
    and parses what it has (and at other times, a backlog)."""
    ours, theirs = socket.socketpair()

    def write() -> None:
        with theirs:
            at = 0
            while at < len(data):
                n = rng.choice([1, 2, 7, 100, 4096, 65536, 100_000])
                theirs.sendall(data[at : at + n])
                at += n
                if rng.random() < 0.2:
                    time.sleep(0.002)

    threading.Thread(target=write, daemon=True).start()
    return ours


@pytest.mark.parametrize("kind", ["vpncrypt", "other"])
def test_an_answer_read_as_it_arrives_is_parsed_as_a_whole_one(kind):
    text = _golden(f"answer_{kind}.txt")
    # more than the step a part is parsed at (64 KiB), a name with a
    # character of three bytes in UTF-8, and a peer's line that is not UTF-8
    text = text.replace("peer3.example.net", "p\u20acer3.example.net")
    data = text.encode()
    body = data[: data.rindex(b"errno=")]
    data = body * 6 + b"listen_port=\xff\n" + data[len(body) :]
    want = parse_get(data.decode("utf-8", "replace"))
    assert len(want["peers"]) == 6 * 160
    rng = random.Random(31)
    for _ in range(8):
        with _served_in_pieces(data, rng) as s:
            assert read_device(s, "wg0.sock") == want


def test_a_peer_with_many_allowed_ips_read_as_it_arrives():
    """A peer of 40,000 allowed IPs (about 1 MB: past the 256 KiB a part is
    looked for in) between two others."""
    text = _golden("answer_vpncrypt.txt")
    first = text.index("public_key=")
    second = text.index("\npublic_key=", first) + 1
    many = "".join(f"allowed_ip=10.{i >> 8 & 255}.{i & 255}.0/24\n" for i in range(40_000))
    text = text[:second] + many + text[second:]
    want = parse_get(text)
    assert len(want["peers"][0]["allowed_ips"]) >= 40_000
    for seed in range(3):
        with _served_in_pieces(text.encode(), random.Random(seed)) as s:
            assert read_device(s, "wg0.sock") == want


def test_an_answer_cut_short_is_a_protocol_error_even_if_malformed():
    """Cut short, with a bad counter line in a part parsed before the cut:
    the answer is not whole, which is what is reported."""
    text = _golden("answer_vpncrypt.txt")
    cut = text.index("errno=")
    bad = text[:cut].replace("protocol_version=1\n", "protocol_version=1\nvpncrypt_x=y\n", 1)
    for data in (bad.encode() * 3, text[:cut].encode() * 3):
        with _served_in_pieces(data, random.Random(1)) as s, pytest.raises(UAPIProtocolError):
            read_device(s, "wg0.sock")
    with _served_in_pieces(bad.encode() * 3 + b"errno=0\n\n", random.Random(1)) as s:
        with pytest.raises(ValueError):
            read_device(s, "wg0.sock")


def test_an_error_answer_is_the_daemons_errno():
    with _served_in_pieces(b"errno=-22\n\n", random.Random(1)) as s, pytest.raises(OSError) as e:
        read_device(s, "wg0.sock")
    assert e.value.errno == 22


def test_show_imports_neither_the_server_nor_the_protocol():
    """`vpncrypt show` (plain, and the public key from a private key)
    imports the UAPI client alone: the server (daemon.uapi) pulls in the
    config parser and the protocol's Device, 0.5 s of every show."""
    code = (
        "import sys\n"
        "from vpncrypt.cli import build_parser\n"
        "from vpncrypt.cli.show import format_show, show_json\n"
        "from vpncrypt.daemon.uapiclient import parse_get\n"
        "build_parser(['show', 'wg0']).parse_args(['show', 'wg0'])\n"
        f"dev = parse_get({_golden('answer_vpncrypt.txt')!r})\n"
        "format_show('wg0', dev), show_json('wg0', dev, True)\n"
        "heavy = ('vpncrypt.daemon.uapi', 'vpncrypt.config', 'vpncrypt.protocol.device', 'asyncio')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[]\n"
