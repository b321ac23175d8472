"""Writes the seed corpora in tests/fuzz/corpus/<target>/seed-* from the
project's own code: real handshake, cookie and transport messages from the
fuzz World (targets.py), real UAPI requests (captured from `wg` when it is
installed, plus requests built from the example configs) and real configs.
The C harnesses' seeds are written by the same run (aead: assorted inputs;
wg_open: batches of datagrams sealed the way fuzz_wg.c's table expects).

    python3 -m tests.fuzz.make_corpus        # rewrites seed-* (never crash-*)

The output is deterministic; the files are committed.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile

from tests.example_configs import KeyRing, example_text, filled_example
from tests.fuzz import targets as T
from tests.unix_server import UnixServer
from vpncrypt.config.parser import parse_config
from vpncrypt.protocol import Output

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
REPO = os.path.dirname(os.path.dirname(HERE))


def blob(b: bytes) -> bytes:
    return struct.pack("<H", len(b)) + b


def rec(op: int, *parts: bytes) -> bytes:
    return bytes([op]) + b"".join(parts)


# ---------------------------------------------------------------- datagram


def datagram_seeds() -> dict[str, bytes]:
    s: dict[str, bytes] = {}
    w = T.World()
    init2 = w.init2
    # B answers init2 with resp2 (at the World's time, as a fuzz run would)
    out = w.b.receive_datagrams([(init2, T.A_ADDR)], w.clock.now)
    resp2 = out.datagrams[0][0]
    # under load: B answers init2 with a cookie reply
    w = T.World()
    w.force_load(True)
    cookie = w.b.receive_datagrams([(init2, T.A_ADDR)], w.clock.now).datagrams[0][0]
    # transport data both ways on the established session, and a keepalive
    w = T.World()
    data_a = [d for d, _ in w.a.send_packets(T.SEED_PACKETS["A"], w.clock.now).datagrams]
    w = T.World()
    data_b = [d for d, _ in w.b.send_packets(T.SEED_PACKETS["B"], w.clock.now).datagrams]
    w = T.World()
    out = Output()
    w.a.datapath.keepalive(w.a.peers[w.b.public_key], out, persistent=False)
    w.a.datapath.seal_listed(out.sealing[0], w.a.table.clock(w.clock.now), out)
    keepalive = out.datagrams[0][0]
    # an initiation from the known-but-silent peer C, and one from a stranger
    from vpncrypt.protocol import Device, keys

    w = T.World()
    inits = {}
    for name, priv in (("c", T.C_PRIV), ("stranger", keys.clamp(random.Random(4).randbytes(32)))):
        d = Device(priv, rng=random.Random(21).randbytes, wallclock=w.clock.wall, protocol_config=T.TIMERS)
        d.add_peer(w.b.public_key, endpoint=T.B_ADDR, allowed_ips=["10.0.0.2/32"])
        o = Output()
        d.handshakes.initiate(d.peers[w.b.public_key], d.table.clock(w.clock.now), o)
        inits[name] = o.datagrams[0][0]

    to_b, to_a, spoof, batch, clock, load, send_a, send_b = range(8)
    s["init"] = bytes([0]) + rec(to_b, blob(init2))
    s["init-pynacl"] = bytes([1]) + rec(to_b, blob(init2))
    s["init-relay"] = bytes([2]) + rec(to_b, blob(init2)) + rec(send_a, b"\x00", blob(b"after"))
    s["resp"] = bytes([0]) + rec(to_a, blob(resp2))
    s["resp-then-data"] = bytes([2]) + rec(to_a, blob(resp2)) + rec(send_a, b"\x02", blob(b"v6"))
    s["cookie"] = bytes([0]) + rec(to_a, blob(cookie))
    s["under-load-relay"] = (
        bytes([6])
        + rec(to_b, blob(init2))
        + rec(clock, bytes([30]))
        + rec(clock, bytes([30]))
        + rec(send_a, b"\x00", blob(b"x"))
    )
    s["under-load-toggle"] = (
        bytes([2])
        + rec(load, b"\x01")
        + rec(to_b, blob(init2))
        + rec(load, b"\x00")
        + rec(clock, bytes([40]))
    )
    s["data-a"] = bytes([0]) + b"".join(rec(to_b, blob(d)) for d in data_a)
    s["data-a-batch"] = bytes([0]) + rec(batch, bytes([len(data_a)]), *(blob(d) for d in data_a))
    s["data-a-replayed"] = bytes([0]) + rec(
        batch, bytes([3]), blob(data_a[0]), blob(data_a[1]), blob(data_a[0])
    )
    s["data-b"] = bytes([0]) + b"".join(rec(to_a, blob(d)) for d in data_b)
    s["data-roaming"] = (
        bytes([2])
        + rec(spoof, struct.pack("<H", 4444), blob(data_a[0]))
        + rec(send_b, b"\x00", blob(b"to-roamed"))
    )
    s["keepalive"] = bytes([0]) + rec(to_b, blob(keepalive))
    s["init-c"] = bytes([0]) + rec(spoof, struct.pack("<H", 4000), blob(inits["c"]))
    s["init-stranger"] = bytes([0]) + rec(to_b, blob(inits["stranger"]))
    s["timers-expire"] = (
        bytes([2])
        + rec(clock, bytes([204]))
        + rec(send_a, b"\x00", blob(b"new"))
        + rec(clock, bytes([255]))
        + rec(clock, bytes([255]))
    )
    s["send-raw"] = (
        bytes([2])
        + rec(send_a, b"\x01", blob(T.ipv4("10.0.0.9", "10.0.0.2", b"x" * 12)))
        + rec(send_b, b"\x01", blob(T.ipv4("10.0.0.2", "10.0.0.1", b"x" * 12)[:30]))
    )
    s["mixed-batch"] = bytes([0]) + rec(
        batch,
        bytes([5]),
        blob(init2),
        blob(data_a[2]),
        blob(cookie),
        blob(b"\x04\x00\x00\x00"),
        blob(keepalive),
    )
    s["flood"] = (
        bytes([2]) + rec(batch, bytes([8]), *(blob(init2) for _ in range(8))) + rec(to_b, blob(init2))
    )
    return s


# ---------------------------------------------------------------- uapi

K = [hashlib.sha256(b"uapi-key-%d" % i).digest() for i in range(4)]


def _seed_keys() -> KeyRing:
    """The keys the example configs are filled with: the same every run."""
    counter = iter(range(1 << 30))
    return KeyRing(rng=lambda n: hashlib.sha256(b"example-key-%d" % next(counter)).digest()[:n])


def set_body_from_config(cfg) -> str:
    """What `wg setconf` sends for a config (numeric endpoints only)."""
    out = []
    if cfg.interface.private_key is not None:
        out.append(f"private_key={bytes(cfg.interface.private_key).hex()}")
    if cfg.interface.listen_port is not None:
        out.append(f"listen_port={cfg.interface.listen_port}")
    out.append(f"fwmark={cfg.interface.fwmark}")
    out.append("replace_peers=true")
    for p in cfg.peers:
        out.append(f"public_key={bytes(p.public_key).hex()}")
        if p.preshared_key is not None:
            out.append(f"preshared_key={bytes(p.preshared_key).hex()}")
        if p.endpoint is not None:
            out.append("endpoint=192.0.2.50:" + str(p.endpoint.port))
        out.append(f"persistent_keepalive_interval={p.persistent_keepalive}")
        out.append("replace_allowed_ips=true")
        out += [f"allowed_ip={n}" for n in p.allowed_ips]
    return "\n".join(out) + "\n"


def capture_wg_requests() -> dict[str, bytes]:
    """Run the real `wg` against a recording UAPI socket; {} without wg."""
    wg = shutil_which("wg")
    if wg is None or os.geteuid() != 0:
        return {}
    iface = f"vcfz{os.getpid() % 10000}"
    os.makedirs("/var/run/wireguard", exist_ok=True)
    path = f"/var/run/wireguard/{iface}.sock"
    if os.path.exists(path):
        os.unlink(path)
    got: list[bytes] = []

    def record(c: socket.socket) -> None:
        data = b""
        c.settimeout(2)
        while not data.endswith(b"\n\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        got.append(data)
        if data.startswith(b"get=1"):
            c.sendall(
                b"private_key=" + K[0].hex().encode() + b"\nlisten_port=51820\n"
                b"public_key=" + K[1].hex().encode() + b"\nprotocol_version=1\n"
                b"allowed_ip=10.0.0.2/32\nerrno=0\n\n"
            )
        else:
            c.sendall(b"errno=0\n\n")

    srv = UnixServer(path, record, backlog=4).serve()
    out: dict[str, bytes] = {}
    try:
        with tempfile.TemporaryDirectory() as td:
            conf = os.path.join(td, "c.conf")
            text = filled_example("client.conf.example", _seed_keys())
            text = text.replace("vpn.example.com", "192.0.2.50")
            with open(conf, "w") as f:
                f.write(text)
            os.chmod(conf, 0o600)
            server_conf = os.path.join(td, "wg0.conf")
            with open(server_conf, "w") as f:
                f.write(filled_example("wg0.conf.example", _seed_keys()))
            os.chmod(server_conf, 0o600)
            keyf = os.path.join(td, "k")
            with open(keyf, "w") as f:
                f.write(__import__("base64").b64encode(K[2]).decode() + "\n")
            pub = __import__("base64").b64encode(K[3]).decode()
            cmds = {
                "wg-setconf": [wg, "setconf", iface, conf],
                "wg-addconf": [wg, "addconf", iface, server_conf],
                "wg-set": [
                    wg,
                    "set",
                    iface,
                    "listen-port",
                    "4242",
                    "fwmark",
                    "0x10",
                    "private-key",
                    keyf,
                    "peer",
                    pub,
                    "endpoint",
                    "[2001:db8::1]:51820",
                    "persistent-keepalive",
                    "25",
                    "allowed-ips",
                    "10.1.0.0/16,fd00:1::/64",
                    "preshared-key",
                    keyf,
                ],
                "wg-set-remove": [wg, "set", iface, "peer", pub, "remove"],
                "wg-show": [wg, "show", iface, "dump"],
            }
            for name, cmd in cmds.items():
                n = len(got)
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
                if len(got) > n:
                    out[name] = b"".join(got[n:])
    finally:
        srv.close()
        os.unlink(path)
    return out


def shutil_which(name):
    import shutil

    return shutil.which(name)


def uapi_seeds() -> dict[str, bytes]:
    s: dict[str, bytes] = {}
    hexk = [k.hex() for k in K]
    bodies = {
        "set-full": (
            f"private_key={hexk[0]}\nlisten_port=51820\nfwmark=4660\nreplace_peers=true\n"
            f"public_key={hexk[1]}\npreshared_key={hexk[2]}\nendpoint=192.0.2.7:51820\n"
            f"persistent_keepalive_interval=25\nreplace_allowed_ips=true\n"
            f"allowed_ip=10.0.0.0/24\nallowed_ip=fd00::/64\nprotocol_version=1\n"
            f"public_key={hexk[3]}\nendpoint=[2001:db8::5]:1\nupdate_only=true\n"
            f"allowed_ip=0.0.0.0/0\n"
        ),
        "set-remove": f"public_key={hexk[1]}\nremove=true\n",
        "set-zero-key": f"private_key={'0' * 64}\nlisten_port=0\n",
        "set-bad": "bogus=1\n",
        "set-bad-port": "listen_port=99999\n",
    }
    for name in ("wg0.conf.example", "client.conf.example"):
        cfg = parse_config(filled_example(name, _seed_keys()), name)
        bodies["set-" + name.split(".")[0]] = set_body_from_config(cfg)
    for name, body in bodies.items():
        s["body-" + name] = b"\x01" + body.encode()
        s["stream-" + name] = b"\x00" + b"set=1\n" + body.encode() + b"\n"
    s["stream-get"] = b"\x00get=1\n\n"
    s["stream-get-vpncrypt"] = b"\x00get=vpncrypt\n\n"
    s["stream-session"] = (
        b"\x00\nset=1\n"
        + bodies["set-full"].encode()
        + b"\nget=1\n\n"
        + b"set=1\n"
        + bodies["set-remove"].encode()
        + b"\nget=vpncrypt\n\n"
    )
    s["stream-not-text"] = b"\x00set=1\n\xff\xfe\n\n"
    s["stream-get-args"] = b"\x00get=1\nx=1\n\n"
    s["stream-unknown-op"] = b"\x00frob=1\n\n"
    s["stream-eof-mid"] = b"\x00set=1\nlisten_port=1"
    for name, req in capture_wg_requests().items():
        s["stream-" + name] = b"\x00" + req
        if req.startswith(b"set=1\n"):
            s["body-" + name] = b"\x01" + req[6:]
    return s


# ---------------------------------------------------------------- config


def config_seeds() -> dict[str, bytes]:
    s: dict[str, bytes] = {}
    for name in sorted(os.listdir(os.path.join(REPO, "config"))):
        if name.endswith(".conf.example"):  # as shipped (placeholders), and filled in
            s[name.replace(".", "-")] = example_text(name).encode()
            s[name.replace(".", "-") + "-filled"] = filled_example(name, _seed_keys()).encode()
    import base64

    b = [base64.b64encode(k).decode() for k in K]
    s["minimal"] = f"[Interface]\nPrivateKey = {b[0]}\n".encode()
    s["everything"] = (
        f"[Interface]\nPrivateKey={b[0]}\nListenPort = 0\nFwMark = 0x1f\n"
        f"Address = 10.0.0.1/24, fd00::1/64\nAddress = 192.168.7.1\nMTU = 1280\n"
        f"DNS = 1.1.1.1, resolver.example\n\n[Peer]\nPublicKey = {b[1]}\n"
        f"PresharedKey = {b[2]}\nAllowedIPs = 10.0.0.2/32, ::/0\nAllowedIPs =\n"
        f"Endpoint = [fe80::1%eth0]:51820\nPersistentKeepalive = off\n"
        f"[ peer ]\npublickey = {b[3]}\nendpoint = host-1.example.:1\n"
        f"persistent keepalive = 65535\n"
    ).encode()
    s["errors"] = b"[Interface]\nListenPort = 70000\n"
    s["refused"] = b"[Interface]\nPostUp = iptables -A FORWARD\n"
    s["dup-peer"] = (f"[Peer]\nPublicKey = {b[1]}\n[Peer]\nPublicKey = {b[1]}\n").encode()
    s["own-key-peer"] = (
        f"[Interface]\nPrivateKey = {b[0]}\n[Peer]\nPublicKey = "
        + base64.b64encode(__import__('nacl.bindings', fromlist=['x']).crypto_scalarmult_base(K[0])).decode()
        + "\n"
    ).encode()
    return s


# ---------------------------------------------------------------- C harnesses


def aead_seeds() -> dict[str, bytes]:
    rnd = random.Random(7)
    s = {}
    for n in (0, 1, 15, 16, 63, 64, 65, 127, 255, 256, 257, 511, 512, 1000, 1420, 2049, 4100):
        s[f"len{n}"] = rnd.randbytes(96) + rnd.randbytes(n)
    for i in range(8):
        s[f"rand{i}"] = rnd.randbytes(rnd.randrange(96, 3000))
    return s


# fuzz_wg.c's keypair slots: (local index, key)
WG_SLOTS = [1, 2, 0x01000000, 0xFFFFFFFF, 7]


def wg_slot_key(s: int) -> bytes:
    return bytes((s * 37 + j * 11 + 1) & 0xFF for j in range(32))


def wg_open_seeds() -> dict[str, bytes]:
    """Inputs for fuzz_wg.c (see its header for the record format)."""
    from vpncrypt.crypto import seal

    def sealed(slot, ctr16, shift, kind, payload, flags=0):
        return (
            bytes([1 | flags, slot])
            + struct.pack("<H", ctr16)
            + bytes([shift, kind])
            + struct.pack("<H", len(payload))
            + payload
        )

    def raw(b):
        return b"\x00" + struct.pack("<H", len(b)) + b

    def real(slot, ctr, pkt):
        n = bytes(4) + ctr.to_bytes(8, "little")
        pkt = pkt + bytes(-len(pkt) % 16)
        return (
            b"\x04\x00\x00\x00"
            + WG_SLOTS[slot].to_bytes(4, "little")
            + ctr.to_bytes(8, "little")
            + seal(wg_slot_key(slot), n, pkt, b"")
        )

    s = {}
    s["v4"] = b"\x00" + sealed(0, 1, 0, 0, b"hello")
    s["v6"] = b"\x11" + sealed(0, 2, 0, 2, b"six")
    s["mixed"] = (
        b"\x22"
        + sealed(0, 1, 0, 0, b"a")
        + sealed(1, 1, 0, 8, b"b")
        + sealed(2, 1, 0, 12, b"c")
        + sealed(3, 5, 60, 0, b"d")
        + sealed(4, 1, 0, 0, b"expired")
        + sealed(0, 3, 0, 3, b"")
        + raw(b"\x01\x00\x00\x00" + bytes(144))
        + raw(b"")
    )
    s["replays"] = (
        b"\x21"
        + sealed(0, 9, 0, 0, b"x")
        + b"\x02\x00"
        + sealed(0, 8, 0, 0, b"y")
        + b"\x02\x01"
        + sealed(0, 9, 13, 0, b"far ahead")
        + sealed(0, 9, 0, 0, b"too old")
    )
    s["tampered"] = b"\x12" + sealed(1, 4, 0, 4, b"t" * 40, flags=4) + b"\x10\x00\x03"
    s["cut"] = b"\x00" + sealed(0, 1, 0, 0, b"z" * 30) + b"\x03\x00\x10\x00" + b"\x03\x00\x05\x00"
    s["bad-ip"] = (
        b"\x00"
        + sealed(0, 1, 0, 1 | (3 << 5), b"len")
        + sealed(0, 2, 0, 3, b"\x45" + bytes(10))
        + sealed(0, 3, 0, 0, b"nopad", flags=8)
    )
    s["real"] = (
        b"\x00"
        + raw(real(0, 0, bytes.fromhex("4500001c000000004011000a0000010a000001") + bytes(9)))
        + raw(real(2, 77, bytes.fromhex("45000014000000004011000ac0a80101c0a80102")))
    )
    s["unknown-index"] = b"\x00" + raw(b"\x04\x00\x00\x00\x09\x00\x00\x00" + bytes(40))
    return s


def write(target: str, seeds: dict[str, bytes]) -> None:
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.unlink(os.path.join(d, f))
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)


def main() -> int:
    write("datagram", datagram_seeds())
    write("uapi", uapi_seeds())
    write("config", config_seeds())
    write("aead", aead_seeds())
    write("wg_open", wg_open_seeds())
    for t in sorted(os.listdir(CORPUS)):
        print(t, len(os.listdir(os.path.join(CORPUS, t))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
