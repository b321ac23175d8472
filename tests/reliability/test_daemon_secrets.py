"""Secrets in the running daemon (tests/daemon covers the pieces in-process:
redaction of log lines, the UAPI server's mode and SO_PEERCRED check; this
is the whole `vpncrypt up` at --log-level debug):

* through a handshake, data, rekeys (test timers), UAPI sets carrying keys,
  malformed UAPI requests carrying keys, SIGHUP (a good and a broken config,
  the broken one with a key in its bad line): no private or preshared key,
  in base64 or hex, appears in either daemon's log;
* `vpncrypt show` prints neither (only `wg showconf` does, as with `wg`);
* the running daemon's UAPI socket is 0600, in a directory owned by root
  that group and others cannot write (0700 when the daemon made it;
  wireguard-go makes it 0755, and a machine where it ran keeps that), and a
  process running as uid 65534 is refused: at the file permissions, and by
  SO_PEERCRED when it can reach the socket (through a hard link to it, made
  reachable for the test).
"""

import base64
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from tests.installed import script
from tests.interop.lab import pair
from vpncrypt.protocol import keys

TIMERS = "rekey_after_time=2,rekey_timeout=1"


def _forms(b64):
    raw = keys.decode(b64)
    return {b64, raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode().rstrip("=")}


def _as_nobody(script):
    """Run `script` as uid/gid 65534 (it drops root itself, first thing: this
    interpreter lives where uid 65534 may not exec it)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, socket\nos.setgroups([])\nos.setgid(65534)\nos.setuid(65534)\n" + script,
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )


def test_no_key_in_logs_or_show_and_uapi_refuses_others(lab, tmp_path):
    env = {"VPNCRYPT_TEST_TIMERS": TIMERS}
    a, b = pair(lab, "vpncrypt", "vpncrypt", initiator="A", psk=True, env_a=env, env_b=env)
    secrets = [a.private, b.private, a.peer_conf["psk"]]
    a.ping(b)
    b.ping(a)
    time.sleep(2.5)  # a rekey
    a.ping(b)
    assert a.counters()["handshakes_completed"] >= 2
    # UAPI sets with keys: the same private key, a new preshared key on both ends
    psk2 = keys.genpsk()
    secrets.append(psk2)
    for node, other in ((a, b), (b, a)):
        kf = os.path.join(lab.tmp, f"{node.iface}.key")
        pf = os.path.join(lab.tmp, f"{node.iface}.psk")
        for path, value in ((kf, node.private), (pf, psk2)):
            with open(path, "w") as f:
                f.write(value + "\n")
            os.chmod(path, 0o600)
        node.wg("set", node.iface, "private-key", kf, "peer", other.public, "preshared-key", pf)
    # a third peer with its own preshared key, added and removed over the UAPI
    psk3 = keys.genpsk()
    secrets.append(psk3)
    third = keys.pubkey(keys.genkey())

    def hx(k):
        return keys.decode(k).hex()

    assert (
        a.uapi(f"set=1\npublic_key={hx(third)}\npreshared_key={hx(psk3)}\nallowed_ip=10.77.0.0/16\n\n")
        == "errno=0\n\n"
    )
    assert a.uapi(f"set=1\npublic_key={hx(third)}\nremove=true\n\n") == "errno=0\n\n"
    # malformed requests that carry keys: refused and logged
    for bad in (
        f"set=1\nprivate_key={hx(a.private)}\nbogus=1\n\n",
        f"set=1\n{hx(a.private)}={hx(psk2)}\n\n",
        f"set=1\npublic_key={hx(b.public)}\npreshared_key={hx(psk2)[:-1]}\n\n",
        f"set=1\nprivate_key={hx(a.private)}x\n\n",
    ):
        assert a.uapi(bad) == "errno=-22\n\n", bad
    a.ping(b)
    # SIGHUP: a new peer with a preshared key in the file, then a broken file with a key in its bad line
    psk4 = keys.genpsk()
    secrets.append(psk4)
    fourth = keys.pubkey(keys.genkey())
    good = a.conf([dict(a.peer_conf, psk=psk2), {"public": fourth, "psk": psk4, "allowed": "10.78.0.0/16"}])
    a.write_conf(good)
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    a.write_conf(good.replace("[Peer]", f"Bogus = {a.private}\n[Peer]", 1))
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    a.ping(b)
    # show hides them; showconf (like `wg showconf`) is the one place they appear
    show = a.run(script("vpncrypt"), "show", a.iface).stdout
    assert "private key: (hidden)" in show and "preshared key: (hidden)" in show, show
    showconf = a.wg("showconf", a.iface).stdout
    assert a.private in showconf and psk2 in showconf
    wg_show = a.wg("show", a.iface).stdout
    logs = a.proc.log() + b.proc.log()
    assert "reload failed" in a.proc.log() and "UAPI request refused" in a.proc.log()
    assert "handshake" in logs.lower() or "peer" in logs
    for text, what in ((logs, "logs"), (show, "vpncrypt show"), (wg_show, "wg show")):
        for s in secrets:
            for form in _forms(s):
                assert form not in text, (what, "key material found")

    # the UAPI socket: 0600, owned by root, in a root-owned directory nobody
    # else can write to (what the daemon guarantees, not who made the folder:
    # wireguard-go makes it 0755)
    st, dst = os.stat(a.sock), os.stat(os.path.dirname(a.sock))
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
    assert dst.st_uid == 0 and stat.S_IMODE(dst.st_mode) & 0o022 == 0, oct(dst.st_mode)
    probe = (
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect({path!r})\nexcept PermissionError:\n    print('EACCES'); raise SystemExit\n"
        "buf = b''  # the refusal comes before any request\nwhile True:\n    c = s.recv(4096)\n"
        "    if not c: break\n    buf += c\nprint(buf.decode().strip())\n"
    )
    r = _as_nobody(probe.format(path=a.sock))
    assert r.stdout.strip() == "EACCES", (r.stdout, r.stderr)
    # past the file permissions (a hard link in a reachable directory, the
    # socket opened up for a moment): SO_PEERCRED refuses uid 65534
    tmpdir = tempfile.mkdtemp(prefix="vpncrypt-peercred-", dir=os.path.dirname(os.path.dirname(a.sock)))
    try:
        os.chmod(tmpdir, 0o755)
        link = os.path.join(tmpdir, "s.sock")
        os.link(a.sock, link)
        os.chmod(link, 0o666)
        r = _as_nobody(probe.format(path=link))
        os.chmod(link, 0o600)
        assert r.stdout.strip() == "errno=-1", (r.stdout, r.stderr)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert stat.S_IMODE(os.stat(a.sock).st_mode) == 0o600
    assert "refused a connection from uid 65534" in a.proc.log()
    assert a.uapi("get=1\n\n").endswith("errno=0\n\n")  # root is still served
    assert not any(form in a.proc.log() for s in secrets for form in _forms(s))
