"""The proxy's lab (tests/proxy/lab.py: a wireguard-go peer, 10.77.0.1 and
fd77::1, its HTTP server, DNS server for peer.test and UDP echo) with, in
place of `vpncrypt proxy`, a program using vpncrypt.userspace run as nobody
with no capability (program.py)."""

import json
import os
import subprocess
import sys

import pytest

from tests.proxy.lab import DROP, ProxyLab, open_ancestors

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "program.py")


class Program:
    """program.py KIND CONF ARGS as nobody in the lab's namespace h."""

    def __init__(self, lab: ProxyLab, kind: str, conf: str, *args: str) -> None:
        self.rundir = lab.nobody_dir(f"{os.path.basename(conf)}-run")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": self.rundir}
        self.popen = subprocess.Popen(
            ["ip", "netns", "exec", lab.world.n("h"), *DROP, sys.executable, PROGRAM, kind, conf, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lab.programs.append(self.popen)  # (killed at the lab's end if a test failed before its end)

    def line(self) -> dict:
        text = self.popen.stdout.readline()
        assert text, f"the program ended ({self.popen.wait(30)}): {self.popen.stderr.read()}"
        return json.loads(text)

    def tell(self, text: str) -> None:
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def finish(self) -> str:
        _out, err = self.popen.communicate(timeout=60)
        assert self.popen.returncode == 0, err
        return err


@pytest.fixture(scope="session")
def lab():
    # the program starts the tunnel's process with its own interpreter: nobody
    # must reach that too where it lies under a directory others cannot enter
    # (a pyenv build under /root, 0700), o+x while the lab stands, as the lab
    # does for the checkout
    opened = open_ancestors(os.path.realpath(sys.executable))
    try:
        lab = ProxyLab()
        lab.programs = []
        try:
            yield lab
        finally:
            for p in lab.programs:  # a program a failed test left running (its tunnel ends with it)
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
            lab.close()
    finally:
        for d, mode in reversed(opened):
            os.chmod(d, mode)


@pytest.fixture(scope="session")
def conf(lab):
    """The program's config: 10.77.0.2 and fd77::2 in the tunnel."""
    key = lab.add_peer("10.77.0.2", "fd77::2")
    return lab.write_config("prog", lab.config(key, "10.77.0.2", ""))


@pytest.fixture(scope="session")
def server_conf(lab):
    """A server's config: 10.77.0.3 and fd77::3, with PersistentKeepalive (a
    server that only answers must tell the peer where it is: WireGuard sends
    the first keepalive when the peer is configured)."""
    key = lab.add_peer("10.77.0.3", "fd77::3")
    text = lab.config(key, "10.77.0.3", "", v6="fd77::3")
    return lab.write_config("server", text.replace("AllowedIPs =", "PersistentKeepalive = 25\nAllowedIPs ="))
