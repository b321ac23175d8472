"""A daemon that cannot start says why in one line, `FILE:LINE: [Section]
Key: reason` for config errors, without a logger prefix or an errno number;
exits 1; leaves nothing behind; and logs no "down" for what never came up
(issue 10 f)."""

import os
import re
import subprocess
import time

import pytest

from tests.interop.lab import need
from vpncrypt.protocol import keys


def _fails(lab, node, text, **kw):
    path = node.write_conf(text)
    proc = lab.spawn_vpncrypt("A", node.iface, path, wait_ready=False, log_level="info", **kw)
    rc = proc.popen.wait(30)
    out = proc.log()
    assert rc == 1, out
    lines = out.splitlines()
    assert len(lines) == 1, out
    line = lines[0]
    assert not re.match(r"^\d{4}-\d\d-\d\d", line) and "vpncrypt." not in line, line
    assert "Errno" not in line and not re.search(r"\[\d+\]", line), line
    assert not lab.link_exists("A", node.iface), out
    assert not os.path.exists(node.sock), out
    routes = lab.run_in("A", "ip", "route", "show").stdout
    assert node.iface not in routes, routes
    return path, line


def _line_of(text, start):
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


@pytest.mark.parametrize(
    "endpoint, reason",
    [
        ("no-such-host!.invalid:51820", "host name"),
        ("x-" * 32 + "y.example:51820", "not a valid host name"),  # labels are 1-63 (RFC 1035)
        ("[fe80::1%nosuchif0]:51820", "nosuchif0"),
    ],
    ids=["malformed", "label-too-long", "zone-of-no-interface"],
)
def test_bad_endpoint_names_the_endpoint_line(lab, endpoint, reason):
    """A malformed Endpoint, or a numeric one whose zone names no interface.
    (A name that does not resolve is no error at start: the peer waits for
    it, tests/interop/test_endpoint_names_live.py.)"""
    a = lab.node("A", "vpncrypt")
    text = a.conf([{"public": keys.pubkey(keys.genkey()), "allowed": "10.9.0.0/24", "endpoint": endpoint}])
    path, line = _fails(lab, a, text)
    n = _line_of(text, "Endpoint")
    assert line.startswith(f"{path}:{n}: [Peer] Endpoint: ") and reason in line, line


def test_bad_preshared_key_points_at_genpsk(lab):
    a = lab.node("A", "vpncrypt")
    text = a.conf([{"public": keys.pubkey(keys.genkey()), "psk": "tooshort="}])
    path, line = _fails(lab, a, text)
    n = _line_of(text, "PresharedKey")
    assert line == (
        f"{path}:{n}: [Peer] PresharedKey: Key is not the correct length or format "
        "(44 characters of base64, as printed by `wg genpsk`)"
    ), line


def test_unknown_key(lab):
    a = lab.node("A", "vpncrypt")
    path, line = _fails(lab, a, "[Interface]\nListenPort = 1\nBogus = 1\n")
    assert line == f"{path}:3: [Interface] Bogus: unknown key", line


def test_port_in_use_names_the_listen_port_line(lab):
    a = lab.node("A", "vpncrypt")
    holder = lab.popen_in(
        "A",
        "python3",
        "-c",
        "import socket, sys, time; s = socket.socket(socket.AF_INET6, "
        "socket.SOCK_DGRAM); s.bind(('::', 51820)); print('bound', flush=True); "
        "time.sleep(60)",
    )
    assert holder.stdout.readline().strip() == "bound"
    text = a.conf([])
    path, line = _fails(lab, a, text)
    n = _line_of(text, "ListenPort")
    assert line == (f"{path}:{n}: [Interface] ListenPort: UDP port 51820: Address already in use"), line


def test_interface_held_by_another_daemon(lab):
    """wireguard-go holds the interface: said in words, found at its live
    UAPI socket before the TUN is touched."""
    need("wireguard-go")
    a = lab.node("A", "vpncrypt")
    go = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns["A"], "wireguard-go", "-f", a.iface],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "WG_PROCESS_FOREGROUND": "1"},
    )
    try:
        for _ in range(100):
            if lab.link_exists("A", a.iface):
                break
            time.sleep(0.05)
        proc = lab.spawn_vpncrypt(
            "A", a.iface, a.write_conf(a.conf([], listen=False)), wait_ready=False, log_level="info"
        )
        assert proc.popen.wait(30) == 1
        out = proc.log()
        assert out.splitlines() == [
            f"cannot start {a.iface}: another daemon serves it (/var/run/wireguard/{a.iface}.sock answers)"
        ], out
        assert lab.link_exists("A", a.iface), "the other daemon's interface must stay"
    finally:
        go.terminate()
        go.wait(10)


def test_example_config_copied_as_it_is_does_not_start(lab):
    # `cp config/wg0.conf.example x.conf` once started a tunnel with keys
    # anyone could read in the repository; its placeholders are refused now
    from tests.example_configs import example_text

    a = lab.node("A", "vpncrypt")
    text = example_text("wg0.conf.example")
    path, line = _fails(lab, a, text)
    n = _line_of(text, "PrivateKey")
    assert line == (
        f"{path}:{n}: [Interface] PrivateKey: a placeholder, not a key: "
        "generate one with `umask 077; wg genkey` (its public key: `wg pubkey`)"
    ), line
