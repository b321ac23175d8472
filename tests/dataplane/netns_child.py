"""Running a child script in a throwaway network namespace, for the TUN tests
that need root (test_tun_offload_netns.py, test_tun_gro_rules_netns.py)."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(autouse=True)
def needs_root_and_tun():
    """Tests never skip: without root, iproute2 or /dev/net/tun this fails.
    (Imported into a test module, it applies to every test there.)"""
    assert os.geteuid() == 0, "the TUN tests need root (tests/run.sh runs them as root in CI)"
    assert shutil.which("ip"), "iproute2 is not installed"
    assert os.path.exists("/dev/net/tun"), "no /dev/net/tun on this machine"


def run_child(prefix, script, *args, timeout=180):
    """Run tests/dataplane/SCRIPT ARGS in a new namespace named PREFIX-<random>
    (deleted after, whatever happens); return the JSON of its last line."""
    ns = prefix + "-" + uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, os.path.join(HERE, script), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)
