"""TUN tests run as root inside a network namespace made for the test."""
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap

import pytest

from vpncrypt.daemon.tun import validate_interface_name

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_validate_interface_name():
    assert validate_interface_name("wg0") == "wg0"
    for bad in ("", "a" * 16, "wg/0", "wg 0", "..", "."):
        with pytest.raises(ValueError):
            validate_interface_name(bad)


@pytest.fixture
def netns():
    # Tests never skip: without root, iproute2 or /dev/net/tun this is a failure.
    assert os.geteuid() == 0, "the TUN tests need root (tests/run.sh runs them as root in CI)"
    assert shutil.which("ip"), "iproute2 is not installed (tests/run.sh installs it)"
    assert os.path.exists("/dev/net/tun"), "no /dev/net/tun on this machine"
    name = "vpncrypt-test-" + secrets.token_hex(4)
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    assert r.returncode == 0, f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def run_in(ns, code):
    r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=60,
                       env=os.environ)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_tun_lifecycle(netns):
    out = run_in(netns, """
        import fcntl, json, os, subprocess
        from vpncrypt.daemon.tun import create_tun

        def link(name):
            r = subprocess.run(["ip", "-j", "address", "show", "dev", name],
                               capture_output=True, text=True)
            return json.loads(r.stdout)[0] if r.returncode == 0 else None

        dev = create_tun("wgt0", mtu=1380, addresses=["10.99.0.1/24", "fd99::1/64"])
        info = link("wgt0")
        nonblocking = bool(fcntl.fcntl(dev.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)
        mtu = dev.get_mtu()
        # drain whatever the kernel sent (IPv6 MLD/RS); then read() must not block
        for _ in range(1000):
            if dev.read() is None:
                read_empty = True
                break
        else:
            read_empty = False
        dev.set_mtu(1420)
        mtu2 = dev.get_mtu()
        dev.set_addresses(add=["10.98.0.1/32"], remove=["10.99.0.1/24"])
        info2 = link("wgt0")
        dev.close()
        dev.close()  # idempotent
        print(json.dumps(dict(info=info, info2=info2, nonblocking=nonblocking, mtu=mtu,
                              mtu2=mtu2, read_empty=read_empty,
                              after=link("wgt0"))))
    """)
    res = json.loads(out)
    info = res["info"]
    assert info["ifname"] == "wgt0"
    assert info["mtu"] == 1380 == res["mtu"]
    assert "UP" in info["flags"] and "POINTOPOINT" in info["flags"]
    assert info.get("link_type") == "none"
    addrs = {(a["local"], a["prefixlen"]) for a in info["addr_info"]}
    assert ("10.99.0.1", 24) in addrs and ("fd99::1", 64) in addrs
    assert res["nonblocking"] and res["read_empty"]
    assert res["mtu2"] == 1420
    addrs2 = {(a["local"], a["prefixlen"]) for a in res["info2"]["addr_info"]}
    assert ("10.98.0.1", 32) in addrs2 and ("10.99.0.1", 24) not in addrs2
    assert res["after"] is None, "the interface must be gone after close()"


def test_tun_passes_packets(netns):
    """A UDP datagram sent to an address routed into the TUN shows up on the
    fd, and a packet written to the fd is accepted."""
    out = run_in(netns, """
        import select, subprocess
        from vpncrypt.daemon.tun import create_tun
        with create_tun("wgt1", addresses=["10.77.0.1/24"]) as dev:
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"hello", ("10.77.0.2", 9999))
            got = None
            for _ in range(20):
                select.select([dev], [], [], 0.5)
                pkt = dev.read()
                while pkt is not None:
                    if pkt[0] >> 4 == 4 and pkt[9] == 17 and pkt.endswith(b"hello"):
                        got = pkt
                        break
                    pkt = dev.read()
                if got:
                    break
            print("ok" if got else "none")
            # write a packet back (IPv4 UDP to ourselves), the kernel accepts it
            import struct
            def csum(b):
                s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
                s = (s >> 16) + (s & 0xffff); s += s >> 16
                return (~s) & 0xffff
            payload = b"reply"
            udp = struct.pack("!HHHH", 9999, 12345, 8 + len(payload), 0) + payload
            hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                              bytes([10, 77, 0, 2]), bytes([10, 77, 0, 1]))
            hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
            print(dev.write(hdr + udp))
    """)
    lines = out.split()
    assert lines[0] == "ok"
    assert int(lines[1]) == 20 + 8 + 5
