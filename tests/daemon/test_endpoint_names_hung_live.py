"""Lookups that never return, in the running daemon: four of them do not
stop a fifth name from being resolved, and a SIGHUP reload with such a name
completes (and so does the next one).  The daemon runs in-process in a
namespace of its own, with a getaddrinfo that blocks on the "hung" names
until the test ends; the 30 s bound (LOOKUP_LIMIT) is made 5 s here so the
test is short (the state machine's own test holds it to 30 s).  Nothing
here waits on the clock to decide a result: each step waits for what the
daemon shows, with a generous limit."""

from tests.daemon.inprocess import run_child_in_namespace

COMMON = r"""
import json, logging, os, signal, socket, tempfile, threading
from vpncrypt.daemon import daemon as daemon_module, endpoint_names, uapiclient
from vpncrypt.daemon.daemon import Daemon, run_daemon
from vpncrypt.protocol import keys

endpoint_names.LOOKUP_LIMIT = daemon_module.LOOKUP_LIMIT = 5.0
release = threading.Event()       # set only as the test ends: the hung lookups hang till then
ready = threading.Event()
lock = threading.Lock()
calls, inflight, most = {}, {}, {}
real = socket.getaddrinfo
lines = []


class Lines(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())


logging.getLogger("vpncrypt").addHandler(Lines())
logging.getLogger("vpncrypt").setLevel(logging.DEBUG)


def answer(host, port, n):  # the test's: an address, None to hang, or an exception
    raise NotImplementedError


def fake(host, port, *a, **kw):
    if not host.endswith(".vpncrypt.test"):
        return real(host, port, *a, **kw)
    with lock:
        n = calls[host] = calls.get(host, 0) + 1
        inflight[host] = inflight.get(host, 0) + 1
        most[host] = max(most.get(host, 0), inflight[host])
    try:
        got = answer(host, port, n)
        if got is None:
            release.wait(300)
            raise socket.gaierror(socket.EAI_AGAIN, "released")
        if isinstance(got, Exception):
            raise got
        return [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", (got, port))]
    finally:
        with lock:
            inflight[host] -= 1


socket.getaddrinfo = fake
tmp = tempfile.mkdtemp()
conf = os.path.join(tmp, "t.conf")
private = keys.genkey()


def write(peers):
    with open(conf + ".new", "w") as f:
        f.write("[Interface]\nPrivateKey = %s\n" % private)
        for i, (pk, ep) in enumerate(peers):
            f.write("\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.%d.0/24\nEndpoint = %s\n" % (pk, i, ep))
    os.chmod(conf + ".new", 0o600)
    os.rename(conf + ".new", conf)


def shown(iface):
    dev = uapiclient.parse_get(uapiclient.request(os.path.join(tmp, iface + ".sock"), "get=vpncrypt"))
    return {p["public_key"]: p.get("endpoint") for p in dev["peers"]}, dev.get("endpoint_names", {})


def hexkey(k):
    return keys.decode(k).hex()


def wait_for(check, tries=1200):
    for _ in range(tries):
        got = check()
        if got:
            return got
        threading.Event().wait(0.05)
    return None


def run(iface, drive):
    result = {}

    def driver(d):
        try:
            if ready.wait(60):
                drive(result)
        finally:
            result["released_at_end"] = not release.is_set()
            release.set()
            d.loop.call_soon_threadsafe(d.stop, 0)

    d = Daemon(iface, conf, socket_dir=tmp, on_ready=ready.set)
    threading.Thread(target=driver, args=(d,), daemon=True).start()
    result["exit"] = run_daemon(d)
    result["calls"], result["most"] = calls, most
    result["lines"] = [l for l in lines if "abandoned" in l]
    print(json.dumps(result))
"""

