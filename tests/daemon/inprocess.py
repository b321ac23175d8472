"""Run a daemon in-process in a child Python, in a network namespace made
for it: the child's code drives a vpncrypt.daemon.Daemon and prints one JSON
line of results last."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_child_in_namespace(code: str, prefix: str, timeout: int = 300) -> dict:
    """`code` run by this Python in a fresh namespace (removed after); its
    last line of output, parsed as JSON."""
    assert os.geteuid() == 0, "the daemon tests need root (tests/run.sh runs them as root)"
    assert shutil.which("ip"), "iproute2 is not installed (tests/run.sh installs it)"
    ns = f"{prefix}-{secrets.token_hex(4)}"
    r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])
