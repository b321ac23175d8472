"""Secrets: session keys are wiped when a session ends, in Python and in the
native table, and no key ever reaches an exception or a repr."""
import pathlib
import subprocess

from tests.protocol.helpers import A_ADDR, A_IP, B_IP, ipv4, make_pair
from vpncrypt.dataplane.fastpath import NativeFastPath
from vpncrypt.protocol import keys

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE.parent.parent / "native"


def test_native_table_wipes_keys(tmp_path):
    sources = [str(p) for p in sorted(NATIVE.glob("*.c")) if p.name != "wg_transport.c"]
    exe = tmp_path / "wipe_check"
    subprocess.run(["cc", "-O2", "-std=gnu11", f"-I{NATIVE}", str(HERE / "wipe_check.c"), *sources,
                    "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout


def test_retired_keypairs_are_overwritten(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [ipv4(A_IP, B_IP)])
    pa = a.peers[b.public_key]
    kp = pa.current
    send_key, recv_key = kp.send_key, kp.recv_key         # the bytearrays themselves
    assert any(send_key) and any(recv_key)
    a.remove_peer(b.public_key)
    assert not any(send_key) and not any(recv_key)
    assert not kp.alive


def test_fast_path_installs_keys_without_copies(crypto, clock):
    """The native table is fed from the keypair's own bytearrays, and the
    sessions leave it when the Device drops them."""
    a, b, net = make_pair(crypto, clock)
    fp = NativeFastPath(a, max_peers=4)
    net.send(A_ADDR, [ipv4(A_IP, B_IP)])
    fp.sync()
    from vpncrypt._native import lib
    assert lib.vc_wg_rx_count(fp.table) == 1
    a.remove_peer(b.public_key)
    fp.sync()
    assert lib.vc_wg_rx_count(fp.table) == 0


def test_no_key_in_reprs_or_errors(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [ipv4(A_IP, B_IP)])
    peer = a.peers[b.public_key]
    secrets = [a.private_key, bytes(peer.current.send_key), bytes(peer.current.recv_key)]
    texts = [repr(a), repr(peer), repr(peer.current), str(a.counters)]
    for bad in (lambda: a.add_peer(b"\x01" * 31), lambda: a.set_private_key(b"\x02" * 5)):
        try:
            bad()
        except Exception as e:  # noqa: BLE001 - any error text
            texts.append(str(e))
    for text in texts:
        for s in secrets:
            for form in (s.hex(), keys.encode(s), s.hex().upper()):
                assert form not in text
