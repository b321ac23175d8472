import base64
import ipaddress
import os
import re
import shutil
import textwrap

import pytest

from vpncrypt.config import (
    ConfigError,
    Endpoint,
    PeerUpdate,
    RemovePeer,
    ReplacePeers,
    SetAddresses,
    SetListenPort,
    SetMTU,
    SetPrivateKey,
    extras_operations,
    load_config,
    parse_config,
    syncconf_operations,
)
from vpncrypt.config.keytypes import ZERO_KEY
from vpncrypt.protocol import keys
from tests.example_configs import KeyRing, example_text, filled_example

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = [bytes([i + 1]) * 32 for i in range(6)]
B = [base64.b64encode(k).decode() for k in K]
P = "/etc/vpncrypt/wg0.conf"


def net(s):
    return ipaddress.ip_network(s)


def conf(text):
    return parse_config(textwrap.dedent(text), P)


def test_full_parse_case_insensitive_and_comments():
    cfg = conf(f"""\
        # a comment
        [interface]
        privatekey={B[0]}   # trailing comment
          LISTENPORT = 51820
        FwMark = 0x1234
        Address = 10.0.0.1/24, fd00::1
        MTU = 1380
        DNS = 1.1.1.1, example.com

        [Peer]
        PublicKey = {B[1]}
        PresharedKey = {B[2]}
        AllowedIPs = 10.0.0.2/32, 10.1.0.5/16
        allowedips = fd00::2/128
        Endpoint = [2001:db8::1]:51820
        PersistentKeepalive = 25
        [PEER]
        PublicKey = {B[3]}
        AllowedIPs =
        Endpoint = vpn.example.com:4500
        PersistentKeepalive = off
        """)
    i = cfg.interface
    assert i.private_key == K[0] and repr(i.private_key) == "PrivateKey(<redacted>)"
    assert i.listen_port == 51820 and i.fwmark == 0x1234 and i.mtu == 1380
    assert [str(a) for a in i.addresses] == ["10.0.0.1/24", "fd00::1/128"]
    assert i.dns == ("1.1.1.1", "example.com")
    assert len(cfg.warnings) == 1 and "DNS is ignored" in cfg.warnings[0]
    assert cfg.warnings[0].startswith(f"{P}:8:")
    p1, p2 = cfg.peers
    assert p1.public_key == K[1] and p1.preshared_key == K[2]
    assert p1.allowed_ips == (net("10.0.0.2/32"), net("10.1.0.0/16"), net("fd00::2/128"))
    assert p1.endpoint == Endpoint("2001:db8::1", 51820, "[2001:db8::1]:51820")
    assert p1.persistent_keepalive == 25 and p1.line == 10
    assert p2.allowed_ips == () and p2.persistent_keepalive == 0
    assert (p2.endpoint.host, p2.endpoint.port) == ("vpn.example.com", 4500)
    assert not p2.endpoint.is_numeric and p1.endpoint.is_numeric
    assert cfg.effective_mtu == 1380


def test_defaults():
    cfg = conf(f"[Interface]\nPrivateKey = {B[0]}\n")
    assert cfg.interface.listen_port is None and cfg.interface.fwmark == 0
    assert cfg.effective_mtu == 1420 and cfg.peers == ()


