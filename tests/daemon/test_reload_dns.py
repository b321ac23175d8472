"""F3: a SIGHUP reload resolves the Endpoint host names off the event loop,
and each name once (the address found is what is applied).  The daemon runs
in-process, in a network namespace made for the test, with a resolver that
blocks until the test lets it answer: while it blocks, the UAPI answers and
the loop's timers run; two SIGHUPs meanwhile give reloads one after the
other, never two resolutions at a time."""

from tests.daemon.inprocess import run_child_in_namespace

CHILD = r"""
import asyncio, json, os, signal, socket, sys, tempfile, threading
from vpncrypt.daemon.daemon import Daemon, run_daemon
from vpncrypt.daemon import uapiclient
from vpncrypt.protocol import keys

NAMES = ("one.vpncrypt.test", "two.vpncrypt.test")
calls, active, most = [], [0], [0]
lock = threading.Lock()
entered = threading.Event()
release = threading.Event()
release.set()                        # start-up resolves at once
real = socket.getaddrinfo


def slow(host, port, *a, **kw):
    if host not in NAMES:
        return real(host, port, *a, **kw)
    with lock:
        calls.append(host)
        active[0] += 1
        most[0] = max(most[0], active[0])
    entered.set()
    release.wait(120)
    with lock:
        active[0] -= 1
    addr = "192.0.2.%d" % (NAMES.index(host) + 1)
    return [(socket.AF_INET, socket.SOCK_DGRAM, 17, "", (addr, port))]


socket.getaddrinfo = slow
tmp = tempfile.mkdtemp()
conf = os.path.join(tmp, "t.conf")
peers = [keys.pubkey(keys.genkey()) for _ in range(3)]
with open(conf, "w") as f:
    f.write("[Interface]\nPrivateKey = %s\n" % keys.genkey())
    for i, (pk, ep) in enumerate(zip(peers, ("one.vpncrypt.test:51001",
                                              "two.vpncrypt.test:51002",
                                              "one.vpncrypt.test:51003"))):
        f.write("\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.9.%d.0/24\nEndpoint = %s\n"
                % (pk, i, ep))
os.chmod(conf, 0o600)
result = {}


def endpoints(sock, timeout=30):
    out, pk = {}, None
    for line in uapiclient.request(sock, "get=1", timeout=timeout).splitlines():
        k, _, v = line.partition("=")
        if k == "public_key":
            pk = v
        elif k == "endpoint":
            out[pk] = v
    return out


def drive(d):
    try:
        measure(d)
    finally:
        release.set()
        d.loop.call_soon_threadsafe(d.stop, 0)


def measure(d):
    sock = os.path.join(tmp, "vcdns0.sock")
    result["startup_calls"] = sorted(calls)
    del calls[:]
    release.clear()
    entered.clear()
    os.kill(os.getpid(), signal.SIGHUP)
    result["resolving"] = entered.wait(30)
    os.kill(os.getpid(), signal.SIGHUP)    # a second one while the first resolves
    try:                                   # the UAPI answers meanwhile
        result["uapi_during"] = len(endpoints(sock)) == 3
    except OSError as e:
        result["uapi_during"] = "no answer: %s" % e
    timer = threading.Event()
    d.loop.call_soon_threadsafe(lambda: d.loop.call_later(0.01, timer.set))
    result["timer_during"] = timer.wait(30)
    result["calls_while_blocked"] = sorted(calls)
    release.set()
    # both reloads resolve (the second after the first), then apply
    for _ in range(600):
        if len(calls) >= 4:
            break
        threading.Event().wait(0.05)
    result["reload_calls"] = sorted(calls)
    result["most_at_once"] = most[0]
    for _ in range(600):
        result["endpoints"] = sorted(endpoints(sock).values())
        if "192.0.2.1:51003" in result["endpoints"]:
            break
        threading.Event().wait(0.05)


d = Daemon("vcdns0", conf, socket_dir=tmp,
           on_ready=lambda: threading.Thread(target=drive, args=(d,), daemon=True).start())
result["exit"] = run_daemon(d)
print(json.dumps(result))
"""


def test_reload_resolves_off_the_loop_and_once(tmp_path):
    res = run_child_in_namespace(CHILD, "vpncrypt-dns", timeout=240)
    # start-up: one lookup per name (not one for the check and one to apply)
    assert res["startup_calls"] == ["one.vpncrypt.test", "two.vpncrypt.test"], res
    assert res["resolving"], res
    assert res["uapi_during"] is True, res
    assert res["timer_during"] is True, res
    # the first reload's first lookup is blocked; nothing else runs meanwhile
    assert res["calls_while_blocked"] == ["one.vpncrypt.test"], res
    assert res["most_at_once"] == 1, res
    # two reloads, each one lookup per name
    assert res["reload_calls"] == ["one.vpncrypt.test"] * 2 + ["two.vpncrypt.test"] * 2, res
    assert res["endpoints"] == ["192.0.2.1:51001", "192.0.2.1:51003", "192.0.2.2:51002"], res
    assert res["exit"] == 0, res
