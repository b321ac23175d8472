"""systemd/vpncrypt@.service under a real systemd (252, PID 1 of a container
booted from this machine's /usr): notify readiness and STATUS=, reload, the
watchdog (pings, and a hung daemon killed and restarted), stop, and a config
that can never load (the start limit trips; no endless restart loop)."""

import os
import sys
import time

import pytest

import vpncrypt
from tests.daemon.container import Container
from tests.installed import script
from vpncrypt.protocol import keys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "systemd", "vpncrypt@.service")


def _visible_dirs():
    """What the service needs to see of this machine: the venv, the
    interpreter it points at (when outside /usr) and the vpncrypt package."""
    dirs = {sys.prefix, os.path.dirname(os.path.dirname(os.path.abspath(vpncrypt.__file__)))}
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/usr"):
        dirs.add(base)
    return sorted(dirs)


def _conf(peers, private):
    lines = ["[Interface]", f"PrivateKey = {private}", "ListenPort = 51820", "Address = 10.211.0.1/24"]
    for i, pub in enumerate(peers):
        lines += ["[Peer]", f"PublicKey = {pub}", f"AllowedIPs = 10.211.0.{i + 2}/32"]
    return "\n".join(lines) + "\n"


def _wait(what, fn, timeout=20, every=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not reached within {timeout} s (last: {last!r})")


@pytest.fixture
def container():
    assert os.geteuid() == 0, "the systemd test boots a container: it needs root"
    c = Container(binds_ro=_visible_dirs())
    try:
        yield c
    finally:
        c.close()


def _install(c, dirs):
    c.run("tee", "/etc/systemd/system/vpncrypt@.service", input=open(UNIT).read())
    # As an administrator with a venv does (see the unit's comment): point
    # ExecStart at it and let the sandbox see it.  WatchdogSec is shortened so
    # that the watchdog can be watched within seconds.
    c.run("mkdir", "-p", "/etc/systemd/system/vpncrypt@.service.d")
    # A venv in a home directory needs ProtectHome=tmpfs (an empty /root and
    # /home into which BindReadOnlyPaths= can make it visible).
    home = any(d.split("/")[1] in ("root", "home") for d in dirs)
    c.run(
        "tee",
        "/etc/systemd/system/vpncrypt@.service.d/test.conf",
        input=(
            "[Service]\nExecStart=\n"
            f"ExecStart={script('vpncrypt')} up %i -c /etc/vpncrypt/%i.conf\n"
            f"BindReadOnlyPaths={' '.join(dirs)}\nWatchdogSec=2s\n" + ("ProtectHome=tmpfs\n" if home else "")
        ),
    )
    c.run("install", "-d", "-m", "700", "/etc/vpncrypt")
    # the container has no network to wait for: network-online.target is
    # reached at once instead of after wait-online's two-minute timeout
    c.run("systemctl", "mask", "systemd-networkd-wait-online.service")
    c.run("systemctl", "daemon-reload")


def _write(c, name, text):
    c.run("tee", f"/etc/vpncrypt/{name}.conf", input=text)
    c.run("chmod", "600", f"/etc/vpncrypt/{name}.conf")


def test_unit_under_real_systemd(container):
    c = container
    _install(c, _visible_dirs())
    peers = [keys.pubkey(keys.genkey()) for _ in range(2)]
    private = keys.genkey()
    _write(c, "vct0", _conf(peers[:1], private))

    # notify readiness: `systemctl start` of a Type=notify unit returns once READY=1 came
    c.run("systemctl", "start", "vpncrypt@vct0")
    s = c.show("vpncrypt@vct0", "ActiveState", "SubState", "StatusText", "MainPID", "NRestarts")
    assert (s["ActiveState"], s["SubState"]) == ("active", "running"), s
    assert s["StatusText"] == "1 peer, no handshake yet", s
    assert c.run("wg", "show", "vct0", "peers").stdout.split() == peers[:1]
    pid = s["MainPID"]

    # the watchdog is pinged (its timestamp moves) and the service stays up
    t1 = int(c.show("vpncrypt@vct0", "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"])
    _wait(
        "a newer watchdog ping",
        lambda: int(c.show("vpncrypt@vct0", "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]) > t1,
    )

    # reload: the new peer is applied, same process
    _write(c, "vct0", _conf(peers, private))
    c.run("systemctl", "reload", "vpncrypt@vct0")
    assert sorted(c.run("wg", "show", "vct0", "peers").stdout.split()) == sorted(peers)
    s = c.show("vpncrypt@vct0", "ActiveState", "MainPID", "StatusText")
    assert s["ActiveState"] == "active" and s["MainPID"] == pid, s
    assert s["StatusText"] == "2 peers, no handshake yet", s

    # a hung daemon stops pinging: systemd kills it (Result=watchdog) and restarts it
    c.run("kill", "-STOP", pid)
    _wait(
        "a restart after the watchdog fired",
        lambda: c.show("vpncrypt@vct0", "NRestarts")["NRestarts"] == "1",
        timeout=30,
    )
    s = _wait(
        "the restarted service",
        lambda: (lambda s: s if s["ActiveState"] == "active" and s["MainPID"] not in ("0", pid) else None)(
            c.show("vpncrypt@vct0", "ActiveState", "MainPID")
        ),
        timeout=20,
    )
    log = c.run("journalctl", "-u", "vpncrypt@vct0", "-o", "cat", "--no-pager").stdout
    assert "Watchdog timeout" in log or "watchdog" in log.lower(), log[-2000:]

    # stop: interface and UAPI socket gone, exit status 0
    c.run("systemctl", "stop", "vpncrypt@vct0")
    s = c.show("vpncrypt@vct0", "ActiveState", "Result")
    assert s == {"ActiveState": "inactive", "Result": "success"}, s
    assert c.run("ip", "link", "show", "vct0", check=False).returncode != 0
    assert c.run("test", "-e", "/run/wireguard/vct0.sock", check=False).returncode != 0


def test_config_that_never_loads_stops_restarting(container):
    """A broken file: a few tries, then the unit stays failed (start limit),
    each try logging the one-line error without a logger prefix."""
    c = container
    _install(c, _visible_dirs())
    _write(c, "vct1", "[Interface]\nBogus = 1\n")
    assert c.run("systemctl", "start", "vpncrypt@vct1", check=False).returncode != 0
    journal = ("journalctl", "-u", "vpncrypt@vct1", "-o", "cat", "--no-pager")
    _wait(
        "the start limit", lambda: "Start request repeated too quickly" in c.run(*journal).stdout, timeout=40
    )
    s = c.show("vpncrypt@vct1", "ActiveState", "Result", "NRestarts")
    assert s["ActiveState"] == "failed", s
    time.sleep(5)  # and it stays that way: no more restarts
    s2 = c.show("vpncrypt@vct1", "ActiveState", "Result", "NRestarts")
    assert s2 == s, (s, s2)
    assert int(s["NRestarts"]) <= 5, s
    log = c.run(*journal).stdout
    errors = [line for line in log.splitlines() if "Bogus" in line]
    assert errors and all(
        line == "/etc/vpncrypt/vct1.conf:2: [Interface] Bogus: unknown key" for line in errors
    ), log
    assert len(errors) <= int(s["NRestarts"]) + 1, log  # one line per try, no more
    assert " down" not in log, log


def test_unit_lets_the_full_tunnel_set_src_valid_mark(container):
    """ProtectKernelTunables= makes /proc/sys read-only; the unit opens the
    one file a full tunnel writes (net.ipv4.conf.all.src_valid_mark, in the
    container's own network namespace), and the daemon's nft table goes in
    and out with it."""
    c = container
    _install(c, _visible_dirs())
    c.run("sysctl", "-q", "-w", "net.ipv4.conf.all.src_valid_mark=0")
    _write(
        c,
        "vct2",
        "[Interface]\n"
        f"PrivateKey = {keys.genkey()}\nListenPort = 51820\n"
        "Address = 10.211.0.1/24\n[Peer]\n"
        f"PublicKey = {keys.pubkey(keys.genkey())}\nAllowedIPs = 0.0.0.0/0\n",
    )
    c.run("systemctl", "start", "vpncrypt@vct2")
    log = c.run("journalctl", "-u", "vpncrypt@vct2", "-o", "cat", "--no-pager").stdout
    assert c.run("cat", "/proc/sys/net/ipv4/conf/all/src_valid_mark").stdout.strip() == "1", log
    assert "src_valid_mark" not in log, log  # no "cannot set" warning
    assert "table ip vpncrypt-vct2" in c.run("nft", "list", "tables").stdout, log
    # the rest of /proc/sys stays read-only in the service's mount namespace
    pid = c.show("vpncrypt@vct2", "MainPID")["MainPID"]
    r = c.run(
        "nsenter", "-t", pid, "-m", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/all/forwarding", check=False
    )
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r
    c.run("systemctl", "stop", "vpncrypt@vct2")
    assert "vpncrypt-vct2" not in c.run("nft", "list", "tables").stdout
    assert "suppress_prefixlength" not in c.run("ip", "-4", "rule", "show").stdout


def test_interface_deleted_stops_the_unit_for_good(container):
    """`ip link del` (what `wg-quick down` does) is an operator's stop: the
    unit ends inactive with Result=success and Restart=on-failure does not
    start it again (it would make the interface anew); the journal holds no
    line at error priority (journald's PRIORITY 3 or lower)."""
    c = container
    _install(c, _visible_dirs())
    _write(c, "vct3", _conf([keys.pubkey(keys.genkey())], keys.genkey()))
    c.run("systemctl", "start", "vpncrypt@vct3")
    c.run("ip", "link", "del", "vct3")
    _wait("the unit's stop", lambda: c.show("vpncrypt@vct3", "ActiveState")["ActiveState"] == "inactive")
    time.sleep(4)  # RestartSec=2s: a restart would have come by now
    s = c.show("vpncrypt@vct3", "ActiveState", "Result", "NRestarts", "ExecMainStatus")
    assert s == {"ActiveState": "inactive", "Result": "success", "NRestarts": "0", "ExecMainStatus": "0"}, s
    assert c.run("ip", "link", "show", "vct3", check=False).returncode != 0
    journal = ("journalctl", "-u", "vpncrypt@vct3", "--no-pager", "-o", "cat")
    log = c.run(*journal).stdout
    assert "interface vct3 was deleted; stopping" in log, log
    assert c.run(*journal, "-p", "err").stdout.strip() == "", log


def test_metrics_drop_in_serves_the_group_only(container):
    """systemd/vpncrypt-metrics.conf.example as shipped (form 1: a UNIX
    socket for the group prometheus) under the hardened unit: the socket is
    0660 root:prometheus in /run/vpncrypt, a member of the group scrapes
    it, another local user cannot, and it goes with the stop."""
    c = container
    _install(c, _visible_dirs())
    c.run("groupadd", "--system", "prometheus")
    drop_in = open(os.path.join(REPO, "systemd", "vpncrypt-metrics.conf.example")).read()
    c.run("mkdir", "-p", "/etc/systemd/system/vpncrypt@vct4.service.d")
    c.run("tee", "/etc/systemd/system/vpncrypt@vct4.service.d/metrics.conf", input=drop_in)
    c.run("systemctl", "daemon-reload")
    _write(c, "vct4", _conf([keys.pubkey(keys.genkey())], keys.genkey()))
    c.run("systemctl", "start", "vpncrypt@vct4")
    sock = "/run/vpncrypt/vct4-metrics.sock"
    assert c.run("stat", "-c", "%a %U %G %F", sock).stdout.split() == ["660", "root", "prometheus", "socket"]
    assert c.run("stat", "-c", "%a", "/run/vpncrypt").stdout.strip() == "755"
    client = os.path.join(REPO, "tests", "metrics", "scrape_client.py")
    scrape = ("/usr/bin/python3", client, f"unix:{sock}")
    member = c.run("setpriv", "--reuid=nobody", "--regid=prometheus", "--clear-groups", *scrape, check=False)
    assert member.stdout.startswith("status: 200\n") and "vpncrypt_peers" in member.stdout, member
    other = c.run("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *scrape, check=False)
    assert other.stdout.startswith("error: PermissionError"), other
    c.run("systemctl", "stop", "vpncrypt@vct4")
    assert c.run("test", "-e", sock, check=False).returncode != 0