@pytest.mark.parametrize(
    "text,message",
    [
        (
            f"[Interface]\nPrivateKey = {B[0]}\n[Peer]\nPublicKey = {B[1]}\n\n\nAllowedIPs = 10.0.0.300/32\n",
            f"{P}:7: [Peer] AllowedIPs: '10.0.0.300/32' is not an IP network",
        ),
        ("[Interface]\nListenPort = 70000\n", f"{P}:2: [Interface] ListenPort: '70000' is not a port number"),
        (
            "[Interface]\nListenPort = 1\nListenPort = 2\n",
            f"{P}:3: [Interface] ListenPort: given twice (first on line 2)",
        ),
        ("[Interface]\nFwMark = lots\n", f"{P}:2: [Interface] FwMark: 'lots' is not a 32-bit number"),
        ("[Interface]\nMTU = 20\n", f"{P}:2: [Interface] MTU: '20' is not an MTU"),
        ("[Interface]\nAddress = 10.0.0.1/33\n", f"{P}:2: [Interface] Address: '10.0.0.1/33'"),
        (
            "[Interface]\nPrivateKey = abc\n",
            f"{P}:2: [Interface] PrivateKey: Key is not the correct length or format (44 characters "
            "of base64, as printed by `wg genkey`)",
        ),
        ("[Interface]\nPrivateKey =\n", f"{P}:2: [Interface] PrivateKey: empty value"),
        ("[Interface]\nPostUp = iptables -A FORWARD\n", f"{P}:2: [Interface] PostUp: running commands"),
        ("[Interface]\nPreDown = x\n", f"{P}:2: [Interface] PreDown: running commands"),
        (
            "[Interface]\nTable = 0x10\n",
            f"{P}:2: [Interface] Table: '0x10' is not 'off', 'auto', a table "
            "number (1-4294967295) or a table name from iproute2's rt_tables files",
        ),
        ("[Interface]\nSaveConfig = true\n", f"{P}:2: [Interface] SaveConfig: not supported"),
        ("[Interface]\nFoo = 1\n", f"{P}:2: [Interface] Foo: unknown key"),
        (
            "[Interface]\nEndpoint = 1.2.3.4:5\n",
            f"{P}:2: [Interface] Endpoint: unknown key (it belongs in [Peer])",
        ),
        ("[Interfaces]\n", f"{P}:1: unknown section [Interfaces]"),
        ("[Interface\n", f"{P}:1: a section header must end with ']'"),
        ("ListenPort = 1\n", f"{P}:1: ListenPort: outside of any section"),
        ("[Interface]\n[Interface]\n", f"{P}:2: [Interface]: second [Interface] section (first on line 1)"),
        ("[Interface]\njunk\n", f"{P}:2: [Interface]: expected 'Key = Value'"),
        ("[Peer]\nAllowedIPs = 10.0.0.0/8\n", f"{P}:1: [Peer]: missing PublicKey"),
        (
            f"[Peer]\nPublicKey = {B[1]}\n[Peer]\nPublicKey = {B[1]}\n",
            f"{P}:4: [Peer] PublicKey: the same peer is already defined on line 1 (wg would merge "
            "the two [Peer] sections; vpncrypt refuses)",
        ),
        (
            f"[Peer]\nPublicKey = {B[1]}\nEndpoint = 2001:db8::g:51820\n",
            f"{P}:3: [Peer] Endpoint: '2001:db8::g:51820': not a valid IPv6 address before the port",
        ),
        (
            f"[Peer]\nPublicKey = {B[1]}\nEndpoint = host.example\n",
            f"{P}:3: [Peer] Endpoint: 'host.example': expected host:port",
        ),
        (
            f"[Peer]\nPublicKey = {B[1]}\nEndpoint = h:0\n",
            f"{P}:3: [Peer] Endpoint: 'h:0': port must be 1-65535",
        ),
        (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = [1.2.3.4]:5\n", f"{P}:3: [Peer] Endpoint"),
        (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = bad_host!:5\n", f"{P}:3: [Peer] Endpoint"),
        (
            f"[Peer]\nPublicKey = {B[1]}\nPersistentKeepalive = never\n",
            f"{P}:3: [Peer] PersistentKeepalive: 'never'",
        ),
        (
            f"[Peer]\nPublicKey = {B[1]}\nPresharedKey = {B[1][:-2]}\n",
            f"{P}:3: [Peer] PresharedKey: Key is not the correct length or format (44 characters "
            "of base64, as printed by `wg genpsk`)",
        ),
        (
            f"[Peer]\nPublicKey = {B[1]}\nListenPort = 1\n",
            f"{P}:3: [Peer] ListenPort: unknown key (it belongs in [Interface])",
        ),
    ],
)
def test_errors_name_file_line_and_key(text, message):
    with pytest.raises(ConfigError) as ei:
        parse_config(text, P)
    assert str(ei.value).startswith(message), str(ei.value)
    assert ei.value.path == P and ei.value.line is not None


def test_key_errors_never_echo_the_value():
    bad = B[0][:-3] + "!A="
    with pytest.raises(ConfigError) as ei:
        parse_config(f"[Interface]\nPrivateKey = {bad}\n", P)
    assert bad not in str(ei.value) and B[0][:20] not in str(ei.value)


def noncanonical(b64key):
    """The same 32 bytes with the two unused bits of the last base64 digit set."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(b64key[42])
    assert last % 4 == 0
    return b64key[:42] + alphabet[last + 3] + "="


@pytest.mark.parametrize("key", ["PrivateKey", "PublicKey", "PresharedKey"])
def test_noncanonical_base64_keys_are_refused(key):
    """wg refuses a key whose padding bits are set (two strings would name one
    key); so does the config parser, with wg's words."""
    bad = noncanonical(B[1])
    assert base64.b64decode(bad) == K[1]  # decodes to the same bytes
    section = "Interface" if key == "PrivateKey" else "Peer"
    text = (
        f"[Interface]\nPrivateKey = {bad}\n"
        if key == "PrivateKey"
        else f"[Peer]\nPublicKey = {B[2] if key != 'PublicKey' else bad}\n"
        + (f"PresharedKey = {bad}\n" if key == "PresharedKey" else "")
    )
    line = len(text.splitlines())
    with pytest.raises(ConfigError) as ei:
        parse_config(text, P)
    assert str(ei.value).startswith(
        f"{P}:{line}: [{section}] {key}: Key is not the correct length or format"
    ), str(ei.value)
    assert bad not in str(ei.value)
    assert parse_config(text.replace(bad, B[1]), P)  # the canonical spelling is fine


def test_own_public_key_as_peer_is_ignored():
    from nacl.bindings import crypto_scalarmult_base

    pub = base64.b64encode(crypto_scalarmult_base(K[0])).decode()
    cfg = conf(f"[Interface]\nPrivateKey = {B[0]}\n[Peer]\nPublicKey = {pub}\n")
    assert cfg.peers == () and "own public key" in cfg.warnings[0]


# ---------------------------------------------------------------- files and permissions


def _write(tmp_path, text, mode):
    p = tmp_path / "wg0.conf"
    p.write_text(textwrap.dedent(text))
    os.chmod(p, mode)
    return str(p)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_refuses_readable_private_key(tmp_path, mode):
    path = _write(tmp_path, f"[Interface]\nPrivateKey = {B[0]}\n", mode)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert path in msg and f"chmod 600 {path}" in msg and f"{mode:04o}" in msg


def test_refuses_readable_preshared_key(tmp_path):
    path = _write(tmp_path, f"[Peer]\nPublicKey = {B[1]}\nPresharedKey = {B[2]}\n", 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_config(path)


def test_accepts_private_file_and_public_only_file(tmp_path):
    path = _write(tmp_path, f"[Interface]\nPrivateKey = {B[0]}\n", 0o600)
    assert load_config(path).interface.private_key == K[0]
    os.chmod(path, 0o400)
    assert load_config(path).path == path
    pub = tmp_path / "pub.conf"
    pub.write_text(f"[Peer]\nPublicKey = {B[1]}\n")
    os.chmod(pub, 0o644)
    assert load_config(str(pub)).peers[0].public_key == K[1]


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot open"):
        load_config(str(tmp_path / "missing.conf"))
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(str(tmp_path))
    p = tmp_path / "bin.conf"
    p.write_bytes(b"[Interface]\nListenPort = 1\n\xff\n")
    with pytest.raises(ConfigError, match=r"bin.conf:3: not valid UTF-8"):
        load_config(str(p))
    p = _write(tmp_path, "[Interface]\nListenPort = x\n", 0o600)
    with pytest.raises(ConfigError, match=r"wg0.conf:2: \[Interface\] ListenPort"):
        load_config(p)


@pytest.mark.parametrize("name", ["wg0.conf.example", "client.conf.example"])
def test_example_configs_parse_once_filled(tmp_path, name):
    dst = tmp_path / name
    dst.write_text(filled_example(name))
    os.chmod(dst, 0o600)
    cfg = load_config(str(dst))
    assert cfg.interface.private_key is not None and cfg.peers and not cfg.warnings
    assert all(p.allowed_ips for p in cfg.peers)


def test_example_configs_pair_up():
    # filled from one key ring, the two examples are the two ends of one tunnel
    ring = KeyRing()
    server = parse_config(filled_example("wg0.conf.example", ring), "wg0.conf")
    client = parse_config(filled_example("client.conf.example", ring), "client.conf")
    (to_server,) = client.peers
    laptop = server.peers[0]
    assert to_server.public_key.to_base64() == keys.pubkey(server.interface.private_key.to_base64())
    assert laptop.public_key.to_base64() == keys.pubkey(client.interface.private_key.to_base64())
    assert laptop.preshared_key == to_server.preshared_key is not None


@pytest.mark.parametrize("name", ["wg0.conf.example", "client.conf.example"])
def test_example_configs_hold_no_key(tmp_path, name):
    # copied as they are, they never start a tunnel: the first key line is
    # refused as a placeholder, FILE:LINE: [Section] Key: reason
    dst = tmp_path / name
    shutil.copy(os.path.join(REPO, "config", name), dst)
    os.chmod(dst, 0o600)
    lines = example_text(name).splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("PrivateKey"))
    with pytest.raises(ConfigError) as e:
        load_config(str(dst))
    assert str(e.value) == (
        f"{dst}:{first}: [Interface] PrivateKey: a placeholder, not a key: "
        "generate one with `umask 077; wg genkey` (its public key: `wg pubkey`)"
    )
    # no line of any example holds a key (44 characters of base64, or 64 hex digits)
    text = example_text(name)
    assert not re.search(r"[A-Za-z0-9+/]{43}=", text) and not re.search(r"[0-9a-fA-F]{64}", text)


@pytest.mark.parametrize(
    "section, key, advice",
    [
        ("Interface", "PrivateKey", "generate one with `umask 077; wg genkey`"),
        ("Peer", "PublicKey", "put the peer's own public key here"),
        ("Peer", "PresharedKey", "generate one with `umask 077; wg genpsk`"),
    ],
)
def test_placeholder_refused_for_each_key(section, key, advice):
    message = _refused(section, key, f"<YOUR {key.upper()} HERE>")
    assert message.startswith(f"{P}:3: [{section}] {key}: a placeholder, not a key: {advice}")
    assert "YOUR" not in message


def _refused(section: str, key: str, value: str) -> str:
    """The ConfigError for `key = value` on line 3 of a config, in `section`."""
    head = {
        "Interface": "# one\n[Interface]\n",
        "Peer": f"[Peer]\nPublicKey = {B[1]}\n" if key != "PublicKey" else "[Peer]\n# one\n",
    }[section]
    with pytest.raises(ConfigError) as e:
        parse_config(f"{head}{key} = {value}\n", P)
    return str(e.value)


# The keys config/*.example shipped before they had placeholders (their
# private halves are in the same files): refused wherever they appear.
OLD_EXAMPLE_KEYS = [
    ("Interface", "PrivateKey", "8GIQxST+0XtOtOJknYACVFNJonZVkRsic1xgmkVP4Xg="),
    ("Interface", "PrivateKey", "aIkfaj9R5mxQ1XR/7Xh17bHAyEOcKQOwSj9Vp6sIYVQ="),
    ("Peer", "PublicKey", "fIWpvvDgo45FoXWAt9mgnt97fbsp8jNd9fgSMzxMhyk="),
    ("Peer", "PublicKey", "5VDuuHCuZRhe7sIkW8v/UpB9tPViN7sy2Aee0j7rVQo="),
    ("Peer", "PublicKey", "0hDEEPENVQCtVcGqND0HGhEGOcsLPkrHkyHLedUhT2Q="),
    ("Peer", "PresharedKey", "8mvMtmCyt5y220CzggmJXK2LFNQpbQWYbr6aPGsOrM0="),
]


@pytest.mark.parametrize("section, key, value", OLD_EXAMPLE_KEYS)
def test_keys_the_examples_published_are_refused(section, key, value):
    message = _refused(section, key, value)
    assert message.startswith(f"{P}:3: [{section}] {key}: a key from vpncrypt's example configs (published")
    assert value not in message


# ---------------------------------------------------------------- diff (SIGHUP reload)

BASE = f"""\
[Interface]
PrivateKey = {B[0]}
ListenPort = 51820
Address = 10.0.0.1/24
[Peer]
PublicKey = {B[1]}
AllowedIPs = 10.0.0.2/32
Endpoint = 192.0.2.1:51820
[Peer]
PublicKey = {B[2]}
PresharedKey = {B[5]}
AllowedIPs = 10.0.0.3/32
PersistentKeepalive = 25
[Peer]
PublicKey = {B[3]}
AllowedIPs = 10.0.0.4/32
"""


def _running(cfg, **changes):
    """The InterfaceSnapshot a device configured from `cfg` reports (what
    `get=1` says), with `changes` applied as `wg set` would have."""
    from vpncrypt.daemon.control import InterfaceSnapshot, PeerSnapshot

    peers = [
        PeerSnapshot(
            public_key=bytes(p.public_key),
            preshared_key=p.preshared_key,
            persistent_keepalive=p.persistent_keepalive,
            allowed_ips=list(p.allowed_ips),
        )
        for p in cfg.peers
    ]
    return InterfaceSnapshot(
        private_key=cfg.interface.private_key,
        listen_port=changes.get("listen_port", cfg.interface.listen_port),
        peers=changes.get("peers", peers),
    )


def test_syncconf_sets_every_file_peer_and_nothing_else():
    """As `wg syncconf`: every peer of the file is sent (AllowedIPs replaced),
    nothing is removed when nothing else runs."""
    cfg = parse_config(BASE)
    ops = syncconf_operations(_running(cfg), cfg)
    assert ops == [
        SetPrivateKey(K[0]),
        SetListenPort(51820),
        PeerUpdate(
            public_key=K[1],
            endpoint=Endpoint("192.0.2.1", 51820, "192.0.2.1:51820"),
            replace_allowed_ips=True,
            allowed_ips=(net("10.0.0.2/32"),),
        ),
        PeerUpdate(
            public_key=K[2],
            preshared_key=K[5],
            persistent_keepalive=25,
            replace_allowed_ips=True,
            allowed_ips=(net("10.0.0.3/32"),),
        ),
        PeerUpdate(public_key=K[3], replace_allowed_ips=True, allowed_ips=(net("10.0.0.4/32"),)),
    ]


def test_syncconf_is_against_the_running_state():
    """What `wg set` changed goes back to what the file says: a stranger peer
    goes, a removed peer comes back, a moved port moves back; a PSK or a
    keepalive the file does not have is cleared."""
    cfg = parse_config(BASE)
    running = _running(cfg)
    stranger = type(running.peers[0])(public_key=K[4], allowed_ips=[net("10.9.0.0/16")])
    with_psk = type(running.peers[0])(public_key=K[3], preshared_key=K[5], persistent_keepalive=5)
    running = _running(
        cfg, listen_port=40000, peers=[running.peers[1], with_psk, stranger]
    )  # K[1] was removed
    ops = syncconf_operations(running, cfg)
    assert ops[0] == RemovePeer(K[4])
    assert SetListenPort(51820) in ops
    by_key = {bytes(o.public_key): o for o in ops if isinstance(o, PeerUpdate)}
    assert set(by_key) == {K[1], K[2], K[3]}
    assert by_key[K[1]].endpoint.host == "192.0.2.1"
    assert by_key[K[3]].preshared_key == ZERO_KEY and by_key[K[3]].persistent_keepalive == 0
    # a file without peers replaces them all
    assert (
        syncconf_operations(running, parse_config(f"[Interface]\nPrivateKey = {B[0]}\n"))[0] == ReplacePeers()
    )


def test_extras_operations():
    new = BASE.replace("Address = 10.0.0.1/24", "Address = 10.0.0.1/24, fd00::1/64\nMTU = 1380")
    assert extras_operations(parse_config(BASE), parse_config(BASE)) == []
    assert extras_operations(parse_config(BASE), parse_config(new)) == [
        SetMTU(1380),
        SetAddresses(add=(ipaddress.ip_interface("fd00::1/64"),), remove=()),
    ]


def test_syncconf_applies_through_control():
    from tests.daemon.fakes import FakeControl
    from vpncrypt.daemon.uapi import apply_operations

    old, new = parse_config(BASE), parse_config(BASE.replace(B[3], B[4]))
    c = FakeControl()
    apply_operations(syncconf_operations(c.snapshot(), old), c)
    assert set(c.peers) == {K[1], K[2], K[3]} and c.private_key == K[0]
    c.calls.clear()
    apply_operations(syncconf_operations(c.snapshot(), new), c)
    assert c.calls[0] == ("remove_peer", K[3])
    assert set(c.peers) == {K[1], K[2], K[4]}


@pytest.mark.parametrize(
    "text, line, where",
    [
        ("[Interface]\nPrivateKey: {k}\n", 2, "[Interface] PrivateKey"),
        ("[Interface]\nPrivateKey {k}\n", 2, "[Interface] PrivateKey"),
        ("[Peer]\nPublicKey = {p}\nPresharedKey {k}\n", 3, "[Peer] PresharedKey"),
        ("[Interface]\n{k}\n", 2, "[Interface]"),
        ("{k}\n", 1, None),
    ],
)
def test_a_line_that_holds_a_key_is_never_printed(text, line, where):
    """A key written without ' = ' (a colon, a space, or the key alone): the
    first '=' is the base64 padding at the end of the key, so what comes
    before it is the key itself; the error names the file, the line and the
    config key it starts with, and shows nothing of the key (wg prints the
    line; vpncrypt never logs key material)."""
    for key in (B[1], "0HP3RfZaIKPuWFF0TfvSW145agwbOveQzs2GqF2Vu3E="):  # the second is all letters and digits
        with pytest.raises(ConfigError) as ei:
            parse_config(text.format(k=key, p=B[2]), P)
        msg = str(ei.value)
        head = f"{P}:{line}: " + (f"{where}: " if where else "")
        assert msg == head + "expected 'Key = Value' (the rest of the line is not shown: it may hold a key)"
        assert not any(key[i : i + 6] in msg for i in range(len(key) - 6)), msg
