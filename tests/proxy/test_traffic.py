"""Bytes through `vpncrypt proxy` (run as nobody, no capability) to a
wireguard-go peer: a 3 MiB random file fetched with curl through each front
end, compared byte for byte; a connection the peer makes in through
[TCPServerTunnel]."""

import json
import os
import secrets
import subprocess
import sys

from tests.proxy.conftest import (
    AUTH_SOCKS_PORT,
    FORWARD_PORT,
    HTTP_PORT,
    PASSWORD,
    SERVER_PORT,
    USER,
    SOCKS_PORT,
)
from tests.installed import script
from tests.proxy.lab import DROP, PEER_NAME


def fetch(lab, tmp_path, *args, blob=None):
    """curl ARGS into a file, which must hold what `blob` (the lab's first
    peer's file by default) holds."""
    out = tmp_path / "got"
    os.chmod(tmp_path, 0o755)
    r = lab.curl(*args, "-o", str(out))
    assert r.returncode == 0, f"curl {' '.join(args)}: {r.stderr}\n{lab.proxies[0].log()[-3000:]}"
    with open(blob or lab.blob, "rb") as want, open(out, "rb") as got:
        assert got.read() == want.read(), "the bytes differ"


def test_socks5_ipv4(lab, proxy, tmp_path):
    fetch(lab, tmp_path, "--socks5", f"127.0.0.1:{SOCKS_PORT}", "http://10.77.0.1:8000/blob")


def test_socks5_ipv6(lab, proxy, tmp_path):
    fetch(lab, tmp_path, "--socks5", f"127.0.0.1:{SOCKS_PORT}", "http://[fd77::1]:8000/blob")


def test_socks5_name_resolved_through_the_tunnel(lab, proxy, tmp_path):
    """The name exists only in the peer's DNS server (10.77.0.1, reached
    through the tunnel): curl hands it over unresolved (ATYP 3)."""
    fetch(lab, tmp_path, "--socks5-hostname", f"127.0.0.1:{SOCKS_PORT}", f"http://{PEER_NAME}:8000/blob")


def test_socks5_username_password(lab, proxy, tmp_path):
    fetch(
        lab,
        tmp_path,
        "--socks5",
        f"{USER}:{PASSWORD}@127.0.0.1:{AUTH_SOCKS_PORT}".replace(" ", "%20"),
        "http://10.77.0.1:8000/blob",
    )


def test_tcp_client_tunnel(lab, proxy, tmp_path):
    fetch(lab, tmp_path, f"http://127.0.0.1:{FORWARD_PORT}/blob")


def test_http_connect(lab, proxy, tmp_path):
    fetch(
        lab,
        tmp_path,
        "--proxytunnel",
        "--proxy",
        f"http://127.0.0.1:{HTTP_PORT}",
        "http://10.77.0.1:8000/blob",
    )


def test_http_absolute_uri(lab, proxy, tmp_path):
    fetch(lab, tmp_path, "--proxy", f"http://127.0.0.1:{HTTP_PORT}", f"http://{PEER_NAME}:8000/blob")


def test_tcp_server_tunnel(lab, proxy):
    """The peer connects to the proxy's tunnel address; the bytes reach the
    echo server on the proxy's host (127.0.0.1:9001 there) and come back."""
    data = secrets.token_bytes(1 << 20)
    script = (
        "import socket,sys\n"
        f"c=socket.create_connection(('10.77.0.2',{SERVER_PORT}),timeout=30)\n"
        "d=sys.stdin.buffer.read(); c.sendall(d); c.shutdown(socket.SHUT_WR)\n"
        "got=b''\n"
        "while True:\n"
        "    x=c.recv(65536)\n"
        "    if not x: break\n"
        "    got+=x\n"
        "sys.stdout.write(str(got==d)+' '+str(len(got)))\n"
    )
    r = lab.at_peer(script, data)
    assert r.stdout.decode() == f"True {len(data)}", (
        f"{r.stdout!r} {r.stderr.decode()}\n{proxy.log()[-3000:]}"
    )


def test_uapi_socket_in_the_users_runtime_directory(lab, proxy, tmp_path):
    """$XDG_RUNTIME_DIR/vpncrypt/NAME.sock, which `vpncrypt show` (run as the
    same user) reads: the peer, its handshake and its transfer."""
    fetch(lab, tmp_path, "--socks5", f"127.0.0.1:{SOCKS_PORT}", "http://10.77.0.1:8000/blob")
    assert proxy.sock == os.path.join(proxy.rundir, "vpncrypt", "wireproxy.sock")
    r = subprocess.run(
        [
            *DROP,
            script("vpncrypt"),
            "show",
            "--socket-dir",
            os.path.dirname(proxy.sock),
            "wireproxy",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    (dev,) = json.loads(r.stdout)["interfaces"]
    (peer,) = dev["peers"]
    assert (dev["name"], dev["implementation"]) == ("wireproxy", "vpncrypt")
    assert (peer["public_key"], peer["endpoint"]) == (lab.peer_key[1], "172.31.0.1:51820")
    assert peer["latest_handshake"] > 0
    assert peer["received_bytes"] > 3 << 20  # the file came in through it


def test_listen_port_change_over_the_uapi(lab, proxy, tmp_path):
    """`set listen_port` over the UAPI socket (as the proxy's user): the engine
    takes a new UDP socket, with a new receive slab for the packet link's
    writes, and the tunnel carries on from the new port."""
    script_text = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "s.sendall(b'set=1\\nlisten_port=43917\\n\\n'); print(s.recv(100).decode())\n"
    )
    r = subprocess.run([*DROP, sys.executable, "-c", script_text, proxy.sock], capture_output=True, text=True)
    assert r.stdout.strip() == "errno=0", r.stderr
    fetch(lab, tmp_path, "--socks5", f"127.0.0.1:{SOCKS_PORT}", "http://10.77.0.1:8000/blob")
    endpoints = dict(line.split("\t") for line in lab.world.endpoints(lab.peer).splitlines())
    assert endpoints[proxy.key[1]].endswith(":43917")  # the peer saw it roam to the new port