FIVE = (
    COMMON
    + r"""
HUNG = ["hung%d.vpncrypt.test" % i for i in range(1, 5)]
GOOD = "good.vpncrypt.test"


def answer(host, port, n):
    if n == 1:  # the start's lookups: the resolver is not there yet
        return socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    if host in HUNG:
        return None
    # the good name answers only from its third lookup, and only once the
    # four hung lookups hang: the first background round (all five due at
    # once) has four places, for the four hung names: the good name's
    # second and third lookups come once the hung ones are abandoned
    with lock:
        if n < 3 or sum(inflight.get(h, 0) for h in HUNG) < 4:
            return socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    return "192.0.2.50"


peers = [keys.pubkey(keys.genkey()) for _ in range(5)]
write(list(zip(peers, [h + ":5100%d" % i for i, h in enumerate(HUNG + [GOOD])])))


def drive(result):
    result["good"] = wait_for(lambda: shown("vchung0")[0].get(hexkey(peers[4])))
    with lock:
        result["hung_inflight"] = [inflight.get(h, 0) for h in HUNG]
    eps, names = shown("vchung0")
    result["hung_endpoints"] = [eps.get(hexkey(pk)) for pk in peers[:4]]
    result["hung_states"] = [names[hexkey(pk)]["state"] for pk in peers[:4]]
    # a few more rounds: no second lookup of a name whose lookup still hangs
    result["more_rounds"] = wait_for(lambda: False, tries=60)


run("vchung0", drive)
"""
)


def test_four_hung_lookups_do_not_stop_a_fifth_name():
    res = run_child_in_namespace(FIVE, "vpncrypt-hungdns", timeout=240)
    assert res["good"] == "192.0.2.50:51004", res
    assert res["hung_inflight"] == [1, 1, 1, 1] and res["released_at_end"], res
    assert res["hung_endpoints"] == [None] * 4 and res["hung_states"] == ["pending"] * 4, res
    hung = ["hung%d.vpncrypt.test" % i for i in range(1, 5)]
    # one lookup at the start, one that hangs; never two at once, none while one hangs
    assert [res["calls"][h] for h in hung] == [2] * 4, res
    assert [res["most"][h] for h in hung] == [1] * 4, res
    for h in hung:  # one line per name, with the count
        assert (
            sum(h in line and "lookup abandoned (1 so far for this name)" in line for line in res["lines"])
            == 1
        ), res
    assert res["exit"] == 0, res


RELOAD = (
    COMMON
    + r"""
HUNG = "hung.vpncrypt.test"


def answer(host, port, n):
    return "192.0.2.10" if n == 1 else None  # found at the start, then hangs


a, b, c = (keys.pubkey(keys.genkey()) for _ in range(3))
write([(a, HUNG + ":51001"), (b, "192.0.2.2:51002")])


def drive(result):
    write([(a, HUNG + ":51001"), (b, "192.0.2.3:51002"), (c, "192.0.2.4:51003")])
    os.kill(os.getpid(), signal.SIGHUP)
    result["first"] = wait_for(lambda: (e := shown("vchung1")[0]).get(hexkey(c)) and e)
    write([(a, HUNG + ":51001"), (b, "192.0.2.5:51002")])
    os.kill(os.getpid(), signal.SIGHUP)  # the next reload is not held up either
    result["second"] = wait_for(lambda: hexkey(c) not in (e := shown("vchung1")[0]) and e)
    with lock:
        result["hung_inflight"] = inflight.get(HUNG, 0)
    result["keys"] = [hexkey(k) for k in (a, b, c)]


run("vchung1", drive)
"""
)


def test_a_reload_with_a_hung_name_completes_and_applies_the_rest():
    res = run_child_in_namespace(RELOAD, "vpncrypt-hungreload", timeout=240)
    a, b, c = res["keys"]
    assert res["first"] == {a: "192.0.2.10:51001", b: "192.0.2.3:51002", c: "192.0.2.4:51003"}, res
    assert res["second"] == {a: "192.0.2.10:51001", b: "192.0.2.5:51002"}, res
    # the first reload's lookup still hangs (never a second one for the name)
    assert res["hung_inflight"] == 1 and res["released_at_end"], res
    assert res["calls"]["hung.vpncrypt.test"] == 2 and res["most"]["hung.vpncrypt.test"] == 1, res
    assert any("hung.vpncrypt.test" in line and "keeps 192.0.2.10:51001" in line for line in res["lines"]), (
        res
    )
    assert res["exit"] == 0, res
