import base64
import errno
import ipaddress
import os
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from tests.daemon.fakes import FakeControl, uapi_server
from vpncrypt.endpoints import zone_index
from vpncrypt.config.ops import (
    Endpoint,
    PeerUpdate,
    RemovePeer,
    ReplacePeers,
    SetFwmark,
    SetListenPort,
    SetPrivateKey,
)
from vpncrypt.daemon.control import InterfaceSnapshot, PeerSnapshot
from vpncrypt.daemon.uapiclient import read_answer
from vpncrypt.daemon.uapi import (
    UAPIError,
    apply_operations,
    format_get,
    handle_request,
    parse_set,
    start_uapi_server,
)

K1, K2, K3 = bytes(range(32)), bytes([0x11] * 32), bytes([0xA5] * 32)


def b64(k):
    return base64.b64encode(k).decode()


def net(s):
    return ipaddress.ip_network(s)


# ---------------------------------------------------------------- parse_set


def _k2_with_everything(host, port, *allowed):
    """Peer K2 with preshared key K3, an endpoint [host]:port, keepalive 25 and
    `allowed` replacing its allowed IPs."""
    return PeerUpdate(
        public_key=K2,
        preshared_key=K3,
        endpoint=Endpoint(host, port, f"[{host}]:{port}"),
        persistent_keepalive=25,
        replace_allowed_ips=True,
        allowed_ips=tuple(net(a) for a in allowed),
    )


def test_parse_set_full_request():
    body = (
        f"private_key={K1.hex()}\nlisten_port=51820\nfwmark=4660\nreplace_peers=true\n"
        f"public_key={K2.hex()}\npreshared_key={K3.hex()}\nprotocol_version=1\n"
        "endpoint=[2001:db8::1]:51820\npersistent_keepalive_interval=25\n"
        "replace_allowed_ips=true\nallowed_ip=10.0.0.0/24\nallowed_ip=fd00::1/128\n"
        f"public_key={K3.hex()}\nremove=true\n"
        f"public_key={K1.hex()}\nupdate_only=true\nendpoint=192.0.2.1:1\n\n"
    )
    ops = parse_set(body)
    assert ops == [
        SetPrivateKey(K1),
        SetListenPort(51820),
        SetFwmark(4660),
        ReplacePeers(),
        _k2_with_everything("2001:db8::1", 51820, "10.0.0.0/24", "fd00::1/128"),
        RemovePeer(K3),
        PeerUpdate(public_key=K1, update_only=True, endpoint=Endpoint("192.0.2.1", 1, "192.0.2.1:1")),
    ]
    assert ops[5].public_key == K3 and isinstance(ops[5].public_key, bytes)


def test_parse_set_zero_private_key_removes_it():
    assert parse_set(f"private_key={'0' * 64}\n") == [SetPrivateKey(None)]


def test_parse_set_empty_is_no_op():
    assert parse_set("") == []


@pytest.mark.parametrize(
    "body",
    [
        "private_key=zz\n",
        f"private_key={K1.hex()[:-2]}\n",
        "listen_port=65536\n",
        "listen_port=-1\n",
        "fwmark=4294967296\n",
        "replace_peers=false\n",
        f"preshared_key={K1.hex()}\n",  # peer key before public_key
        f"public_key={K1.hex()}\nprivate_key={K2.hex()}\n",  # device key after a peer
        "bogus=1\n",
        f"public_key={K1.hex()}\nbogus=1\n",
        f"public_key={K1.hex()}\nendpoint=example.com:51820\n",
        f"public_key={K1.hex()}\nendpoint=2001:db8::1:51820\n",
        f"public_key={K1.hex()}\nendpoint=192.0.2.1\n",
        f"public_key={K1.hex()}\nendpoint=192.0.2.1:65536\n",
        f"public_key={K1.hex()}\nallowed_ip=10.0.0.1\n",
        f"public_key={K1.hex()}\nallowed_ip=10.0.0.300/32\n",
        f"public_key={K1.hex()}\nprotocol_version=2\n",
        f"public_key={K1.hex()}\npersistent_keepalive_interval=65536\n",
        f"public_key={K1.hex()}\nremove=yes\n",
        "listen_port=1\n\nlisten_port=2\n",
    ],
)
def test_parse_set_rejects(body):
    with pytest.raises(UAPIError) as ei:
        parse_set(body)
    assert ei.value.errno == errno.EINVAL


