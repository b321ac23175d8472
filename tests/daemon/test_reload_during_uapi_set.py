"""A SIGHUP that arrives while a big UAPI set is being applied in slices
waits for it and then applies the file (as `wg syncconf`): it is neither
mixed into the set nor refused.  The daemon runs in-process in a network
namespace made for the test; the set gives one peer that the file does not
name 300,000 allowed IPs, so after the reload that peer is gone and the
file's peer is there with its network."""

from tests.daemon.inprocess import run_child_in_namespace

CHILD = r"""
import json, logging, os, signal, sys, tempfile, threading, time
from vpncrypt.daemon.daemon import Daemon, run_daemon
from vpncrypt.daemon import uapiclient
from vpncrypt.protocol import keys

records = []
class Keep(logging.Handler):
    def emit(self, r):
        records.append(r.getMessage())
logging.getLogger("vpncrypt").addHandler(Keep())
logging.getLogger("vpncrypt").setLevel(logging.INFO)

tmp = tempfile.mkdtemp()
conf = os.path.join(tmp, "t.conf")
filed = keys.pubkey(keys.genkey())
extra = keys.pubkey(keys.genkey())
with open(conf, "w") as f:
    f.write("[Interface]\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.0.0/24\n"
            % (keys.genkey(), filed))
os.chmod(conf, 0o600)
result = {}
hx = lambda k: keys.decode(k).hex()


def peers(sock):
    out, pk = {}, None
    for line in uapiclient.request(sock, "get=1", timeout=60).splitlines():
        k, _, v = line.partition("=")
        if k == "public_key":
            pk = v
            out[pk] = 0
        elif k == "allowed_ip":
            out[pk] += 1
    return out


def drive(d):
    try:
        sock = os.path.join(tmp, "vcrl0.sock")
        body = ["set=1", "public_key=" + hx(extra)]
        body += ["allowed_ip=10.%d.%d.%d/32" % (100 + i // 65536, i // 256 % 256, i % 256)
                 for i in range(300000)]
        answer = {}
        t = threading.Thread(target=lambda: answer.update(
            a=uapiclient.request(sock, "\n".join(body), timeout=120)))
        t.start()
        seen_busy = False
        for _ in range(20000):
            if d.control.busy:
                seen_busy = True
                os.kill(os.getpid(), signal.SIGHUP)
                break
            time.sleep(0.0005)
        result["hup_during_set"] = seen_busy
        t.join(120)
        result["set_answer"] = answer.get("a", "").strip()
        for _ in range(600):
            if any(m.startswith(("reloaded", "reload failed")) for m in records):
                break
            time.sleep(0.05)
        result["reload_logs"] = [m for m in records if m.startswith(("reloaded", "reload failed"))]
        got = peers(sock)
        result["peers"] = {("filed" if k == hx(filed) else "extra" if k == hx(extra) else k): n
                           for k, n in got.items()}
    finally:
        d.loop.call_soon_threadsafe(d.stop, 0)


d = Daemon("vcrl0", conf, socket_dir=tmp,
           on_ready=lambda: threading.Thread(target=drive, args=(d,), daemon=True).start())
result["exit"] = run_daemon(d)
print(json.dumps(result))
"""


def test_sighup_during_a_sliced_set_waits_and_then_applies_the_file():
    res = run_child_in_namespace(CHILD, "vpncrypt-rl", timeout=300)
    assert res["hup_during_set"], res
    assert res["set_answer"] == "errno=0", res
    assert len(res["reload_logs"]) == 1 and res["reload_logs"][0].startswith("reloaded"), res
    # the file, applied after the set: its one peer, and the set's peer removed
    assert res["peers"] == {"filed": 1}, res
    assert res["exit"] == 0, res
