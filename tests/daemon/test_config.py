import base64
import ipaddress
import os
import shutil
import textwrap

import pytest

from vpncrypt.config import (Config, ConfigError, Endpoint, PeerUpdate, RemovePeer,
                             SetAddresses, SetFwmark, SetListenPort, SetMTU,
                             SetPrivateKey, diff_configs, load_config, parse_config)
from vpncrypt.config.keys import PresharedKey, ZERO_KEY

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


@pytest.mark.parametrize("text,message", [
    (f"[Interface]\nPrivateKey = {B[0]}\n[Peer]\nPublicKey = {B[1]}\n\n\nAllowedIPs = 10.0.0.300/32\n",
     f"{P}:7: [Peer] AllowedIPs: '10.0.0.300/32' is not an IP network"),
    ("[Interface]\nListenPort = 70000\n", f"{P}:2: [Interface] ListenPort: '70000' is not a port number"),
    ("[Interface]\nListenPort = 1\nListenPort = 2\n",
     f"{P}:3: [Interface] ListenPort: given twice (first on line 2)"),
    ("[Interface]\nFwMark = lots\n", f"{P}:2: [Interface] FwMark: 'lots' is not a 32-bit number"),
    ("[Interface]\nMTU = 20\n", f"{P}:2: [Interface] MTU: '20' is not an MTU"),
    ("[Interface]\nAddress = 10.0.0.1/33\n", f"{P}:2: [Interface] Address: '10.0.0.1/33'"),
    ("[Interface]\nPrivateKey = abc\n", f"{P}:2: [Interface] PrivateKey: not a valid key"),
    ("[Interface]\nPrivateKey =\n", f"{P}:2: [Interface] PrivateKey: empty value"),
    ("[Interface]\nPostUp = iptables -A FORWARD\n", f"{P}:2: [Interface] PostUp: running commands"),
    ("[Interface]\nPreDown = x\n", f"{P}:2: [Interface] PreDown: running commands"),
    ("[Interface]\nTable = off\n", f"{P}:2: [Interface] Table: routing table selection is not supported"),
    ("[Interface]\nSaveConfig = true\n", f"{P}:2: [Interface] SaveConfig: not supported"),
    ("[Interface]\nFoo = 1\n", f"{P}:2: [Interface] Foo: unknown key"),
    ("[Interface]\nEndpoint = 1.2.3.4:5\n", f"{P}:2: [Interface] Endpoint: unknown key (it belongs in [Peer])"),
    ("[Interfaces]\n", f"{P}:1: unknown section [Interfaces]"),
    ("[Interface\n", f"{P}:1: a section header must end with ']'"),
    ("ListenPort = 1\n", f"{P}:1: ListenPort: outside of any section"),
    ("[Interface]\n[Interface]\n", f"{P}:2: [Interface]: second [Interface] section (first on line 1)"),
    ("[Interface]\njunk\n", f"{P}:2: [Interface]: expected 'Key = Value'"),
    ("[Peer]\nAllowedIPs = 10.0.0.0/8\n", f"{P}:1: [Peer]: missing PublicKey"),
    (f"[Peer]\nPublicKey = {B[1]}\n[Peer]\nPublicKey = {B[1]}\n",
     f"{P}:4: [Peer] PublicKey: the same peer is already defined on line 1"),
    (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = 2001:db8::1:51820\n",
     f"{P}:3: [Peer] Endpoint: '2001:db8::1:51820': an IPv6 endpoint needs brackets"),
    (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = host.example\n",
     f"{P}:3: [Peer] Endpoint: 'host.example': expected host:port"),
    (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = h:0\n", f"{P}:3: [Peer] Endpoint: 'h:0': port must be 1-65535"),
    (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = [1.2.3.4]:5\n", f"{P}:3: [Peer] Endpoint"),
    (f"[Peer]\nPublicKey = {B[1]}\nEndpoint = bad_host!:5\n", f"{P}:3: [Peer] Endpoint"),
    (f"[Peer]\nPublicKey = {B[1]}\nPersistentKeepalive = never\n",
     f"{P}:3: [Peer] PersistentKeepalive: 'never'"),
    (f"[Peer]\nPublicKey = {B[1]}\nPresharedKey = {B[1][:-2]}\n", f"{P}:3: [Peer] PresharedKey: not a valid key"),
    (f"[Peer]\nPublicKey = {B[1]}\nListenPort = 1\n",
     f"{P}:3: [Peer] ListenPort: unknown key (it belongs in [Interface])"),
])
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
def test_example_configs_parse(tmp_path, name):
    dst = tmp_path / name
    shutil.copy(os.path.join(REPO, "config", name), dst)
    os.chmod(dst, 0o600)
    cfg = load_config(str(dst))
    assert cfg.interface.private_key is not None and cfg.peers and not cfg.warnings
    assert all(p.allowed_ips for p in cfg.peers)


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


def test_diff_identical_is_empty():
    assert diff_configs(parse_config(BASE), parse_config(BASE)) == []


def test_diff_operations():
    new = f"""\
[Interface]
PrivateKey = {B[0]}
ListenPort = 51821
FwMark = 7
Address = 10.0.0.1/24, fd00::1/64
MTU = 1380
[Peer]
PublicKey = {B[1]}
AllowedIPs = 10.0.0.2/32
Endpoint = 192.0.2.1:51820
[Peer]
PublicKey = {B[2]}
AllowedIPs = 10.0.0.3/32, 10.0.1.0/24
PersistentKeepalive = off
[Peer]
PublicKey = {B[4]}
AllowedIPs = 10.0.0.5/32
Endpoint = 192.0.2.9:1
"""
    ops = diff_configs(parse_config(BASE), parse_config(new))
    assert ops == [
        RemovePeer(K[3]),
        SetListenPort(51821),
        SetFwmark(7),
        PeerUpdate(public_key=K[2], update_only=True, preshared_key=PresharedKey(ZERO_KEY),
                   persistent_keepalive=0, replace_allowed_ips=True,
                   allowed_ips=(net("10.0.0.3/32"), net("10.0.1.0/24"))),
        PeerUpdate(public_key=K[4], endpoint=Endpoint("192.0.2.9", 1, "192.0.2.9:1"),
                   persistent_keepalive=0, replace_allowed_ips=True,
                   allowed_ips=(net("10.0.0.5/32"),)),
        SetMTU(1380),
        SetAddresses(add=(ipaddress.ip_interface("fd00::1/64"),), remove=()),
    ]
    # K[1] is unchanged: not touched, so its session survives


def test_diff_private_key_and_endpoint():
    new = BASE.replace(B[0], B[4]).replace("192.0.2.1:51820", "[2001:db8::1]:51820")
    ops = diff_configs(parse_config(BASE), parse_config(new))
    assert ops == [SetPrivateKey(K[4]),
                   PeerUpdate(public_key=K[1], update_only=True,
                              endpoint=Endpoint("2001:db8::1", 51820, "[2001:db8::1]:51820"))]
    # dropping Endpoint/ListenPort from the file leaves them alone
    new = BASE.replace("Endpoint = 192.0.2.1:51820\n", "").replace("ListenPort = 51820\n", "")
    assert diff_configs(parse_config(BASE), parse_config(new)) == []


def test_diff_applies_through_control():
    from tests.daemon.fakes import FakeControl
    from vpncrypt.daemon.uapi import apply_operations
    old, new = parse_config(BASE), parse_config(BASE.replace(B[3], B[4]))
    c = FakeControl()
    apply_operations(diff_configs(Config(), old), c)
    assert set(c.peers) == {K[1], K[2], K[3]} and c.private_key == K[0]
    assert c.calls[-1] == ("set_addresses", (ipaddress.ip_interface("10.0.0.1/24"),), ())
    c.calls.clear()
    apply_operations(diff_configs(old, new), c)
    assert c.calls[0] == ("remove_peer", K[3]) and c.call_names() == ["remove_peer", "upsert_peer"]
    assert set(c.peers) == {K[1], K[2], K[4]}