def test_malformed_set_changes_nothing():
    c = FakeControl()
    body = f"private_key={K1.hex()}\nlisten_port=1\npublic_key={K2.hex()}\nallowed_ip=bad\n"
    assert handle_request("set=1", body, c) == b"errno=-22\n\n"
    assert c.calls == [] and c.private_key is None and c.listen_port == 0


def test_apply_update_only_skips_unknown_peer():
    c = FakeControl()
    apply_operations([PeerUpdate(public_key=K1, update_only=True, persistent_keepalive=5)], c)
    assert c.calls == []
    apply_operations(
        [
            PeerUpdate(public_key=K1, persistent_keepalive=5),
            PeerUpdate(public_key=K1, update_only=True, persistent_keepalive=6),
        ],
        c,
    )
    assert c.peers[K1].persistent_keepalive == 6


def test_control_errors_become_errno():
    class Busy(FakeControl):
        def set_listen_port(self, port):
            raise OSError(errno.EADDRINUSE, "in use")

    assert handle_request("set=1", "listen_port=1\n", Busy()) == b"errno=-98\n\n"

    class Broken(FakeControl):
        def snapshot(self):
            raise RuntimeError("boom")

    assert handle_request("get=1", "", Broken()) == b"errno=-5\n\n"


# ---------------------------------------------------------------- format_get


def test_format_get_exact():
    snap = InterfaceSnapshot(
        private_key=K1,
        listen_port=51820,
        fwmark=0,
        peers=[
            PeerSnapshot(
                public_key=K2,
                preshared_key=K3,
                endpoint=("2001:db8::1", 5),
                persistent_keepalive=25,
                allowed_ips=[net("10.0.0.0/24"), "fd00::/64"],
                last_handshake_time_sec=1700000000,
                last_handshake_time_nsec=42,
                rx_bytes=10,
                tx_bytes=20,
            ),
            PeerSnapshot(public_key=K3),
        ],
        counters={"drop_bad_mac": 2},
    )
    assert format_get(snap) == (
        f"private_key={K1.hex()}\nlisten_port=51820\n"
        f"public_key={K2.hex()}\npreshared_key={K3.hex()}\nprotocol_version=1\n"
        "endpoint=[2001:db8::1]:5\nlast_handshake_time_sec=1700000000\n"
        "last_handshake_time_nsec=42\ntx_bytes=20\nrx_bytes=10\n"
        "persistent_keepalive_interval=25\nallowed_ip=10.0.0.0/24\nallowed_ip=fd00::/64\n"
        f"public_key={K3.hex()}\nprotocol_version=1\nlast_handshake_time_sec=0\n"
        "last_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\n"
        "persistent_keepalive_interval=0\nerrno=0\n\n"
    )
    ext = format_get(snap, extensions=True)
    assert ext.endswith("vpncrypt_drop_bad_mac=2\nerrno=0\n\n")


def test_format_get_empty_device():
    assert format_get(InterfaceSnapshot()) == "errno=0\n\n"


# ---------------------------------------------------------------- the server, raw socket

_recv_reply = read_answer


@pytest.fixture
def raw_server(loop_thread, tmp_path):
    path = str(tmp_path / "wgtest.sock")
    control = FakeControl()
    with uapi_server(loop_thread, path, control) as server:
        yield path, control, server


