"""wireproxy's config as `vpncrypt proxy` reads it: the sections and keys of
wireproxy's README, and one line FILE:LINE: [Section] Key: reason for each
mistake."""

import os

import pytest

from vpncrypt.config.model import ConfigError
from vpncrypt.proxy.settings import load_settings

PRIV = "KDOt73PyexASheURxMHYSeDyoWfXlBOVJMlSOAmsTmI="
PUB = "ZG7hP4GGoIVIdMBvIc/uxoUyS0N05Qs+3SB/U5rJqGk="
WG = f"""[Interface]
Address = 10.200.200.2/32 # a comment after the value
PrivateKey = {PRIV}
DNS = 10.200.200.1

[Peer]
PublicKey = {PUB}
Endpoint = 192.0.2.1:51820
AllowedIPs = 0.0.0.0/0
"""


def write(tmp_path, text, name="wireproxy.conf"):
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, 0o600)
    return str(path)


def test_wireproxy_sample_sections(tmp_path):
    """wireproxy README's sample (its [Socks5] with credentials), unchanged in form."""
    text = WG + (
        "\n[TCPClientTunnel]\nBindAddress = 127.0.0.1:25565\nTarget = game.example.net:25565\n"
        "\n[TCPServerTunnel]\nListenPort = 3422\nTarget = localhost:25545\n"
        "\n[Socks5]\nBindAddress = 127.0.0.1:25344\nUsername = u\nPassword = p w\n"
        "\n[http]\nBindAddress = [::1]:25345\n"
    )
    s = load_settings(write(tmp_path, text))
    assert [f.kind for f in s.fronts] == ["TCPClientTunnel", "TCPServerTunnel", "Socks5", "http"]
    client, server, socks, http = s.fronts
    assert (client.bind.host, client.bind.port) == ("127.0.0.1", 25565)
    assert (client.target.host, client.target.port) == ("game.example.net", 25565)
    assert (server.listen_port, server.target.host, server.target.port) == (3422, "localhost", 25545)
    assert (socks.username, socks.password) == ("u", "p w")
    assert (http.bind.host, http.bind.port) == ("::1", 25345)
    assert [str(a) for a in s.wg.interface.addresses] == ["10.200.200.2/32"]
    assert s.wg.interface.dns == ("10.200.200.1",)


def test_wgconfig_names_the_wg_file(tmp_path):
    """WGConfig = PATH before any section; relative to the config's directory."""
    write(tmp_path, WG, "wg0.conf")
    s = load_settings(write(tmp_path, "WGConfig = wg0.conf\n\n[Socks5]\nBindAddress = 127.0.0.1:1080\n"))
    assert s.wg.path == str(tmp_path / "wg0.conf")
    assert s.wg.peers[0].endpoint.port == 51820


@pytest.mark.parametrize(
    "tail, line, message",
    [
        ("[Socks5]\nUsername = u\nPassword = p\n", 11, "[Socks5] BindAddress: missing"),
        (
            "[Socks5]\nBindAddress = :1\nUsername = u\n",
            13,
            "[Socks5] Password: missing (given with Username)",
        ),
        ("[Socks5]\nBindAddress = 127.0.0.1\n", 12, "[Socks5] BindAddress: expected HOST:PORT"),
        ("[Socks5]\nBindAddress = :65536\n", 12, "[Socks5] BindAddress: port '65536': expected 1 to 65535"),
        ("[Socks5]\nBindAddress = ::1:1080\n", 12, "[Socks5] BindAddress: an IPv6 address needs brackets"),
        (
            "[http]\nBindAddress = :1\nBindAddress = :2\n",
            13,
            "[http] BindAddress: given twice (first on line 12)",
        ),
        ("[http]\nBind = :3128\n", 12, "[http] Bind: unknown key"),
        ("[TCPClientTunnel]\nBindAddress = :1\n", 11, "[TCPClientTunnel] Target: missing"),
        (
            "[TCPClientTunnel]\nBindAddress = :1\nTarget = :80\n",
            13,
            "[TCPClientTunnel] Target: a host is needed",
        ),
        ("[TCPServerTunnel]\nListenPort = 0\nTarget = a:1\n", 12, "ListenPort: '0': expected 1 to 65535"),
        ("[TCPServerTunnel]\nTarget = a:1\n", 11, "[TCPServerTunnel] ListenPort: missing"),
        (
            "[UDPClientTunnel]\nBindAddress = :1\n",
            11,
            "[UDPClientTunnel] not supported by vpncrypt proxy yet",
        ),
        (f"[Socks5]\nBindAddress = :1\nUsername = {'u' * 256}\nPassword = p\n", 13, "longer than 255 bytes"),
        (
            "[TCPServerTunnel]\nListenPort = 80\nTarget = a:1\n"
            + "[TCPServerTunnel]\nListenPort = 080\nTarget = b:1\n",
            15,
            "[TCPServerTunnel] ListenPort: 80 is served already (line 11)",
        ),
    ],
)
def test_errors_name_file_line_section_key(tmp_path, tail, line, message):
    path = write(tmp_path, WG + "\n" + tail)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert str(e.value).startswith(f"{path}:{line}: "), str(e.value)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_wg_part_errors_keep_their_lines(tmp_path):
    """The proxy sections are blanked, not removed, for vpncrypt's parser:
    an [Interface]/[Peer] error after them names its real line."""
    text = "[Socks5]\nBindAddress = :1\n\n" + WG.replace("AllowedIPs = 0.0.0.0/0", "AllowedIPs = 300.0.0.0/0")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert str(e.value).startswith(f"{path}:12: [Peer] AllowedIPs: ")


