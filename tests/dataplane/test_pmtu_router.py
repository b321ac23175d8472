"""The path MTU from real ICMP: three namespaces, A - R - B, the R-B link
at MTU 1280 (A's links at 1500), A's side in pmtu_router_child.py.  R's
"fragmentation needed" (IPv4) and "packet too big" (IPv6) for A's 1460- and
1480-byte datagrams teach A's table the peer's path MTU, 1280; errors that B
forges (as if from R) for a receiver index that is not the peer's, or for
another port, are refused and change nothing."""

import os
import secrets
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def _lab(a, r, b, tag):
    for ns in (a, r, b):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", f"a{tag}", "netns", a, "type", "veth", "peer", "name", f"ra{tag}", "netns", r)
    sh("ip", "link", "add", f"b{tag}", "netns", b, "type", "veth", "peer", "name", f"rb{tag}", "netns", r)
    sh("ip", "-n", r, "link", "set", f"rb{tag}", "mtu", "1280")
    sh("ip", "-n", b, "link", "set", f"b{tag}", "mtu", "1280")
    for ns, dev, v4, v6 in (
        (a, f"a{tag}", "10.77.1.1/24", "fd77:1::1/64"),
        (r, f"ra{tag}", "10.77.1.2/24", "fd77:1::2/64"),
        (r, f"rb{tag}", "10.77.2.2/24", "fd77:2::2/64"),
        (b, f"b{tag}", "10.77.2.1/24", "fd77:2::1/64"),
    ):
        sh("ip", "-n", ns, "addr", "add", v4, "dev", dev)
        sh("ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad")
        sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "-n", a, "route", "add", "default", "via", "10.77.1.2")
    sh("ip", "-n", a, "-6", "route", "add", "default", "via", "fd77:1::2")
    sh("ip", "-n", b, "route", "add", "default", "via", "10.77.2.2")
    sh("ip", "-n", b, "-6", "route", "add", "default", "via", "fd77:2::2")
    sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")


def _forge(b, peer, a_port):
    """From B: two errors as R would send them, about a datagram from A's
    socket to peer port 9: one quoting receiver index 99 (the peer's is 7),
    one about port 10 (not the peer's endpoint).  Each says MTU 600."""
    code = f"""
import socket, struct
v6 = {":" in peer!r}
def csum(b):
    b += bytes(len(b) % 2)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
for index, port in ((99, 9), (7, 10)):
    wg = struct.pack("<III", 4, index, 0) + bytes(40)
    udp = struct.pack("!HHHH", {a_port}, port, 8 + 1400, 0)
    if not v6:
        a, p = socket.inet_aton("10.77.1.1"), socket.inet_aton({peer!r})
        ip = struct.pack("!BBHHHBBH", 0x45, 0, 1428 + 20, 0, 0x4000, 63, 17, 0) + a + p
        body = struct.pack("!BBHHH", 3, 4, 0, 0, 600) + ip + udp + wg
        body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.sendto(body, ("10.77.1.1", 0))
    else:
        a, p = socket.inet_pton(socket.AF_INET6, "fd77:1::1"), socket.inet_pton(socket.AF_INET6, {peer!r})
        ip = struct.pack("!IHBB", 6 << 28, 8 + 1400, 17, 63) + a + p
        body = struct.pack("!BBHI", 2, 0, 0, 600) + ip + udp + wg
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        s.sendto(body, ("fd77:1::1", 0))  # (the kernel sums ICMPv6)
"""
    subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c", code], check=True)


def test_path_mtu_from_a_router():
    assert shutil.which("ip"), "iproute2 is needed"
    tag = secrets.token_hex(3)
    a, r, b = (f"pmtu{x}-{tag}" for x in "arb")
    try:
        _lab(a, r, b, tag)
        child = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                a,
                sys.executable,
                os.path.join(ROOT, "tests/dataplane/pmtu_router_child.py"),
                "10.77.2.1",
                "fd77:2::1",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        lines = []
        try:
            for line in child.stdout:
                lines.append(line.strip())
                if line.startswith("PORT"):
                    _, peer, port = line.split()
                    _forge(b, peer, int(port))
                    child.stdin.write("forged\n")
                    child.stdin.flush()
            rc = child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
        err = child.stderr.read()
        assert rc == 0, "\n".join(lines) + err
        assert lines[-1] == "ok", lines
        results = [line for line in lines if line.startswith(("RESULT", "FORGED"))]
        assert results == [
            # the path MTU of R's error; inner: 1280 - 20 - 8 - 32 = 1220 -> 1216
            "RESULT 10.77.2.1 1280 1216 (1, 0)",
            "FORGED 10.77.2.1 1280 (1, 2)",
            # 1280 - 40 - 8 - 32 = 1200
            "RESULT fd77:2::1 1280 1200 (1, 0)",
            "FORGED fd77:2::1 1280 (1, 2)",
        ], lines
    finally:
        for ns in (a, r, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