def test_socket_mode_and_many_requests_per_connection(raw_server):
    path, control, _ = raw_server
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(f"set=1\nprivate_key={K1.hex()}\nlisten_port=4242\n\n".encode())
        assert _recv_reply(s) == b"errno=0\n\n"
        s.sendall(b"set=1\nlisten_port=99999\n\n")  # malformed
        assert _recv_reply(s) == b"errno=-22\n\n"
        s.sendall(b"get=1\nextra=1\n\n")  # get with arguments
        assert _recv_reply(s) == b"errno=-22\n\n"
        s.sendall(b"set=1\n\xff\xfe\n\n")  # not text, no '='
        assert _recv_reply(s) == b"errno=-71\n\n"
        s.sendall(b"set=1\nlisten_port=\xff\n\n")  # not text
        assert _recv_reply(s) == b"errno=-22\n\n"
        s.sendall(b"get=1\n\n")
        reply = _recv_reply(s).decode()
        assert reply == f"private_key={K1.hex()}\nlisten_port=4242\nerrno=0\n\n"
        s.sendall(b"get=vpncrypt\n\n")
        reply = _recv_reply(s).decode()
        assert "vpncrypt_drop_bad_mac=3\n" in reply and "vpncrypt_drop_no_route=7\n" in reply
        assert reply.endswith("errno=0\n\n")
    assert control.listen_port == 4242


@pytest.mark.parametrize("request_", [b"frobnicate=1\n\n", b"get=1\r\n\r\n", b"set=1\r\n\r\n"])
def test_unknown_operation_is_refused_at_once_and_ends_the_connection(raw_server, request_):
    """As wireguard-go: the operation line is judged as soon as it arrives, so
    `get=1\\r\\n` never waits for a blank line; the connection then ends."""
    path, control, _ = raw_server
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(path)
        s.sendall(request_)
        assert _recv_reply(s) == b"errno=-22\n\n"
        assert s.recv(100) == b""  # closed by the server, not by a timeout
    assert control.calls == []


def test_set_ending_at_eof_is_applied(raw_server):
    """A set=1 request cut by EOF (no blank line) is applied and answered,
    as wireguard-go does."""
    path, control, _ = raw_server
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(path)
        s.sendall(f"set=1\nlisten_port=4243\npublic_key={K2.hex()}\nallowed_ip=10.1.0.0/16".encode())
        s.shutdown(socket.SHUT_WR)
        assert _recv_reply(s) == b"errno=0\n\n"
    assert control.listen_port == 4243
    assert control.peers[K2].allowed_ips == [net("10.1.0.0/16")]


def test_pipelined_requests(raw_server):
    path, control, _ = raw_server
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"set=1\nlisten_port=1\n\nset=1\nlisten_port=x\n\nget=1\n\n")
        buf = b""
        while buf.count(b"\n\n") < 3:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
    assert buf == b"errno=0\n\nerrno=-22\n\nlisten_port=1\nerrno=0\n\n"


