"""The proxy's start and end: kill -9 leaves nothing behind but its UAPI
socket file (the documented leftover, cleared by the next start); a host
without user namespaces gets one line saying so."""

import os
import signal
import subprocess
import time

from tests.installed import script
from tests.proxy.lab import ECHO_PORT

FRONTS = (
    "[Socks5]\nBindAddress = 127.0.0.1:1090\n\n"
    f"[TCPServerTunnel]\nListenPort = 9000\nTarget = 127.0.0.1:{ECHO_PORT}\n"
)


def ns_inode(pid: int, kind: str) -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def ended(pid: int) -> bool:
    """Exited (a zombie waits for whoever reaps orphans: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def holders(inode: int) -> list[int]:
    """The processes in the network namespace `inode`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def wait_for(what, condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.05)


def port_free(lab, port: int) -> bool:
    r = lab.world.run(
        "h", "python3", "-c", f"import socket; socket.create_server(('127.0.0.1', {port}))", check=False
    )
    return r.returncode == 0


def fetch_ok(lab, proxy) -> None:
    r = lab.curl(
        "--socks5",
        "127.0.0.1:1090",
        "http://10.77.0.1:8000/blob",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
    )
    assert r.returncode == 0 and r.stdout == str(3 << 20), f"{r.stderr}\n{proxy.log()[-2000:]}"


def test_kill_9_leaves_nothing_behind(lab):
    key = lab.add_peer("10.77.0.3", "fd77::3")
    text = lab.config(key, "10.77.0.3", FRONTS, v6="fd77::3")
    proxy = lab.start_proxy("killme", text)
    fetch_ok(lab, proxy)
    pid = proxy.popen.pid  # ip netns exec and setpriv exec it: the proxy itself
    assert ns_inode(pid, "user") != ns_inode(os.getpid(), "user")
    netns = ns_inode(pid, "net")
    helpers = children(pid)
    assert len(helpers) == 1, helpers  # the host-side connector of [TCPServerTunnel]
    assert ns_inode(helpers[0], "net") != netns  # it stayed in the host's namespace

    proxy.popen.send_signal(signal.SIGKILL)
    proxy.popen.wait(30)
    wait_for("the helper's end", lambda: ended(helpers[0]))
    assert holders(netns) == []  # nothing holds the namespace (its veth pair went with it)
    left = sorted(
        os.path.relpath(os.path.join(d, f), proxy.rundir) for d, _s, fs in os.walk(proxy.rundir) for f in fs
    )
    assert left == ["vpncrypt/killme.sock"]
    assert port_free(lab, 1090)

    again = lab.start_proxy("killme", text)  # the stale socket is no obstacle
    fetch_ok(lab, again)
    again.popen.send_signal(signal.SIGTERM)
    assert again.popen.wait(30) == 0, again.log()
    assert not os.path.exists(again.sock)


def test_no_user_namespaces_is_one_line(lab):
    """In a user namespace whose user.max_user_namespaces is 0 the proxy
    cannot make its own: one line on stderr, exit status 1, nothing left."""
    key = lab.add_peer("10.77.0.4")
    conf = lab.write_config("nouserns", lab.config(key, "10.77.0.4", FRONTS, v6="fd77::4"))
    for path in (conf, os.path.dirname(conf)):  # the user here is root, in a user namespace of its own
        os.chown(path, 0, 0)
    inner = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {script('vpncrypt')} proxy -c {conf}"
    r = lab.world.run("h", "unshare", "-Ur", "sh", "-c", inner, check=False)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "cannot create a user and network namespace" in lines[0]
    assert "user.max_user_namespaces" in lines[0]
    assert port_free(lab, 1090)
    found = subprocess.run(["pgrep", "-f", conf], capture_output=True, text=True)
    assert found.stdout == "", found.stdout  # the helper forked before the unshare is gone too


def test_endpoint_name_that_does_not_resolve(lab):
    """Names are looked up once, before the unshare (the namespace has no
    way to the host's resolver): one that fails is a config error with its
    line, and nothing is left."""
    key = lab.add_peer("10.77.0.5")
    text = lab.config(key, "10.77.0.5", FRONTS).replace("172.31.0.1:51820", "no-such-host.invalid:51820")
    proxy = lab.start_proxy("badname", text, wait=False)
    assert proxy.popen.wait(60) == 1
    lines = [line for line in proxy.log().splitlines() if " DEBUG " not in line]  # (it runs with debug on)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"{os.path.join(lab.world.tmp, 'badname-conf', 'badname.conf')}:9: [Peer] Endpoint: "
    )
    assert port_free(lab, 1090)
    assert os.listdir(os.path.join(proxy.rundir, "vpncrypt")) == []
