"""The daemon's queues, piece by piece (issue 22 item 3): a multi-queue TUN
(IFF_MULTI_QUEUE, a descriptor per queue), a group of UDP sockets on one
port (SO_REUSEPORT), persistent devices of either kind, and the --queues /
VPNCRYPT_QUEUES setting.  Run as root, the TUN and socket parts in a network
namespace made for each test.  The numbers are the kernel's (<linux/if_tun.h>
IFF_MULTI_QUEUE 0x0100, TUNGETIFF) and the option's documented range 1..64."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vpncrypt.cli.up import queue_settings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in(ns, code):
    """`code` in a Python in namespace `ns`; its last line of output as JSON."""
    r = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


PRELUDE = """
import errno, fcntl, json, os, select, socket, struct, subprocess

def tun_flags(fd):
    res = fcntl.ioctl(fd, 0x800454D2, bytes(40))  # TUNGETIFF
    return res[:16].split(b"\\0", 1)[0].decode(), struct.unpack_from("H", res, 16)[0]

def open_fds():
    return sorted(int(x) for x in os.listdir("/proc/self/fd"))

def link(name):
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0
"""


def test_a_created_device_has_a_descriptor_per_queue_and_flows_spread_over_them(netns):
    """Four queues: four descriptors on one device, each opened with
    IFF_MULTI_QUEUE; datagrams of 32 flows routed into the device come out
    of more than one queue (the kernel hashes each flow to one); close()
    closes all four and deletes the device."""
    out = run_in(
        netns,
        """
        from vpncrypt.daemon.tun import TunDevice
        before = open_fds()
        dev = TunDevice.create("mq0", addresses=["10.71.0.1/24"], queues=4)
        fds = dev.queue_fds()
        flags = [tun_flags(fd) for fd in fds]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for port in range(40000, 40032):
            s.sendto(b"flow", ("10.71.0.2", port))
        s.close()
        seen = {}
        for _ in range(10):
            ready, _, _ = select.select(fds, [], [], 0.2)
            for fd in ready:
                while True:
                    try:
                        pkt = os.read(fd, 65535)
                    except BlockingIOError:
                        break
                    if pkt[0] >> 4 == 4 and pkt[9] == 17 and pkt.endswith(b"flow"):
                        seen.setdefault(fds.index(fd), set()).add(struct.unpack_from("!H", pkt, 22)[0])
        dev.close()
        print(json.dumps({
            "fds": len(set(fds)), "flags": flags, "seen": {k: sorted(v) for k, v in seen.items()},
            "leaked": [fd for fd in open_fds() if fd not in before], "link": link("mq0"),
        }))
        """,
    )
    assert out["fds"] == 4
    assert all(name == "mq0" and flags & 0x0100 for name, flags in out["flags"]), out["flags"]
    ports = [p for q in out["seen"].values() for p in q]
    assert sorted(ports) == list(range(40000, 40032)), out["seen"]  # each flow once, in one queue
    assert len(out["seen"]) > 1, out["seen"]
    assert out["leaked"] == [] and out["link"] is False, out


def test_a_persistent_single_queue_device_refuses_queues_or_falls_back_to_one(netns):
    """`ip tuntap add NAME mode tun` (no multi_queue) takes one queue: asked
    for four, create() says how to make one that takes more and leaves
    nothing open and the device in place; with queue_fallback it attaches
    with one queue."""
    out = run_in(
        netns,
        """
        from vpncrypt.daemon.tun import TunDevice, TunError
        subprocess.run(["ip", "tuntap", "add", "dev", "mq1", "mode", "tun"], check=True)
        before = open_fds()
        try:
            TunDevice.create("mq1", queues=4)
            err = None
        except TunError as e:
            err = [e.errno, str(e)]
        leaked = [fd for fd in open_fds() if fd not in before]
        dev = TunDevice.create("mq1", queues=4, queue_fallback=True)
        n, created, flags = len(dev.queue_fds()), dev.created, tun_flags(dev.fileno())[1]
        dev.close()
        print(json.dumps({"err": err, "leaked": leaked, "n": n, "created": created,
                          "flags": flags, "link": link("mq1")}))
        """,
    )
    assert out["err"] is not None and out["err"][0] == 22, out  # EINVAL
    assert "multi_queue" in out["err"][1] and "mq1" in out["err"][1], out
    assert out["leaked"] == []
    assert out["n"] == 1 and out["created"] is False and not out["flags"] & 0x0100, out
    assert out["link"] is True  # the administrator's device stays


def test_a_persistent_multi_queue_device_is_attached_with_any_number_of_queues(netns):
    """`ip tuntap add NAME mode tun multi_queue`: attached with one queue
    (the kernel refuses a TUNSETIFF without IFF_MULTI_QUEUE on it) and with
    three; it stays after close()."""
    out = run_in(
        netns,
        """
        from vpncrypt.daemon.tun import TunDevice
        subprocess.run(["ip", "tuntap", "add", "dev", "mq2", "mode", "tun", "multi_queue"], check=True)
        got = []
        for queues in (1, 3):
            dev = TunDevice.create("mq2", queues=queues, vnet_hdr=True)
            mq = [tun_flags(fd)[1] & 0x0100 for fd in dev.queue_fds()]
            got.append([len(dev.queue_fds()), dev.created, mq])
            dev.close()
        print(json.dumps({"got": got, "link": link("mq2")}))
        """,
    )
    assert out["got"] == [[1, False, [0x0100]], [3, False, [0x0100] * 3]], out
    assert out["link"] is True


def test_the_sockets_share_one_port_and_the_fwmark_and_refuse_a_port_in_use(netns):
    """Four sockets: one port (the first's, asked for 0), SO_REUSEPORT on
    each, the fwmark on each; datagrams from 32 source ports reach more than
    one of them.  A port another socket holds is refused, also when that
    socket has SO_REUSEPORT (the group must not join it)."""
    out = run_in(
        netns,
        """
        from vpncrypt.daemon.udpsocket import open_udp_sockets
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        socks = open_udp_sockets(0, 0x1234, count=4)
        ports = [s.getsockname()[1] for s in socks]
        reuse = [s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in socks]
        marks = [s.getsockopt(socket.SOL_SOCKET, 36) for s in socks]  # SO_MARK
        for sport in range(41000, 41032):
            c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            c.bind(("127.0.0.1", sport))
            c.sendto(b"x", ("127.0.0.1", ports[0]))
            c.close()
        got = []
        for s in socks:
            n = 0
            select.select([s], [], [], 0.2)
            while True:
                try:
                    s.recv(16)
                    n += 1
                except BlockingIOError:
                    break
            got.append(n)
        for s in socks:
            s.close()
        refused = []
        for reuseport in (0, 1):
            other = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, reuseport)
            other.bind(("::", 0))
            try:
                open_udp_sockets(other.getsockname()[1], count=2)
                refused.append(None)
            except OSError as e:
                refused.append(e.errno)
            other.close()
        print(json.dumps({"ports": ports, "reuse": reuse, "marks": marks, "got": got, "refused": refused}))
        """,
    )
    assert len(set(out["ports"])) == 1 and out["ports"][0] != 0, out
    assert out["reuse"] == [1, 1, 1, 1] and out["marks"] == [0x1234] * 4, out
    assert sum(out["got"]) == 32 and sum(1 for n in out["got"] if n) > 1, out
    assert out["refused"] == [98, 98], out  # EADDRINUSE


@pytest.mark.parametrize("given", [1, 2, 64])
def test_queue_setting_in_range(monkeypatch, given):
    monkeypatch.delenv("VPNCRYPT_QUEUES", raising=False)
    assert queue_settings(given) == (given, False)
    monkeypatch.setenv("VPNCRYPT_QUEUES", str(given))
    assert queue_settings(None) == (given, False)


@pytest.mark.parametrize("given", [0, 65, -1])
def test_queue_setting_out_of_range(monkeypatch, given):
    monkeypatch.delenv("VPNCRYPT_QUEUES", raising=False)
    with pytest.raises(ValueError, match=rf"--queues {given}: use 1 to 64"):
        queue_settings(given)


@pytest.mark.parametrize("env", ["0", "65", "four", "2.5", "-3", "\u0663", "1_0", "+4"])
def test_queue_environment_out_of_range(monkeypatch, env):
    monkeypatch.setenv("VPNCRYPT_QUEUES", env)
    with pytest.raises(ValueError, match=r"VPNCRYPT_QUEUES: .* from 1 to 64"):
        queue_settings(None)


def test_the_default_may_fall_back_but_a_number_given_may_not(monkeypatch):
    """Without --queues and $VPNCRYPT_QUEUES: the machine's default, and a
    single-queue persistent TUN may take one queue instead; a number the
    user gave is kept (a mismatch is an error)."""
    monkeypatch.delenv("VPNCRYPT_QUEUES", raising=False)
    n, fallback = queue_settings(None)
    cores = len(os.sched_getaffinity(0))
    assert fallback is True and n == (1 if cores < 4 else 2)
    monkeypatch.setenv("VPNCRYPT_QUEUES", "")
    assert queue_settings(None) == (n, True)


def test_the_command_line_flag_reaches_the_daemon(monkeypatch):
    """`vpncrypt up IFACE --queues N` builds a Daemon with N queues; a bad N
    is one line on stderr and no daemon."""
    from vpncrypt.cli import up

    monkeypatch.delenv("VPNCRYPT_QUEUES", raising=False)
    p = __import__("argparse").ArgumentParser()
    up.add_up_arguments(p)
    args = p.parse_args(["wgq0", "--queues", "4"])
    d = up.build_daemon(args.interface, None, queues=args.queues)
    assert d is not None and d.queues == 4 and d.queue_fallback is False
    assert up.build_daemon("wgq0", None, queues=65) is None


@pytest.mark.parametrize("flag", ["--queues", "--threads"])
@pytest.mark.parametrize("value", ["\u0663", "1_0", " 2", "2 ", "+2"])
def test_counts_on_the_command_line_are_ascii_decimal(flag, value, capsys):
    """--queues/--threads take ASCII decimal digits only: int() would also
    take another script's digits (U+0663, ARABIC-INDIC DIGIT THREE),
    underscores and spaces."""
    from vpncrypt.cli import up

    p = __import__("argparse").ArgumentParser()
    up.add_up_arguments(p)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["wgq0", flag, value])
    assert e.value.code == 2 and "is not a decimal number" in capsys.readouterr().err


def test_thread_environment_is_ascii_decimal(monkeypatch):
    from vpncrypt.cli import up

    monkeypatch.setenv("VPNCRYPT_THREADS", "\u0662")
    assert up.build_daemon("wgq0", None) is None
