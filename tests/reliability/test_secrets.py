"""Secrets: session keys are wiped when a session ends, in both session
tables, and no key ever reaches an exception or a repr."""

import pathlib
import subprocess

from tests.packets import ipv4
from tests.protocol.helpers import A_ADDR, A_IP, B_IP, make_pair
from vpncrypt.protocol import keys
from vpncrypt.transport import Session
from vpncrypt.transport.reference import ReferenceTable

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE.parent.parent / "native"


def test_native_table_wipes_keys(tmp_path):
    sources = [str(p) for p in sorted(NATIVE.glob("*.c")) if p.name != "wg_table.c"]
    exe = tmp_path / "wipe_check"
    subprocess.run(
        ["cc", "-O2", "-std=gnu11", f"-I{NATIVE}", str(HERE / "wipe_check.c"), *sources, "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stdout


def test_reference_table_wipes_keys():
    t = ReferenceTable()
    pid = t.add_peer()
    held = []
    for index in (1, 2, 3):
        assert t.reserve_index(index, pid)
        t.install(pid, Session(index, 9, bytes([index]) * 32, bytes([index + 10]) * 32, True), 0.0)
        entry = t._index[index][1]
        held.append((entry.send_key, entry.recv_key))  # the bytearrays themselves
    assert not any(held[0][0]) and not any(held[0][1])  # rotated out
    t.remove_peer(pid)
    assert all(not any(k) for pair in held for k in pair)


def test_no_key_in_reprs_or_errors(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [ipv4(A_IP, B_IP)])
    peer = a.peers[b.public_key]
    secrets = [a.private_key, bytes(peer.pending.e_priv) if peer.pending else a.private_key]
    texts = [repr(a), repr(peer), repr(peer.stats(0.0)), str(a.counters), repr(a.table)]
    for bad in (lambda: a.add_peer(b"\x01" * 31), lambda: a.set_private_key(b"\x02" * 5)):
        try:
            bad()
        except Exception as e:  # noqa: BLE001 - any error text
            texts.append(str(e))
    for text in texts:
        for s in secrets:
            for form in (s.hex(), keys.encode(s), s.hex().upper()):
                assert form not in text
