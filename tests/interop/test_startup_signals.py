"""F6: a SIGTERM (`systemctl stop`) at any point of start-up, with a full
tunnel (routes, policy rules, nft tables): the daemon undoes what it did
so far and exits 0, and the host is as before.  So is a second SIGTERM
during the clean-up after a stop.

Each run sends SIGTERM right after one more step (tests/interop/
startup_child.py): every `ip`/`nft` command and the TUN creation, from the
first to the last of start-up and of the clean-up that follows a stop."""

import os
import signal
import socket
import sys
import time

from tests.installed import script
from tests.interop.lab import PORT


def _host(lab, iface):
    out = {
        "links": sorted(
            line.split(":")[1].strip().split("@")[0]
            for line in lab.run_in("A", "ip", "-o", "link", "show").stdout.splitlines()
        ),
        "nft": lab.run_in("A", "nft", "list", "ruleset").stdout,
    }
    for v in ("-4", "-6"):
        out[f"rules{v}"] = lab.run_in("A", "ip", v, "rule", "show").stdout
        # (the kernel's own routes for the veth's link-local address come
        # when its duplicate address detection ends; ours went with the TUN,
        # which "links" shows is gone)
        out[f"routes{v}"] = sorted(
            r
            for r in lab.run_in("A", "ip", v, "route", "show", "table", "all").stdout.splitlines()
            if "proto kernel" not in r
        )
    out["socket"] = os.path.exists(f"/var/run/wireguard/{iface}.sock")
    return out


def _ready_or_exit(proc, timeout=30):
    """True once READY=1 came, False if the process exited first."""
    proc.notify.settimeout(0.1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "READY=1" in proc.notify.recv(4096).decode().split("\n"):
                return True
        except socket.timeout:
            if proc.popen.poll() is not None:
                return False
    raise AssertionError(f"neither READY=1 nor an exit within {timeout} s:\n{proc.log()}")


def _run(lab, a, n, conf_path):
    count = os.path.join(lab.tmp, f"steps-{n}")
    proc = lab.spawn_vpncrypt(
        "A",
        a.iface,
        conf_path,
        wait_ready=False,
        prefix=(sys.executable, "-m", "tests.interop.startup_child", str(n), count),
        command=script("vpncrypt"),
    )
    ready = _ready_or_exit(proc)
    if ready:
        proc.popen.send_signal(signal.SIGTERM)
    code = proc.popen.wait(30)
    steps = int(open(count).read()) if os.path.exists(count) else None
    return ready, code, steps, proc


def test_sigterm_at_every_step_of_startup_leaves_the_host_as_before(lab):
    lab.run_in("A", "ip", "route", "add", "default", "via", "192.168.241.2")
    a = lab.node("A", "vpncrypt")
    peer = lab.node("B", "vpncrypt")
    conf = a.write_conf(
        a.conf([{"public": peer.public, "allowed": "0.0.0.0/0, ::/0", "endpoint": f"198.18.7.2:{PORT}"}])
    )
    before = _host(lab, a.iface)
    ready, code, total, proc = _run(lab, a, 0, conf)
    assert ready and code == 0 and total, proc.log()
    assert _host(lab, a.iface) == before, proc.log()
    stopped_early = 0
    for n in range(1, total + 1):
        ready, code, _, proc = _run(lab, a, n, conf)
        assert code == 0, f"SIGTERM after step {n} of {total}: exit {code}\n{proc.log()}"
        after = _host(lab, a.iface)
        assert after == before, f"SIGTERM after step {n} of {total} left:\n{after}\n{proc.log()}"
        stopped_early += not ready
    # most steps are start-up's (the rest are the clean-up's, with a second SIGTERM)
    assert stopped_early > total // 2, (stopped_early, total)
