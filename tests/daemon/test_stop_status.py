"""How a daemon ends when its interface goes, and when its data plane fails.

`ip link del` (what `wg-quick down` does to a userspace tunnel) is an
operator's stop: wireguard-go 0.0.20250522 exits 0 and logs no error then,
and systemd/vpncrypt@.service (Restart=on-failure) must not start the tunnel
again, so one INFO line and exit status 0.  A data plane that fails while
its TUN is still there stays an ERROR and exit status 1 (a restart is what
the unit is for).  The daemon runs in-process in a network namespace made
for the test, on a real TUN."""

from tests.daemon.inprocess import run_child_in_namespace

CHILD = r"""
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
    f.write("[Interface]\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.0.0/24\n"
            % (keys.genkey(), keys.pubkey(keys.genkey())))
os.chmod(conf, 0o600)
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
