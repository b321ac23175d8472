"""Daemon pieces that need no namespace: test-only timers, the dual-stack
socket (IPv4 peers through an AF_INET6 socket, and the IPv4 fallback),
endpoint resolution, `vpncrypt show` formatting and the key commands."""

import errno
import json
import os
import secrets
import socket
import subprocess
import sys

import pytest

from tests.daemon import shorttimers
from tests.daemon.shorttimers import protocol_config_from_env
from tests.dataplane.offload_helpers import recv_datagrams
from tests.installed import script, vpncrypt_command
from vpncrypt.cli import up
from vpncrypt.cli.show import format_show
from vpncrypt.daemon.uapiclient import parse_get
from vpncrypt.daemon import udpsocket
from vpncrypt.dataplane.io import UdpBatchSocket
from vpncrypt.endpoints import Endpoint, format_endpoint, resolve_endpoint
from vpncrypt.protocol import keys
from vpncrypt.protocol.timers import ProtocolConfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_test_timers_from_env():
    assert protocol_config_from_env({}) is None
    tc = protocol_config_from_env(
        {"VPNCRYPT_TEST_TIMERS": "rekey_after_time=3, rekey_timeout=0.5,max_staged_packets=7"}
    )
    assert tc == ProtocolConfig(rekey_after_time=3.0, rekey_timeout=0.5, max_staged_packets=7)
    assert isinstance(tc.max_staged_packets, int)
    with pytest.raises(ValueError, match="unknown timer"):
        protocol_config_from_env({"VPNCRYPT_TEST_TIMERS": "bogus=1"})
    with pytest.raises(ValueError, match="not a number"):
        protocol_config_from_env({"VPNCRYPT_TEST_TIMERS": "rekey_timeout=x"})


def test_up_takes_no_timers_from_the_environment(monkeypatch):
    """The product has no test hook: `vpncrypt up` builds its daemon with
    WireGuard's timers whatever the tests' variable says."""
    monkeypatch.setenv("VPNCRYPT_TEST_TIMERS", "rekey_after_time=3,rekey_timeout=1")
    daemon = up.build_daemon("wg0", None, threads=1, tun_offloads="on")
    assert daemon is not None and daemon.protocol_config is None


def test_short_timer_wrapper_runs_up_with_them(monkeypatch):
    """tests/daemon/shorttimers.py parses `up`'s own command line and hands
    the product's `up` the ProtocolConfig of the tests' variable; it runs
    nothing else."""
    import signal

    got = []
    monkeypatch.setattr(
        up, "cmd_up", lambda args, protocol_config=None: got.append((args, protocol_config)) or 7
    )
    monkeypatch.setenv("VPNCRYPT_TEST_TIMERS", "rekey_after_time=2,rekey_timeout=1")
    old = signal.getsignal(signal.SIGHUP)
    try:
        assert shorttimers.main(["up", "wg7", "-c", "/x.conf", "--log-level", "debug"]) == 7
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # held first thing, as `vpncrypt up`
        assert shorttimers.main(["genkey"]) == 2
    finally:
        signal.signal(signal.SIGHUP, old)
    [(args, config)] = got
    assert (args.interface, args.config, args.log_level) == ("wg7", "/x.conf", "debug")
    assert config == ProtocolConfig(rekey_after_time=2.0, rekey_timeout=1.0)
    monkeypatch.setenv("VPNCRYPT_TEST_TIMERS", "rekey_after_time=soon")
    assert shorttimers.main(["up", "wg7"]) == 1
    assert not got[1:]


def test_the_tests_pick_the_wrapper_only_for_short_timers():
    assert vpncrypt_command(None) == vpncrypt_command({"VPNCRYPT_THREADS": "2"}) == [script("vpncrypt")]
    assert vpncrypt_command({"VPNCRYPT_TEST_TIMERS": "rekey_timeout=1"}) == [
        sys.executable,
        "-m",
        "tests.daemon.shorttimers",
    ]