def test_socket_removed_on_close_and_stale_socket_replaced(loop_thread, tmp_path):
    path = str(tmp_path / "x.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()  # a socket file nobody listens on
    server = loop_thread.run(start_uapi_server(path, FakeControl()))

    async def stop():
        server.close()
        await server.wait_closed()

    try:
        with pytest.raises(OSError) as ei:  # a second daemon on the same path
            loop_thread.run(start_uapi_server(path, FakeControl()))
        assert ei.value.errno == errno.EADDRINUSE
        assert os.path.exists(path)
    finally:
        loop_thread.run(stop())
    assert not os.path.exists(path)


def test_refuses_other_uids(loop_thread):
    assert os.geteuid() == 0, "this test needs root to connect as another uid"
    import shutil
    import tempfile

    tmpdir = tempfile.mkdtemp(prefix="vpncrypt-uapi-", dir="/tmp")
    os.chmod(tmpdir, 0o755)  # the unprivileged client must reach the socket
    path = os.path.join(tmpdir, "p.sock")
    control = FakeControl()
    server = loop_thread.run(start_uapi_server(path, control))

    async def stop():
        server.close()
        await server.wait_closed()

    try:
        os.chmod(path, 0o666)  # let the unprivileged client reach the check
        script = textwrap.dedent(f"""
            import os, socket
            os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX); s.connect({path!r})
            buf = b""  # the refusal comes before any request is read
            while True:
                c = s.recv(4096)
                if not c: break
                buf += c
            print(buf.decode().strip())
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "errno=-1"
        assert control.calls == []
        with socket.socket(socket.AF_UNIX) as s:  # root is still served
            s.connect(path)
            s.sendall(b"get=1\n\n")
            assert _recv_reply(s) == b"errno=0\n\n"
    finally:
        try:
            loop_thread.run(stop())
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)


# ---------------------------------------------------------------- the real `wg`


def _wg(wg_tool, *args, input=None):
    r = subprocess.run([wg_tool, *args], capture_output=True, text=True, input=input, timeout=20)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def test_wg_show_and_showconf(wg_server, wg_tool):
    name, control, _ = wg_server
    control.private_key = K1
    control.listen_port = 51820
    control.fwmark = 0x42
    control.peers[K2] = PeerSnapshot(
        public_key=K2,
        preshared_key=K3,
        endpoint=("192.0.2.7", 51821),
        allowed_ips=[net("10.0.0.2/32"), net("fd00::2/128")],
        persistent_keepalive=25,
        rx_bytes=1000,
        tx_bytes=2000,
        last_handshake_time_sec=1700000000,
    )
    out = _wg(wg_tool, "show", name)
    assert f"interface: {name}" in out
    assert "listening port: 51820" in out and "fwmark: 0x42" in out
    assert f"peer: {b64(K2)}" in out and "endpoint: 192.0.2.7:51821" in out
    assert "allowed ips: 10.0.0.2/32, fd00::2/128" in out
    assert "persistent keepalive: every 25 seconds" in out
    assert "1000 B received, 1.95 KiB sent" in out
    conf = _wg(wg_tool, "showconf", name)
    assert f"PrivateKey = {b64(K1)}" in conf and f"PresharedKey = {b64(K3)}" in conf
    assert "ListenPort = 51820" in conf and "FwMark = 0x42" in conf
    assert "AllowedIPs = 10.0.0.2/32, fd00::2/128" in conf
    assert "Endpoint = 192.0.2.7:51821" in conf and "PersistentKeepalive = 25" in conf
    dump = _wg(wg_tool, "show", name, "dump").splitlines()
    assert dump[1].split("\t") == [
        b64(K2),
        b64(K3),
        "192.0.2.7:51821",
        "10.0.0.2/32,fd00::2/128",
        "1700000000",
        "1000",
        "2000",
        "25",
    ]
    assert _wg(wg_tool, "show", name, "listen-port").strip() == "51820"


def test_wg_show_tolerates_extension_lines(wg_server, wg_tool):
    name, control, server = wg_server
    server.extensions_in_get = True  # wg skips keys it does not know
    control.listen_port = 1
    assert "listening port: 1" in _wg(wg_tool, "show", name)


def test_wg_set(wg_server, wg_tool, tmp_path):
    name, control, _ = wg_server
    keyfile = tmp_path / "key"
    keyfile.write_text(b64(K1) + "\n")
    pskfile = tmp_path / "psk"
    pskfile.write_text(b64(K3) + "\n")
    _wg(
        wg_tool,
        "set",
        name,
        "private-key",
        str(keyfile),
        "listen-port",
        "51000",
        "fwmark",
        "0x10",
        "peer",
        b64(K2),
        "preshared-key",
        str(pskfile),
        "endpoint",
        "[2001:db8::5]:1234",
        "persistent-keepalive",
        "25",
        "allowed-ips",
        "10.0.0.2/32,fd00::2/128",
    )
    assert control.calls[:3] == [("set_private_key", K1), ("set_listen_port", 51000), ("set_fwmark", 16)]
    op = control.calls[3][1]
    assert op == _k2_with_everything("2001:db8::5", 1234, "10.0.0.2/32", "fd00::2/128")
    assert len(control.calls) == 4
    # change only the allowed IPs, then remove the peer
    control.calls.clear()
    _wg(wg_tool, "set", name, "peer", b64(K2), "allowed-ips", "10.9.0.0/16")
    assert control.calls == [
        (
            "upsert_peer",
            PeerUpdate(public_key=K2, replace_allowed_ips=True, allowed_ips=(net("10.9.0.0/16"),)),
        )
    ]
    assert control.peers[K2].allowed_ips == [net("10.9.0.0/16")]
    control.calls.clear()
    _wg(wg_tool, "set", name, "peer", b64(K2), "remove")
    assert control.calls == [("remove_peer", K2)] and not control.peers


def _write_conf(tmp_path, peer):
    """A wg config file: the interface K1 on port 51820 and one [Peer] of `peer` lines."""
    p = tmp_path / "wg.conf"
    p.write_text(
        f"[Interface]\nPrivateKey = {b64(K1)}\nListenPort = 51820\n\n[Peer]\n{textwrap.dedent(peer)}"
    )
    os.chmod(p, 0o600)
    return str(p)


def test_wg_setconf_and_syncconf(wg_server, wg_tool, tmp_path):
    name, control, _ = wg_server
    control.peers[K3] = PeerSnapshot(public_key=K3, allowed_ips=[net("10.0.0.3/32")])
    conf = _write_conf(
        tmp_path,
        f"""\
        PublicKey = {b64(K2)}
        AllowedIPs = 10.0.0.2/32
        Endpoint = 192.0.2.1:51820
        """,
    )
    _wg(wg_tool, "setconf", name, conf)
    assert control.call_names() == [
        "set_private_key",
        "set_listen_port",
        "set_fwmark",
        "replace_peers",
        "upsert_peer",
    ]
    assert control.calls[2] == ("set_fwmark", 0)
    assert list(control.peers) == [K2]
    assert control.peers[K2].endpoint == Endpoint("192.0.2.1", 51820, "192.0.2.1:51820")

    # syncconf: K2 changes keepalive, K3 is added; nothing is replaced wholesale
    control.calls.clear()
    conf = _write_conf(tmp_path, f"PublicKey = {b64(K3)}\nAllowedIPs = 10.0.0.3/32\n")
    _wg(wg_tool, "syncconf", name, conf)
    names = control.call_names()
    assert "replace_peers" not in names
    assert ("remove_peer", K2) in control.calls
    assert list(control.peers) == [K3]
    assert control.peers[K3].allowed_ips == [net("10.0.0.3/32")]


# ---------------------------------------------------------------- parity with wireguard-go


@pytest.mark.parametrize(
    "value",
    [
        "10.1.0.0/255.255.0.0",
        "10.0.0.0/0.0.255.255",
        "fe80::1%eth0/128",
        "10.0.0.0/024",
        "10.0.0.0/00",
        "10.0.0.0/+8",
        "10.0.0.0/\u0668",
        "10.0.0.0/33",
        "fd00::/129",
        "10.0.0.0/",
    ],
)
def test_allowed_ip_refused_as_netip_parseprefix(value):
    c = FakeControl()
    body = f"public_key={K1.hex()}\nallowed_ip={value}\n"
    assert handle_request("set=1", body, c) == b"errno=-22\n\n"
    assert c.calls == []


def test_allowed_ip_zero_prefix_accepted():
    ops = parse_set(f"public_key={K1.hex()}\nallowed_ip=10.0.0.0/0\nallowed_ip=::/0\n")
    assert ops[0].allowed_ips == (net("0.0.0.0/0"), net("::/0"))


@pytest.mark.parametrize(
    "body,reply",
    [
        ("listen_port\n", b"errno=-71\n\n"),  # no '=': EPROTO
        (f"public_key={K1.hex()}\nremove\n", b"errno=-71\n\n"),
        ("=1\n", b"errno=-22\n\n"),  # an empty key is just unknown
    ],
)
def test_line_without_equals_is_a_protocol_error(body, reply):
    c = FakeControl()
    assert handle_request("set=1", "listen_port=7\n" + body, c) == reply
    assert c.calls == []


def test_unknown_zone_changes_nothing():
    """The zone's interface is looked up before anything is applied."""
    c = FakeControl()
    body = (
        f"private_key={K1.hex()}\npublic_key={K2.hex()}\nallowed_ip=10.0.0.0/8\n"
        f"public_key={K3.hex()}\nendpoint=[fe80::1%nosuchif]:5\n"
    )
    assert handle_request("set=1", body, c) == b"errno=-99\n\n"
    assert c.calls == [] and c.private_key is None and c.peers == {}
    ops = parse_set(f"public_key={K3.hex()}\nendpoint=[fe80::1%lo]:5\n")
    assert ops[0].endpoint == Endpoint("fe80::1%lo", 5, "[fe80::1%lo]:5")


def test_body_line_over_the_limit_is_eio(raw_server):
    """wireguard-go's line scanner (64 KiB) fails with EIO; so does vpncrypt's."""
    path, control, _ = raw_server
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(b"set=1\nlisten_port=1" + b"0" * (70 * 1024) + b"\n\n")
        assert _recv_reply(s) == b"errno=-5\n\n"
    assert control.calls == []


# ---------------------------------------------------------------- CRLF and long numbers (wireguard-go parity)

# wireguard-go reads a set body with Go's bufio.Scanner (ScanLines), which drops
# one "\r" at the end of each line, and parses numbers with strconv.ParseUint.


def test_parse_set_drops_one_final_cr_of_each_line():
    assert parse_set("fwmark=11\r\n\r\n") == [SetFwmark(11)]
    assert parse_set(f"listen_port=7\r\npublic_key={K1.hex()}\nendpoint=192.0.2.1:5\r\n") == [
        SetListenPort(7),
        PeerUpdate(public_key=K1, endpoint=Endpoint("192.0.2.1", 5, "192.0.2.1:5")),
    ]
    assert parse_set("fwmark=11\r") == [SetFwmark(11)]  # the last line, cut by EOF
    c = FakeControl()
    assert handle_request("set=1", "fwmark=11\r\nlisten_port=9\r\n", c) == b"errno=0\n\n"
    assert c.fwmark == 11 and c.listen_port == 9


@pytest.mark.parametrize(
    "body,reply",
    [
        ("fwmark=1\r1\n", b"errno=-22\n\n"),  # a "\r" inside a line stays in it
        ("fwmark=11\r\r\n", b"errno=-22\n\n"),  # only one "\r" is dropped
        ("fwmark=\r11\n", b"errno=-22\n\n"),
        ("fwmark=1\r\n\r\nfwmark=2\n", b"errno=-22\n\n"),  # "\r\n" alone is a blank line
        ("fwmark=1\n\r\r\n", b"errno=-71\n\n"),  # the line "\r": no '='
    ],
)
def test_parse_set_keeps_any_other_cr(body, reply):
    c = FakeControl()
    assert handle_request("set=1", body, c) == reply
    assert c.calls == []


def test_crlf_body_through_the_socket(raw_server):
    """Answered at its blank line "\\r\\n" (vpncrypt waited for "\\n\\n" until
    its 5 s request timeout), on a connection that goes on."""
    path, control, _ = raw_server
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(3)
        s.connect(path)
        s.sendall(b"set=1\nfwmark=11\r\n\r\n")  # the outside review's request
        assert _recv_reply(s) == b"errno=0\n\n"
        s.sendall(f"set=1\nlisten_port=5\r\npublic_key={K2.hex()}\nallowed_ip=10.0.0.0/8\n\r\n".encode())
        assert _recv_reply(s) == b"errno=0\n\n"
        s.sendall(b"set=1\n\r\n")  # an empty body
        assert _recv_reply(s) == b"errno=0\n\n"
        s.sendall(b"set=1\nfwmark=10\n\r\n")  # a "\n" line, then a "\r\n" blank line
        assert _recv_reply(s) == b"errno=0\n\n"
        s.sendall(b"get=1\n\r\n")  # get takes no arguments, not even a blank line
        assert _recv_reply(s) == b"errno=-22\n\n"
        s.sendall(b"get=1\n\n")
        reply = _recv_reply(s)
        assert reply.startswith(b"listen_port=5\nfwmark=10\npublic_key=" + K2.hex().encode() + b"\n")
        assert reply.endswith(b"\nallowed_ip=10.0.0.0/8\nerrno=0\n\n")
        s.sendall(b"set=1\nfwmark=12\r")  # the last line, cut by EOF after its "\r"
        s.shutdown(socket.SHUT_WR)
        assert _recv_reply(s) == b"errno=0\n\n"
    assert control.calls[:2] == [("set_fwmark", 11), ("set_listen_port", 5)]
    assert ("set_fwmark", 10) in control.calls
    assert control.fwmark == 12


def test_numbers_take_any_number_of_leading_zeros():
    c = FakeControl()  # the outside review's request: 65,526 zeros, then 5
    assert handle_request("set=1", "fwmark=" + "0" * 65526 + "5\n", c) == b"errno=0\n\n"
    assert c.calls == [("set_fwmark", 5)]
    assert parse_set("fwmark=" + "0" * 65528 + "\n") == [SetFwmark(0)]  # 65,535 bytes: the longest line
    assert parse_set("fwmark=" + "0" * 5000 + "4294967295\n") == [SetFwmark(0xFFFFFFFF)]
    assert parse_set("listen_port=" + "0" * 65000 + "51820\n") == [SetListenPort(51820)]
    ops = parse_set(f"public_key={K1.hex()}\npersistent_keepalive_interval={'0' * 65000}25\n")
    assert ops == [PeerUpdate(public_key=K1, persistent_keepalive=25)]


@pytest.mark.parametrize(
    "body",
    [
        "fwmark=" + "0" * 5000 + "4294967296",
        "fwmark=" + "9" * 5000,
        "listen_port=" + "0" * 5000 + "65536",
        "listen_port=" + "1" * 65000,
        f"public_key={K1.hex()}\npersistent_keepalive_interval={'0' * 5000}65536",
        "fwmark=+5",
        "fwmark=-0",
        "fwmark= 5",
        "fwmark=5 ",
        "fwmark=",
        "fwmark=0x10",
        "fwmark=1_000",
        "listen_port=+" + "0" * 5000 + "1",
        f"public_key={K1.hex()}\npersistent_keepalive_interval=+25",
        f"public_key={K1.hex()}\nprotocol_version=01",  # wireguard-go compares the text with "1"
    ],
)
def test_numbers_refused_as_strconv_parseuint(body):
    c = FakeControl()
    assert handle_request("set=1", body + "\n", c) == b"errno=-22\n\n"
    assert c.calls == []


def test_endpoint_port_takes_any_number_of_leading_zeros():
    """wireguard-go reads an endpoint's port with strconv.ParseUint too
    (vpncrypt refused 5,000 zeros and a 5 with -22, Python's digit limit)."""
    value = "192.0.2.1:" + "0" * 5000 + "5"
    assert parse_set(f"public_key={K1.hex()}\nendpoint={value}\n") == [
        PeerUpdate(public_key=K1, endpoint=Endpoint("192.0.2.1", 5, value))
    ]
    for zero in ("0" * 5000, "0"):  # port 0, as wireguard-go takes it
        assert parse_set(f"public_key={K1.hex()}\nendpoint=192.0.2.1:{zero}\n")[0].endpoint.port == 0
    for port in ("0" * 5000 + "65536", "+5", "5 ", "-0"):
        c = FakeControl()
        body = f"public_key={K1.hex()}\nendpoint=192.0.2.1:{port}\n"
        assert handle_request("set=1", body, c) == b"errno=-22\n\n", port[-10:]
        assert c.calls == []


def test_a_numeric_zone_takes_any_number_of_leading_zeros():
    """A ValueError of Python's digit limit escaped as EIO with a traceback."""
    assert zone_index("0" * 5000 + "1") == 1
    assert zone_index("0" * 5000 + "4294967295") == 4294967295
    with pytest.raises(OSError) as e:
        zone_index("0" * 5000 + "4294967296")
    assert e.value.errno == errno.EINVAL
