"""TUN tests run as root inside a network namespace made for the test."""

import json
import os
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


def run_in(ns, code):
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_tun_lifecycle(netns):
    out = run_in(
        netns,
        """
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
    """,
    )
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
    out = run_in(
        netns,
        """
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
    """,
    )
    lines = out.split()
    assert lines[0] == "ok"
    assert int(lines[1]) == 20 + 8 + 5


@pytest.fixture
def netns2(netns):
    """A second namespace, to move interfaces into."""
    name = netns + "-b"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    assert r.returncode == 0, f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        yield netns, name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_gone_only_when_the_kernel_says_deleted(netns):
    """The check asks the TUN descriptor (TUNGETIFF): running out of
    descriptors or memory is not evidence that the interface is gone; a
    deletion is."""
    out = run_in(
        netns,
        """
        import errno, json, os, subprocess
        from vpncrypt.daemon import tun as tunmod
        dev = tunmod.create_tun("wgt2")
        real = tunmod.fcntl.ioctl
        seen = {}
        for err in (errno.EMFILE, errno.ENOMEM, errno.ENFILE):
            def fake(fd, req, *a, err=err):
                raise OSError(err, os.strerror(err))
            tunmod.fcntl.ioctl = fake
            try:
                seen[errno.errorcode[err]] = dev.gone()
            finally:
                tunmod.fcntl.ioctl = real
        seen["alive"] = dev.gone()
        subprocess.run(["ip", "link", "del", "wgt2"], check=True)
        seen["deleted"] = dev.gone()
        dev.close()
        print(json.dumps(seen))
    """,
    )
    assert json.loads(out) == {
        "EMFILE": False,
        "ENOMEM": False,
        "ENFILE": False,
        "alive": False,
        "deleted": True,
    }


def test_tun_moved_to_another_namespace(netns2):
    """Moved (`ip link set IFACE netns B`), the device is not gone, its MTU
    is the one set in B and set there; deleted in B it is gone.  On close, a
    device vpncrypt created is deleted where it is, never the interface that
    took its name and index in the daemon's namespace; a persistent one is
    left where it is."""
    a, b = netns2
    out = run_in(
        a,
        f"""
        import json, subprocess
        from vpncrypt.daemon.tun import TunDevice, create_tun

        def ip(*args):
            return subprocess.run(["ip", *args], capture_output=True, text=True)

        def mtu_in_b(name):
            r = ip("-n", "{b}", "-j", "link", "show", name)
            return json.loads(r.stdout)[0]["mtu"] if r.returncode == 0 else None

        res = {{}}
        dev = create_tun("wgt3", mtu=1400)
        index = dev.ifindex
        assert ip("link", "set", "wgt3", "netns", "{b}").returncode == 0
        res["gone_moved"] = dev.gone()
        res["mtu_moved"] = dev.get_mtu()
        ip("-n", "{b}", "link", "set", "wgt3", "mtu", "1300")
        res["mtu_set_there"] = dev.get_mtu()
        dev.set_mtu(1280)
        res["mtu_in_b"] = mtu_in_b("wgt3")
        # an interface here takes the moved one's name and index
        res["dummy"] = ip("link", "add", "wgt3", "index", str(index), "type", "veth",
                          "peer", "name", "wgt3p").returncode
        res["home"] = dev.in_home_namespace()
        dev.close()
        res["left_in_b"] = mtu_in_b("wgt3")
        res["dummy_after"] = ip("link", "show", "wgt3").returncode
        ip("link", "del", "wgt3")

        # deleted in B: gone
        dev = create_tun("wgt4")
        ip("link", "set", "wgt4", "netns", "{b}")
        ip("-n", "{b}", "link", "del", "wgt4")
        res["gone_deleted_there"] = dev.gone()
        dev.close()

        # a persistent device, moved: left in B on close
        ip("tuntap", "add", "dev", "wgt5", "mode", "tun")
        dev = TunDevice.create("wgt5", mtu=None, addresses=["10.66.0.1/24"])
        ip("link", "set", "wgt5", "netns", "{b}")
        dev.close()
        res["persistent_in_b"] = mtu_in_b("wgt5")
        print(json.dumps(res))
    """,
    )
    res = json.loads(out)
    assert res["gone_moved"] is False
    assert res["mtu_moved"] == 1400
    assert res["mtu_set_there"] == 1300
    assert res["mtu_in_b"] == 1280
    assert res["dummy"] == 0
    assert res["left_in_b"] is None, "the moved device must be deleted where it is"
    assert res["dummy_after"] == 0, "close() deleted another interface with the old index"
    assert res["gone_deleted_there"] is True
    assert res["persistent_in_b"] == 1500
    assert res["home"] is False


def test_tun_moved_without_cap_sys_admin(netns2):
    """Without CAP_SYS_ADMIN (as under the systemd unit) the daemon cannot
    join the other namespace: the MTU there cannot be read (an OSError,
    which the daemon logs once), but the device is still known to be there
    and alive, and closing it still deletes it."""
    assert shutil.which("setpriv"), "setpriv (util-linux) is not installed"
    a, b = netns2
    code = textwrap.dedent(f"""
        import json, subprocess
        from vpncrypt.daemon.tun import create_tun
        dev = create_tun("wgt6")
        subprocess.run(["ip", "link", "set", "wgt6", "netns", "{b}"], check=True)
        try:
            dev.get_mtu()
            mtu = "read"
        except OSError as e:
            mtu = type(e).__name__
        res = dict(mtu=mtu, gone=dev.gone(), home=dev.in_home_namespace())
        dev.close()
        print(json.dumps(res))
    """)
    # root keeps after exec only the capabilities of its bounding set
    r = subprocess.run(
        ["ip", "netns", "exec", a, "setpriv", "--bounding-set", "-sys_admin", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout) == {"mtu": "PermissionError", "gone": False, "home": False}
    left = subprocess.run(["ip", "-n", b, "link", "show", "wgt6"], capture_output=True)
    assert left.returncode != 0, "closing the moved device must delete it"