def test_dual_stack_socket_talks_to_ipv4_peers():
    sock = udpsocket.open_udp_socket(0)
    assert sock.family == socket.AF_INET6
    assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
    udp = UdpBatchSocket(sock, batch=8)
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(2)
    try:
        # send from the dual-stack socket to a plain IPv4 endpoint tuple
        sent, err = udp.send_datagrams([(b"hello v4", peer.getsockname())] * 3)
        assert (sent, err) == (3, 0)
        for _ in range(3):
            data, src = peer.recvfrom(100)
            assert data == b"hello v4" and src[1] == sock.getsockname()[1]
        # what comes back is reported as a plain IPv4 (host, port)
        peer.sendto(b"reply", ("127.0.0.1", sock.getsockname()[1]))
        sock.setblocking(True)
        import select

        select.select([sock], [], [], 2)
        got = recv_datagrams(udp)
        assert got == [(b"reply", peer.getsockname())]
        # and that address can be sent to again (v4-mapped on the wire)
        assert udp.send_datagrams([(b"again", got[0][1])]) == (1, 0)
        assert peer.recvfrom(100)[0] == b"again"
    finally:
        peer.close()
        sock.close()


def test_ipv4_fallback_without_ipv6(monkeypatch):
    real = socket.socket

    def fake(family=socket.AF_INET, *a, **kw):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *a, **kw)

    monkeypatch.setattr(udpsocket.socket, "socket", fake)
    sock = udpsocket.open_udp_socket(0)
    try:
        assert sock.family == socket.AF_INET
    finally:
        sock.close()


def test_port_in_use_is_an_error():
    a = udpsocket.open_udp_socket(0)
    try:
        with pytest.raises(OSError) as e:
            udpsocket.open_udp_socket(a.getsockname()[1])
        assert e.value.errno == errno.EADDRINUSE
    finally:
        a.close()


def test_resolve_endpoint():
    assert resolve_endpoint(Endpoint("192.0.2.1", 51820)) == ("192.0.2.1", 51820)
    assert resolve_endpoint(Endpoint("2001:db8::1", 5)) == ("2001:db8::1", 5)
    assert resolve_endpoint(Endpoint("::ffff:192.0.2.7", 5)) == ("192.0.2.7", 5)
    assert resolve_endpoint(Endpoint("localhost", 7), v6=False) == ("127.0.0.1", 7)
    with pytest.raises(OSError) as e:
        resolve_endpoint(Endpoint("2001:db8::1", 5), v6=False)
    assert e.value.errno == errno.EAFNOSUPPORT
    with pytest.raises(OSError) as e:
        resolve_endpoint(Endpoint("no-such-host.invalid", 5))
    assert e.value.errno == errno.EADDRNOTAVAIL
    assert format_endpoint(("192.0.2.1", 1)) == "192.0.2.1:1"
    assert format_endpoint(("fe80::1", 1, 0, 3)) == "[fe80::1%3]:1"
    assert format_endpoint(Endpoint("2001:db8::1", 5)) == "[2001:db8::1]:5"


def test_show_format():
    priv = keys.genkey()
    peer = keys.pubkey(keys.genkey())
    text = (
        f"private_key={keys.decode(priv).hex()}\nlisten_port=51820\n"
        f"public_key={keys.decode(peer).hex()}\npreshared_key={'11' * 32}\n"
        "protocol_version=1\nendpoint=192.0.2.1:51820\nlast_handshake_time_sec=1000\n"
        "last_handshake_time_nsec=0\ntx_bytes=2048\nrx_bytes=100\n"
        "persistent_keepalive_interval=25\nallowed_ip=10.0.0.2/32\n"
        "vpncrypt_drop_bad_tag=3\nvpncrypt_drop_replay=0\nvpncrypt_handshakes_completed=1\n"
        "errno=0\n\n"
    )
    dev = parse_get(text)
    out = format_show("wg0", dev, now=1065)
    assert f"public key: {keys.pubkey(priv)}" in out
    assert "private key: (hidden)" in out and priv not in out
    assert f"peer: {peer}" in out and "preshared key: (hidden)" in out
    assert "latest handshake: 1 minute, 5 seconds ago" in out
    assert "transfer: 100 B received, 2.00 KiB sent" in out
    assert "persistent keepalive: every 25 seconds" in out
    assert "drops:\n  bad_tag: 3" in out and "replay" not in out
    with pytest.raises(OSError):
        parse_get("errno=-22\n\n")


