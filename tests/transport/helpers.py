"""Building blocks for the session table tests: tables with hand-installed
sessions, and transport messages made independently of the table (libsodium
through pynacl seals them)."""
import ipaddress
import struct

from nacl import bindings as nb

from vpncrypt.transport import TableConfig, new_table

KEY_AB = bytes(range(1, 33))          # A -> B
KEY_BA = bytes(range(101, 133))       # B -> A
A_ADDR = ("192.0.2.1", 51820)
B_ADDR = ("198.51.100.2", 51820)


def ipv4(src, dst, payload=b"x" * 20, proto=17):
    s = ipaddress.IPv4Address(src).packed
    d = ipaddress.IPv4Address(dst).packed
    return struct.pack(">BBHHHBBH", 0x45, 0, 20 + len(payload), 0, 0, 64, proto, 0) + s + d + payload


def ipv6(src, dst, payload=b"y" * 8):
    return (struct.pack(">IHBB", 6 << 28, len(payload), 17, 64) + ipaddress.IPv6Address(src).packed
            + ipaddress.IPv6Address(dst).packed + payload)


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
    t.install(pid, local, remote, send_key, recv_key, initiator, now)


def b_side(backend, now=0.0, **cfg):
    """B's table: peer A (10.0.0.1, fd00::1) with a session A initiated:
    B received it as a responder; A's first message will confirm it.
    B's local index is 7, A's is 5."""
    t, pid = table_with_peer(backend, **cfg)
    install(t, pid, 7, 5, KEY_BA, KEY_AB, False, now)
    return t, pid
