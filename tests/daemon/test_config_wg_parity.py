"""The config file is read as `wg setconf` (wireguard-tools' config.c) reads
it: what wg takes as a comment is a comment, what wg refuses is refused, and
where vpncrypt is stricter the error names file, line and key."""

import base64
import ipaddress

import pytest

from vpncrypt.config import ConfigError, Endpoint, load_config, parse_config

P = "/etc/vpncrypt/wg0.conf"
KEY = base64.b64encode(bytes([7]) * 32).decode()


def error_of(text):
    with pytest.raises(ConfigError) as ei:
        parse_config(text, P)
    return str(ei.value)


# ---------------------------------------------------------------- lines and comments


@pytest.mark.parametrize("sep", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"])
def test_a_comment_runs_to_the_newline(sep):
    """str.splitlines() would end the comment at these and read ListenPort."""
    cfg = parse_config(f"[Interface]\n# old setting was{sep}ListenPort = 4444\n", P)
    assert cfg.interface.listen_port is None


def test_line_numbers_count_newlines_only():
    text = "[Interface]\nListenPort = 1\n# a\x0cb\x0bc\u2028d\n\n\n\nMTU = 1\n"
    assert error_of(text) == f"{P}:7: [Interface] MTU: '1' is not an MTU (68-65535)"


def test_cr_vt_ff_are_whitespace():
    cfg = parse_config("[Interface]\r\nListenPort\x0b=\x0c51820\r\n\rFwMark = 1\r\n", P)
    assert cfg.interface.listen_port == 51820 and cfg.interface.fwmark == 1


def test_non_utf8_only_counts_outside_comments(tmp_path):
    p = tmp_path / "latin1.conf"
    p.write_bytes(b"# Caf\xe9 config\n[Interface]\nListenPort = 51820 # na\xefve\n")
    assert load_config(str(p)).interface.listen_port == 51820
    p.write_bytes(b"# Caf\xe9\n[Interface]\nListenPort = 5182\xe9\n")
    with pytest.raises(ConfigError) as ei:
        load_config(str(p))
    assert str(ei.value) == f"{p}:3: not valid UTF-8" and ei.value.line == 3


def test_whitespace_inside_values_is_removed_as_wg_does():
    cfg = parse_config(
        f"[Peer]\nPublicKey = {KEY}\nAllowedIPs = 10.1.0.0 / 24 , fd00:: / 64\n"
        "Endpoint = 127.0.0.1 : 51820\n",
        P,
    )
    (peer,) = cfg.peers
    assert peer.allowed_ips == (ipaddress.ip_network("10.1.0.0/24"), ipaddress.ip_network("fd00::/64"))
    assert (peer.endpoint.host, peer.endpoint.port) == ("127.0.0.1", 51820)


# ---------------------------------------------------------------- refused, as wg refuses


@pytest.mark.parametrize(
    "value,reason",
    [
        ("10.1.0.0/255.255.0.0", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("10.1.0.0/0.0.255.255", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("10.1.0.0/024", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("10.1.0.0/+24", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("10.1.0.0/\u0662\u0664", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("10.1.0.0/33", "the prefix length must be 0-32"),
        ("fd00::/129", "the prefix length must be 0-128"),
        ("fe80::1%eth0/128", "an address with a zone (%...) cannot be a prefix"),
        ("fe80::1%eth0", "an address with a zone (%...) cannot be a prefix"),
        ("10.1.0.0/", "the prefix length must be a number 0-32 (decimal, no leading zero)"),
        ("", "not a numeric IP address"),
    ],
)
def test_allowed_ips_refused(value, reason):
    text = f"[Peer]\nPublicKey = {KEY}\nAllowedIPs = 10.9.0.0/16,{value}\n"
    assert error_of(text) == f"{P}:3: [Peer] AllowedIPs: '{value}' is not an IP network ({reason})"


def test_allowed_ips_empty_is_no_networks_as_wg():
    cfg = parse_config(f"[Peer]\nPublicKey = {KEY}\nAllowedIPs =\nAllowedIPs = 10.0.0.0/0\n", P)
    assert cfg.peers[0].allowed_ips == (ipaddress.ip_network("0.0.0.0/0"),)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("FwMark", "0X10", "'0X10' is not a 32-bit number or 'off'"),
        ("FwMark", "0xff_ff", "'0xff_ff' is not a 32-bit number or 'off'"),
        ("FwMark", "0x", "'0x' is not a 32-bit number or 'off'"),
        ("FwMark", "+1", "'+1' is not a 32-bit number or 'off'"),
        ("FwMark", "0x100000000", "'0x100000000' is not a 32-bit number or 'off'"),
        ("FwMark", "4294967296", "'4294967296' is not a 32-bit number or 'off'"),
        ("FwMark", "\u0661", "'\u0661' is not a 32-bit number or 'off'"),
        ("ListenPort", "\u0661\u0662\u0663", "'\u0661\u0662\u0663' is not a port number (0-65535)"),
        ("ListenPort", "+5", "'+5' is not a port number (0-65535)"),
        ("MTU", "\u0661\u0665\u0660\u0660", "'\u0661\u0665\u0660\u0660' is not an MTU (68-65535)"),
        (
            "Table",
            "\u0661\u0660",
            "'\u0661\u0660' is not 'off', 'auto', a table number "
            "(1-4294967295) or a table name from iproute2's rt_tables files",
        ),
        (
            "Address",
            "10.0.0.1/255.255.255.0",
            "'10.0.0.1/255.255.255.0' is not an IP address with "
            "an optional /prefix (the prefix length must be a number 0-32 (decimal, no leading zero))",
        ),
    ],
)
def test_interface_numbers_refused(key, value, message):
    assert error_of(f"[Interface]\n{key} = {value}\n") == f"{P}:2: [Interface] {key}: {message}"


@pytest.mark.parametrize(
    "value,fwmark",
    [("0xFF", 255), ("OFF", 0), ("0xffffffff", 4294967295), ("4294967295", 4294967295), ("010", 10)],
)
def test_fwmark_accepted(value, fwmark):
    assert parse_config(f"[Interface]\nFwMark = {value}\n", P).interface.fwmark == fwmark


@pytest.mark.parametrize("value", ["\u0662\u0665", "+25"])
def test_keepalive_ascii_digits_only(value):
    text = f"[Peer]\nPublicKey = {KEY}\nPersistentKeepalive = {value}\n"
    assert error_of(text) == (
        f"{P}:3: [Peer] PersistentKeepalive: '{value}' is not a number of seconds (0-65535) or 'off'"
    )


# ---------------------------------------------------------------- endpoints


@pytest.mark.parametrize(
    "value,host,port",
    [
        ("::1:51820", "::1", 51820),
        ("2001:db8::1:51820", "2001:db8::1", 51820),  # wg: the port is after the last colon
        ("[2001:db8::1]:51820", "2001:db8::1", 51820),
    ],
)
def test_endpoint_ipv6_without_brackets_split_at_last_colon(value, host, port):
    cfg = parse_config(f"[Peer]\nPublicKey = {KEY}\nEndpoint = {value}\n", P)
    assert cfg.peers[0].endpoint == Endpoint(host, port, value)


@pytest.mark.parametrize("value", ["127.0.0.1:0", "127.0.0.1:65536", "[::1]:0"])
def test_endpoint_port_0_and_65536_refused(value):
    """Stricter than wg (documented): a peer cannot be reached at port 0."""
    text = f"[Peer]\nPublicKey = {KEY}\nEndpoint = {value}\n"
    assert error_of(text) == f"{P}:3: [Peer] Endpoint: '{value}': port must be 1-65535"


def test_duplicate_peer_names_both_lines():
    text = f"[Peer]\nPublicKey = {KEY}\n\n[Peer]\nAllowedIPs = 10.0.0.0/8\nPublicKey = {KEY}\n"
    assert error_of(text) == (
        f"{P}:6: [Peer] PublicKey: the same peer is already defined on "
        "line 1 (wg would merge the two [Peer] sections; vpncrypt refuses)"
    )


# ---------------------------------------------------------------- Table names


def test_table_names_from_rt_tables_files(tmp_path, monkeypatch):
    from vpncrypt.config import rttables

    base = tmp_path / "rt_tables"
    base.write_text("# reserved values\n255\tlocal\n100 vpn # the tunnel's\n")
    (tmp_path / "rt_tables.d").mkdir()
    (tmp_path / "rt_tables.d" / "extra.conf").write_text("0x65 other\n")
    (tmp_path / "rt_tables.d" / "ignored.txt").write_text("102 notread\n")
    monkeypatch.setattr(rttables, "RT_TABLES_FILES", (str(tmp_path / "missing"), str(base)))
    for name in ("vpn", "other", "main", "local", "default"):
        assert parse_config(f"[Interface]\nTable = {name}\n", P).interface.table == name
    for name in ("notread", "nosuchname", "VPN"):
        assert error_of(f"[Interface]\nListenPort = 1\nTable = {name}\n") == (
            f"{P}:3: [Interface] Table: '{name}' is not 'off', 'auto', a table number "
            "(1-4294967295) or a table name from iproute2's rt_tables files"
        )


def test_table_numbers_off_auto():
    assert parse_config("[Interface]\nTable = 4294967295\n", P).interface.table == 4294967295
    assert parse_config("[Interface]\nTable = off\n", P).interface.table == "off"
    assert parse_config("[Interface]\nTable = auto\n", P).interface.table is None
    for value in ("0", "4294967296"):
        assert error_of(f"[Interface]\nTable = {value}\n").startswith(
            f"{P}:2: [Interface] Table: '{value}' is not 'off', 'auto', a table number"
        )
