"""TUN batch I/O inside a throwaway network namespace (root only)."""

import os
import shutil
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(autouse=True)
def _needs_root_and_tun():
    """Tests never skip: without root, iproute2 or /dev/net/tun this fails."""
    assert os.geteuid() == 0, "the TUN tests need root (tests/run.sh runs them as root in CI)"
    assert shutil.which("ip"), "iproute2 is not installed"
    assert os.path.exists("/dev/net/tun"), "no /dev/net/tun on this machine"


@pytest.mark.parametrize("mtu", [1500, 1420, 9000])
def test_tun_write_and_read_in_netns(mtu):
    ns = "vcio-" + uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
            check=False,
            capture_output=True,
        )
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, os.path.join(HERE, "tun_child.py"), str(mtu)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)
