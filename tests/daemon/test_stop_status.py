"""How a daemon ends when its interface goes, and when its data plane fails.

`ip link del` (what `wg-quick down` does to a userspace tunnel) is an
operator's stop: wireguard-go 0.0.20250522 exits 0 and logs no error then,
and systemd/vpncrypt@.service (Restart=on-failure) must not start the tunnel
again, so one INFO line and exit status 0.  A data plane that fails while
its TUN is still there stays an ERROR and exit status 1 (a restart is what
the unit is for).  The daemon runs in-process in a network namespace made
for the test, on a real TUN."""

import pytest

from tests.daemon.inprocess import run_child_in_namespace

# the children's start: every log record kept, a config with one peer
# (ADDRESS: the interface's Address line, if any)
PRELUDE = r"""
import errno, json, logging, os, subprocess, tempfile, threading
from vpncrypt.daemon.daemon import Daemon, run_daemon
from vpncrypt.protocol import keys

records = []
class Keep(logging.Handler):
    def emit(self, r):
        records.append((r.levelname, r.getMessage()))
logging.getLogger("vpncrypt").addHandler(Keep())
logging.getLogger("vpncrypt").setLevel(logging.DEBUG)

tmp = tempfile.mkdtemp()
conf = os.path.join(tmp, "t.conf")
with open(conf, "w") as f:
    f.write("[Interface]\nPrivateKey = %s\n__ADDRESS__\n[Peer]\nPublicKey = %s\n"
            "AllowedIPs = 10.9.0.0/24, 10.8.0.0/16\n" % (keys.genkey(), keys.pubkey(keys.genkey())))
os.chmod(conf, 0o600)
"""

CHILD = (
    PRELUDE.replace("__ADDRESS__", "")
    + r"""
HOW = "__HOW__"


def drive(d):
    if HOW == "delete":
        subprocess.run(["ip", "link", "del", "vcst0"], check=True)
    else:  # a failure of the data plane's I/O while the TUN is still there
        d.loop.call_soon_threadsafe(d.engine._fatal, OSError(errno.EIO, os.strerror(errno.EIO)))


d = Daemon("vcst0", conf, socket_dir=tmp,
           on_ready=lambda: threading.Thread(target=drive, args=(d,), daemon=True).start())
code = run_daemon(d)
link = subprocess.run(["ip", "link", "show", "vcst0"], capture_output=True).returncode == 0
print(json.dumps({"code": code, "records": records, "link": link}))
"""
)


def _run(how: str) -> dict:
    return run_child_in_namespace(CHILD.replace("__HOW__", how), "vcst", timeout=120)


def test_interface_deleted_is_an_orderly_stop():
    r = _run("delete")
    errors = [m for level, m in r["records"] if level in ("ERROR", "CRITICAL")]
    assert errors == [], r["records"]
    assert r["code"] == 0, r["records"]
    assert ["INFO", "interface vcst0 was deleted; stopping"] in r["records"], r["records"]
    assert not r["link"]


def test_data_plane_failure_is_an_error_and_exit_1():
    r = _run("fail")
    errors = [m for level, m in r["records"] if level in ("ERROR", "CRITICAL")]
    assert errors == ["data plane failed (Input/output error); shutting down"], r["records"]
    assert r["code"] == 1, r["records"]
    assert not r["link"], "the daemon made the interface: it deletes it on the way out"


START_CHILD = (
    PRELUDE.replace("__ADDRESS__", "Address = 10.9.0.1/24\\n")
    + r"""
from vpncrypt.daemon.routes import Routes
from vpncrypt.daemon.tun import TunDevice

STEP = "__STEP__"
# the operator's `ip link del` lands in the step named: deleted from
# within it, just before it changes the host (what `ip monitor link`
# racing the start did, made certain)
cls, name = {"address": (TunDevice, "add_addresses"), "up": (TunDevice, "set_up"),
             "route": (Routes, "sync")}[STEP]
real = getattr(cls, name)
def step(self, *args, **kw):
    subprocess.run(["ip", "link", "del", "vcsd0"], check=True)
    return real(self, *args, **kw)
setattr(cls, name, step)

d = Daemon("vcsd0", conf, socket_dir=tmp)
code = run_daemon(d)
link = subprocess.run(["ip", "link", "show", "vcsd0"], capture_output=True).returncode == 0
print(json.dumps({"code": code, "records": records, "link": link}))
"""
)


@pytest.mark.parametrize("step", ["address", "up", "route"])
def test_interface_deleted_during_the_start_is_an_orderly_stop(step):
    r = run_child_in_namespace(START_CHILD.replace("__STEP__", step), "vcsd", timeout=120)
    errors = [m for level, m in r["records"] if level in ("ERROR", "CRITICAL")]
    assert errors == [], r["records"]
    assert r["code"] == 0, r["records"]
    assert ["INFO", "interface vcsd0 was deleted during startup; stopping"] in r["records"], r["records"]
    assert not r["link"]


SERVED_CHILD = (
    PRELUDE.replace("__ADDRESS__", "")
    + r"""
import socket
from vpncrypt.daemon.daemon import StartupError
# a live daemon already serves vcst0's UAPI socket (a listener there), and a
# route of the host's lies on a device the start would clean up if it got so far
live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
live.bind(os.path.join(tmp, "vcst0.sock"))
live.listen(1)
import io, sys
err, sys.stderr = sys.stderr, io.StringIO()  # the start's one line goes to stderr
d = Daemon("vcst0", conf, socket_dir=tmp)
code = run_daemon(d)
said, sys.stderr = sys.stderr.getvalue(), err
link = subprocess.run(["ip", "link", "show", "vcst0"], capture_output=True).returncode == 0
print(json.dumps({"code": code, "records": records, "link": link, "said": said}))
"""
)


def test_an_interface_another_daemon_serves_is_left_alone():
    """A second daemon for an interface a live daemon serves stops before it
    changes anything on the host: no TUN made or attached, no routes removed
    (it found the live UAPI socket only after removing the first daemon's
    routes and adding its own, then removed those too: review of the merged
    tree, where the routes came to be set before the UAPI server)."""
    r = run_child_in_namespace(SERVED_CHILD, "vcst", timeout=120)
    assert r["code"] == 1, r["records"]
    assert not r["link"]
    # nothing on the host was touched: no TUN made, no route looked at
    touched = [m for _, m in r["records"] if "TUN" in m or "route" in m]
    assert touched == [], touched
    assert "cannot start vcst0: another daemon serves it" in r["said"], r