def test_show_treats_an_all_zero_preshared_key_as_none():
    """wireguard-go answers get=1 with 64 zero digits for a peer without a
    preshared key; `wg show` prints no preshared key line for it."""
    peer = keys.pubkey(keys.genkey())
    text = (
        f"public_key={keys.decode(peer).hex()}\npreshared_key={'0' * 64}\nallowed_ip=10.0.0.2/32\nerrno=0\n\n"
    )
    dev = parse_get(text)
    assert "preshared_key" not in dev["peers"][0]
    assert "preshared key" not in format_show("wg0", dev)
    from vpncrypt.cli.show import show_json

    assert show_json("wg0", dev, ours=False)["peers"][0]["preshared_key"] is None
    one = parse_get(text.replace("0" * 63 + "\n", "0" * 62 + "1\n"))
    assert "preshared key: (hidden)" in format_show("wg0", one)


def _cli(*args, input=None):
    return subprocess.run(
        [script("vpncrypt"), *args], input=input, capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_key_commands_match_wg():
    priv = _cli("genkey").stdout.strip()
    assert len(keys.decode(priv)) == 32
    pub = _cli("pubkey", input=priv + "\n").stdout.strip()
    assert pub == keys.pubkey(priv)
    wg = subprocess.run(["wg", "pubkey"], input=priv, capture_output=True, text=True)
    assert wg.returncode == 0 and wg.stdout.strip() == pub
    assert len(keys.decode(_cli("genpsk").stdout.strip())) == 32
    bad = _cli("pubkey", input="nonsense\n")
    assert bad.returncode == 1 and "correct length or format" in bad.stderr


def test_pubkey_refuses_noncanonical_keys_like_wg():
    """A key whose unused base64 bits are set names the same bytes as the
    canonical one: wg refuses it, and so does vpncrypt, in wg's words."""
    from tests.daemon.test_config import noncanonical

    priv = keys.genkey()
    bad = noncanonical(priv)
    assert keys.decode(bad) == keys.decode(priv)
    wg = subprocess.run(["wg", "pubkey"], input=bad + "\n", capture_output=True, text=True)
    assert wg.returncode == 1 and "Key is not the correct length or format" in wg.stderr
    ours = _cli("pubkey", input=bad + "\n")
    assert ours.returncode == 1 and ours.stdout == ""
    assert ours.stderr == "vpncrypt pubkey: Key is not the correct length or format\n"
    assert _cli("pubkey", input=priv + "\n").stdout.strip() == keys.pubkey(priv)


@pytest.mark.parametrize(
    "cmd", [[], ["up"], ["genkey"], ["pubkey"], ["genpsk"], ["show"], ["bench"], ["loopback-bench"]]
)
def test_help_everywhere(cmd):
    r = _cli(*cmd, "--help")
    assert r.returncode == 0 and "usage:" in r.stdout


def test_vpncrypt_go_help():
    r = subprocess.run([script("vpncrypt-go"), "--help"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and "-f, --foreground" in r.stdout


def test_up_rejects_bad_interface_name():
    r = _cli("up", "bad/name")
    assert r.returncode == 1 and "invalid interface name" in r.stderr


def test_housekeeping_keeps_one_pending_timer_each(tmp_path):
    """The daemon's housekeeping tick and watchdog ping re-arm themselves: after
    hundreds of rounds only one handle of each is pending (none piles up)."""
    assert os.geteuid() == 0, "this test needs root (a TUN device in a namespace)"
    ns = "vctk" + secrets.token_hex(3)
    script = """
import asyncio, json, os
import vpncrypt.daemon.daemon as s
s.TICK = 0.002
os.environ["NOTIFY_SOCKET"] = "@vpncrypt-test-none"
os.environ["WATCHDOG_USEC"] = "4000"
async def main():
    up = asyncio.Event()
    d = s.Daemon("vctick0", socket_dir=%r, on_ready=up.set)
    task = asyncio.ensure_future(d.run())
    await asyncio.wait_for(up.wait(), 30)  # started (READY=1), then about 500 rounds
    await asyncio.sleep(1.0)
    held = len(d._timers)
    d.stop(0)
    code = await task
    print(json.dumps({"held": held, "code": code}))
asyncio.run(main())
""" % str(tmp_path)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["code"] == 0
        assert res["held"] == 2, res  # one tick, one watchdog ping, after ~500 rounds
    finally:
        subprocess.run(["ip", "netns", "del", ns])
