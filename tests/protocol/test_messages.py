"""WireGuard-specific message layout: sizes, offsets, type bytes, reserved zeros."""

import hashlib

from vpncrypt.protocol import messages as m
from vpncrypt.protocol.noise import HASH, LABEL_COOKIE, LABEL_MAC1, MAC
from vpncrypt.protocol.noise_ik import ik_responder_read_static, init_state
from vpncrypt.protocol import noise

from vpncrypt.protocol import Output, ProtocolConfig

from tests.protocol.helpers import A_ADDR, A_IP, B_ADDR, B_IP, ipv4, make_device, make_pair, make_rng
from tests.protocol.helpers import sessions


def test_layout_of_every_message(crypto, clock):
    a, b, net = make_pair(crypto, clock)
    net.send(A_ADDR, [ipv4(A_IP, B_IP, b"q" * 20)])
    (s1, _, init), (s2, _, resp), (s3, _, data) = net.log
    assert (s1, s2, s3) == (A_ADDR, B_ADDR, A_ADDR)
    ca, _, _ = sessions(a, b, clock)
    cb, _, _ = sessions(b, a, clock)

    assert len(init) == 148 and init[:4] == b"\x01\x00\x00\x00"
    assert int.from_bytes(init[4:8], "little") == ca.local_index
    assert init[116:132] == MAC(HASH(LABEL_MAC1, b.public_key), init[:116])
    assert init[132:148] == bytes(16)  # no cookie: mac2 is zero
    # the encrypted static at 40..88 decrypts to A's public key
    st = init_state(noise.CONSTRUCTION, noise.IDENTIFIER, b.public_key, crypto)
    assert ik_responder_read_static(st, b.private_key, init[8:40], init[40:88]) == a.public_key
    msg = m.parse_initiation(init)
    assert msg.ephemeral == init[8:40] and msg.static == init[40:88] and msg.timestamp == init[88:116]

    assert len(resp) == 92 and resp[:4] == b"\x02\x00\x00\x00"
    assert int.from_bytes(resp[4:8], "little") == cb.local_index
    assert int.from_bytes(resp[8:12], "little") == ca.local_index
    assert resp[60:76] == MAC(HASH(LABEL_MAC1, a.public_key), resp[:60])
    assert resp[76:92] == bytes(16)

    assert data[:4] == b"\x04\x00\x00\x00"
    assert int.from_bytes(data[4:8], "little") == cb.local_index
    assert int.from_bytes(data[8:16], "little") == 0
    assert len(data) == 16 + 48 + 16  # 40-byte packet padded to 48, plus the tag
    # (the sealed bytes themselves: tests/transport/test_table.py, with known keys)

    # cookie reply, from B's twin that is always under load (a queue of 8: depth 1)
    loaded = make_device(crypto, clock, 2, ProtocolConfig(handshake_queue_size=8))
    seed = make_rng(12)(32)
    loaded.table.seed(seed)
    loaded.add_peer(a.public_key, allowed_ips=[A_IP + "/32"])
    clock.now += 10
    out = Output()
    a.handshakes.initiate(a.peers[b.public_key], clock.now, out)
    init2 = out.datagrams[-1][0]
    assert init2[0] == 1
    reply = loaded.receive_datagram(init2, A_ADDR, clock.now).datagrams[0][0]
    assert len(reply) == 64 and reply[:4] == b"\x03\x00\x00\x00"
    assert reply[4:8] == init2[4:8]
    cookie = crypto.xopen(HASH(LABEL_COOKIE, b.public_key), reply[8:32], reply[32:64], init2[116:132])
    assert len(cookie) == 16
    # the secret: the first 32 bytes of the table's generator, BLAKE2s keyed
    # with its seed over a counter
    secret = hashlib.blake2s(bytes(8), key=seed).digest()
    assert cookie == MAC(secret, bytes([192, 0, 2, 1]) + (51820).to_bytes(2, "big"))


def test_sizes_and_offsets_constants():
    assert m.INITIATION_LEN == 148 and m.RESPONSE_LEN == 92 and m.COOKIE_REPLY_LEN == 64
    assert m.INIT_MAC1 == (116, 132) and m.INIT_MAC2 == (132, 148)
    assert m.RESP_MAC1 == (60, 76) and m.RESP_MAC2 == (76, 92)
    assert m.pack_transport_header(0x01020304, 5) == b"\x04\0\0\0\x04\x03\x02\x01" + (5).to_bytes(8, "little")
    assert len(m.pack_cookie_reply(1, bytes(24), bytes(32))) == 64


def test_type_word_requires_reserved_zero():
    assert m.message_type(b"\x01\x00\x00\x00") == 1
    assert m.message_type(b"\x04\x00\x00\x00") == 4
    assert m.message_type(b"\x01\x00\x00\x01") == 0
    assert m.message_type(b"\x05\x00\x00\x00") == 0
    assert m.message_type(b"") == 0


def test_an_initiation_from_a_static_key_alone():
    """wg_initiation_from derives the public key and the static-static DH
    itself: the same bytes as wg_create_initiation given them, and the
    responder learns that static key from it."""
    from vpncrypt.crypto import get_backend
    from vpncrypt.protocol import keys
    from vpncrypt.protocol.messages import parse_initiation
    from vpncrypt.protocol.noise_ik import (
        wg_begin_consume_initiation,
        wg_create_initiation,
        wg_initiation_from,
    )

    crypto = get_backend("pynacl")
    rng = make_rng(31)
    s_priv, r_priv, e_priv = (keys.clamp(rng(32)) for _ in range(3))
    r_pub = keys.public_from_private(r_priv)
    body, _ = wg_initiation_from(crypto, s_priv, r_pub, 77, e_priv, 1_700_000_000.0)
    s_pub = keys.public_from_private(s_priv)
    same, _ = wg_create_initiation(
        crypto, s_priv, s_pub, r_pub, keys.dh(s_priv, r_pub), 77, e_priv, 1_700_000_000.0, 0.0
    )
    assert len(body) == 116 and body == same
    _, static = wg_begin_consume_initiation(crypto, r_priv, r_pub, parse_initiation(body + bytes(32)))
    assert static == s_pub
