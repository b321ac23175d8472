"""Building blocks for the session table tests: tables with hand-installed
sessions, and transport messages made independently of the table (libsodium
through pynacl seals them)."""

from nacl import bindings as nb

from tests.packets import ipv4, ipv6  # noqa: F401  (the tests' one builder, used through this module)
from vpncrypt.transport import Session, TableConfig, new_table

KEY_AB = bytes(range(1, 33))  # A -> B
KEY_BA = bytes(range(101, 133))  # B -> A
A_ADDR = ("192.0.2.1", 51820)
B_ADDR = ("198.51.100.2", 51820)


def message(key: bytes, receiver: int, counter: int, plain: bytes, pad_to: int = 16) -> bytes:
    """A transport message (type 4) as any WireGuard implementation makes it."""
    if pad_to:
        plain = plain + bytes(-len(plain) % pad_to)
    nonce = bytes(4) + counter.to_bytes(8, "little")
    sealed = nb.crypto_aead_chacha20poly1305_ietf_encrypt(plain, None, nonce, key)
    return b"\x04\x00\x00\x00" + receiver.to_bytes(4, "little") + counter.to_bytes(8, "little") + sealed


def table_with_peer(backend, *, routes=("10.0.0.1/32", "fd00::1/128"), endpoint=A_ADDR, **cfg):
    t = new_table(backend, TableConfig(**cfg))
    pid = t.add_peer()
    for r in routes:
        t.route_add(pid, r)
    if endpoint is not None:
        t.set_endpoint(pid, endpoint)
    return t, pid


def install(t, pid, local, remote, send_key, recv_key, initiator, now=0.0):
    assert t.reserve_index(local, pid)
    t.install(pid, Session(local, remote, send_key, recv_key, initiator), now)


def b_side(backend, now=0.0, **cfg):
    """B's table: peer A (10.0.0.1, fd00::1) with a session A initiated:
    B received it as a responder; A's first message will confirm it.
    B's local index is 7, A's is 5."""
    t, pid = table_with_peer(backend, **cfg)
    install(t, pid, 7, 5, KEY_BA, KEY_AB, False, now)
    return t, pid


# WireGuard pads the plaintext to a multiple of 16, never past the MTU (0: no
# cap): (interface MTU, inner packet bytes, padded plaintext bytes); the
# message on the wire is 16 + padded + 16.  Shared by the table's test and the
# Device's (tests/protocol/test_device.py).
PADDING_CASES = [
    (1420, 1420, 1420),
    (1420, 1419, 1420),
    (1420, 1409, 1420),
    (1420, 1408, 1408),
    (1420, 1405, 1408),
    (1420, 1401, 1408),
    (1420, 1400, 1408),
    (1420, 20, 32),
    (0, 1419, 1424),
    (1280, 1280, 1280),
    (1280, 1279, 1280),
    (1500, 1500, 1500),
]