def test_interface_the_proxy_cannot_serve(tmp_path):
    path = write(
        tmp_path, WG.replace("Address = 10.200.200.2/32", "FwMark = 7") + "[Socks5]\nBindAddress = :1\n"
    )
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert str(e.value).startswith(
        f"{path}:2: [Interface] FwMark: marking the UDP socket needs CAP_NET_ADMIN"
    )
    path = write(
        tmp_path,
        WG.replace("Address = 10.200.200.2/32 # a comment after the value", "")
        + "[Socks5]\nBindAddress = :1\n",
    )
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert str(e.value) == f"{path}: [Interface] Address: missing (the proxy's connections leave from it)"


def test_nothing_to_serve(tmp_path):
    path = write(tmp_path, WG)
    with pytest.raises(ConfigError, match="nothing to serve"):
        load_settings(path)


def test_wgconfig_with_an_interface_of_its_own(tmp_path):
    write(tmp_path, WG, "wg0.conf")
    path = write(tmp_path, "WGConfig = wg0.conf\n" + WG + "[Socks5]\nBindAddress = :1\n")
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert str(e.value).startswith(f"{path}:1: WGConfig: given with an [Interface]")


def test_secret_readable_by_others_is_refused(tmp_path):
    path = write(tmp_path, WG + "[Socks5]\nBindAddress = :1\n")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError):
        load_settings(path)


def test_a_peer_without_allowed_ips_takes_everything_as_in_wireproxy(tmp_path):
    """wireproxy's README sample has a [Peer] with no AllowedIPs; wireproxy
    gives it allowed_ip=0.0.0.0/0 and ::0/0. Its DNS is used, so no warning
    that DNS is ignored."""
    text = WG.replace("AllowedIPs = 0.0.0.0/0\n", "") + "\n[Socks5]\nBindAddress = 127.0.0.1:25344\n"
    s = load_settings(write(tmp_path, text))
    assert [str(n) for n in s.wg.peers[0].allowed_ips] == ["0.0.0.0/0", "::/0"]
    assert s.wg.warnings == ()


def test_a_peer_with_allowed_ips_keeps_them(tmp_path):
    s = load_settings(write(tmp_path, WG + "\n[Socks5]\nBindAddress = 127.0.0.1:25344\n"))
    assert [str(n) for n in s.wg.peers[0].allowed_ips] == ["0.0.0.0/0"]


@pytest.mark.parametrize("key", ["CheckAlive = 10.200.200.1", "checkaliveinterval = 5"])
def test_wireproxy_health_check_keys_are_named_not_unknown(tmp_path, key):
    text = WG.replace("DNS = 10.200.200.1\n", f"DNS = 10.200.200.1\n{key}\n")
    path = write(tmp_path, text + "\n[Socks5]\nBindAddress = 127.0.0.1:25344\n")
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    name = "CheckAlive" if key.startswith("Check") else "CheckAliveInterval"
    assert str(e.value) == f"{path}:5: [Interface] {name}: not supported by vpncrypt proxy yet"
