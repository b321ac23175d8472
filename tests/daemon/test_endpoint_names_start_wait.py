"""Issue 31 item 1: a resolver that takes its time does not hold up the
start.  The daemon runs in-process in a namespace of its own, with a
getaddrinfo that blocks on the Endpoint's name until the test lets it
answer: the interface comes up (READY) while the lookup is still under way,
the named peer without an endpoint and the numeric one with its own; when
the answer comes, the peer gets it, with no reload."""

from tests.daemon.inprocess import run_child_in_namespace

CHILD = r"""
import json, os, socket, tempfile, threading
from vpncrypt.daemon.daemon import Daemon, run_daemon
from vpncrypt.daemon import uapiclient
from vpncrypt.protocol import keys

NAME = "slow.vpncrypt.test"
asked = threading.Event()
release = threading.Event()
ready = threading.Event()
real = socket.getaddrinfo


def slow(host, port, *a, **kw):
    if host != NAME:
        return real(host, port, *a, **kw)
    asked.set()
    release.wait(120)
    return [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", ("192.0.2.44", port))]


socket.getaddrinfo = slow
tmp = tempfile.mkdtemp()
conf = os.path.join(tmp, "t.conf")
named, numeric = (keys.pubkey(keys.genkey()) for _ in range(2))
with open(conf, "w") as f:
    f.write("[Interface]\nPrivateKey = %s\n" % keys.genkey())
    f.write("\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.1.0/24\nEndpoint = %s:51001\n" % (named, NAME))
    f.write("\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.2.0/24\nEndpoint = 192.0.2.2:51002\n" % numeric)
os.chmod(conf, 0o600)
result = {}


def endpoints():
    dev = uapiclient.parse_get(uapiclient.request(os.path.join(tmp, "vcslow0.sock"), "get=vpncrypt"))
    hexkey = lambda k: keys.decode(k).hex()
    eps = {p["public_key"]: p.get("endpoint") for p in dev["peers"]}
    return eps.get(hexkey(named)), eps.get(hexkey(numeric)), dev.get("endpoint_names", {}).get(hexkey(named))


def drive(d):
    try:
        # READY while the lookup is still blocked (main waited for it)
        result["ready_while_asking"] = ready.wait(60) and not release.is_set()
        result["asked"] = asked.is_set()
        result["during"] = endpoints()
        release.set()
        for _ in range(1200):
            result["after"] = endpoints()
            if result["after"][0]:
                break
            threading.Event().wait(0.05)
    finally:
        release.set()
        d.loop.call_soon_threadsafe(d.stop, 0)


def give_up():  # main: READY comes only after the answer; let it come
    if not ready.wait(60):
        release.set()


threading.Thread(target=give_up, daemon=True).start()
d = Daemon("vcslow0", conf, socket_dir=tmp, on_ready=ready.set)
threading.Thread(target=drive, args=(d,), daemon=True).start()
result["exit"] = run_daemon(d)
print(json.dumps(result))
"""


def test_a_slow_resolver_does_not_hold_up_the_start():
    res = run_child_in_namespace(CHILD, "vpncrypt-slowdns", timeout=240)
    assert res["asked"] and res["ready_while_asking"] is True, res
    named, numeric, name = res["during"]
    assert named is None and numeric == "192.0.2.2:51002", res
    assert name["name"] == "slow.vpncrypt.test:51001" and name["state"] == "pending", res
    named, numeric, name = res["after"]
    assert named == "192.0.2.44:51001" and numeric == "192.0.2.2:51002", res
    assert name["state"] == "resolved" and name["resolved"] > 0, res
    assert res["exit"] == 0, res
