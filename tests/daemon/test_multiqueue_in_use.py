"""A multi-queue TUN device another descriptor holder is using is not
joined: the kernel lets any TUNSETIFF with IFF_MULTI_QUEUE attach one more
queue to a live multi-queue device (a single-queue one answers EBUSY), so a
second daemon started for the same interface name would share the first's
inner packets and, having "created" it, delete the first's interface when it
gives up.  Opening it must fail as the single-queue case does (EBUSY,
"another process is using it"), leaving the first device and its queues as
they were.  Numbers: the kernel's (IFF_MULTI_QUEUE 0x0100, EBUSY 16;
`ip -d -j link` reports the device's attached queues as numqueues)."""

import pytest

from tests.daemon.test_multiqueue import run_in


@pytest.mark.parametrize("second_queues", [4, 1])
def test_a_live_multi_queue_device_is_not_joined_by_a_second_opener(netns, second_queues):
    out = run_in(
        netns,
        f"""
        import fcntl, struct
        from vpncrypt.daemon.tun import TunDevice, TunError
        # the first opener is not vpncrypt (no lock of vpncrypt's): 4 queues of
        # a new multi-queue device, TUNSETIFF 0x400454ca with IFF_TUN 0x0001 |
        # IFF_NO_PI 0x1000 | IFF_MULTI_QUEUE 0x0100
        held = []
        for _ in range(4):
            q = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(q, 0x400454CA, struct.pack("16sH", b"mqbusy0", 0x1101))
            held.append(q)
        err = None
        try:
            second = TunDevice.create("mqbusy0", queues={second_queues}, vnet_hdr=True)
        except TunError as e:
            err = [e.errno, str(e)]
        else:
            second.close()
        info = json.loads(subprocess.run(["ip", "-d", "-j", "link", "show", "mqbusy0"],
                                         capture_output=True, text=True).stdout or "[]")
        numqueues = info[0]["linkinfo"]["info_data"].get("numqueues") if info else None
        alive = link("mqbusy0")
        for q in held:
            os.close(q)
        print(json.dumps({{"err": err, "link_after_second": alive, "numqueues": numqueues}}))
        """,
    )
    assert out["err"] is not None and out["err"][0] == 16, out  # EBUSY
    assert "another process is using it" in out["err"][1], out
    assert out["link_after_second"] is True, out  # the first daemon's interface is still there
    assert out["numqueues"] == 4, out  # only the first's queues


def test_a_persistent_multi_queue_device_in_use_is_not_joined(netns):
    """`ip tuntap add NAME mode tun multi_queue` with a first opener's 4
    queues attached: a second opener gets EBUSY and the queues stay 4; once
    the first lets go, the device (still there: persistent) can be opened."""
    out = run_in(
        netns,
        """
        from vpncrypt.daemon.tun import TunDevice, TunError
        subprocess.run(["ip", "tuntap", "add", "dev", "mqpers0", "mode", "tun", "multi_queue"], check=True)
        def numqueues():
            info = json.loads(subprocess.run(["ip", "-d", "-j", "link", "show", "mqpers0"],
                                             capture_output=True, text=True).stdout or "[]")
            return info[0]["linkinfo"]["info_data"].get("numqueues") if info else None
        first = TunDevice.create("mqpers0", queues=4)
        err = None
        try:
            TunDevice.create("mqpers0", queues=2).close()
        except TunError as e:
            err = [e.errno, str(e)]
        during = numqueues()
        first.close()
        again = TunDevice.create("mqpers0", queues=2)
        after = numqueues()
        again.close()
        print(json.dumps({"err": err, "during": during, "after": after, "left": link("mqpers0")}))
        """,
    )
    assert out["err"] is not None and out["err"][0] == 16, out  # EBUSY
    assert out["during"] == 4 and out["after"] == 2, out
    assert out["left"] is True, out  # persistent: closing does not delete it


def test_vpncrypt_starts_of_one_name_take_turns(netns):
    """Two vpncrypt daemons started at once for one name could both find no
    device, both attach to the multi-queue device the faster one made, both
    see the other's queues and both give up, leaving no tunnel: a lock per
    name and namespace (/run/vpncrypt) lets one go first.  While another
    holds it, a start fails at once with EBUSY and makes no device; a second
    TunDevice of a name this process holds fails the same way."""
    out = run_in(
        netns,
        """
        import fcntl
        from vpncrypt.daemon import tun
        from vpncrypt.daemon.tun import TunDevice, TunError
        netns_ino = os.stat("/proc/thread-self/ns/net").st_ino
        path = f"{tun.LOCK_DIR}/tun-{netns_ino}-mqlock0.lock"
        os.makedirs(tun.LOCK_DIR, exist_ok=True)
        other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(other, fcntl.LOCK_EX)  # another vpncrypt starting this name
        errs = []
        try:
            TunDevice.create("mqlock0", queues=4).close()
        except TunError as e:
            errs.append(e.errno)
        made = link("mqlock0")
        os.close(other)
        first = TunDevice.create("mqlock0", queues=4)
        try:
            TunDevice.create("mqlock0", queues=4).close()
        except TunError as e:
            errs.append(e.errno)
        first.close()
        third = TunDevice.create("mqlock0", queues=2)  # released with the first's close
        held = os.path.exists(path)
        third.close()
        print(json.dumps({"errs": errs, "made_while_locked": made, "left": link("mqlock0"),
                          "file_while_held": held, "file_after_stop": os.path.exists(path)}))
        """,
    )
    assert out["errs"] == [16, 16], out  # EBUSY both times
    assert out["made_while_locked"] is False and out["left"] is False, out
    assert out["file_while_held"] is True and out["file_after_stop"] is False, out  # a clean stop tidies up


def test_a_lock_on_a_file_removed_meanwhile_is_taken_again(tmp_path, monkeypatch):
    """A stop removes its lock file while it holds it.  A start that opened
    the file just before that removal locks a file no path names, which a
    third start would not see: the start must notice and take it again."""
    import fcntl
    import os

    from vpncrypt.daemon import tun
    from vpncrypt.daemon.tun import TunError

    monkeypatch.setattr(tun, "LOCK_DIR", str(tmp_path))
    first = tun._name_lock("wgrace0")
    assert first is not None
    (name,) = os.listdir(tmp_path)
    with pytest.raises(TunError) as e:
        tun._name_lock("wgrace0")
    assert e.value.errno == 16
    tun._unlock(first)
    assert os.listdir(tmp_path) == []

    real, calls = fcntl.flock, []

    def flock(fd, op):
        if not calls:  # the holder's stop, between this start's open and its lock
            os.unlink(os.path.join(tmp_path, name))
        calls.append(fd)
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    lock = tun._name_lock("wgrace0")
    assert lock is not None and len(calls) == 2
    assert os.fstat(lock[0]).st_ino == os.stat(os.path.join(tmp_path, name)).st_ino
    tun._unlock(lock)
