"""The installed vpncrypt commands the tests run: the `vpncrypt` and
`vpncrypt-go` scripts that pip put next to this interpreter (the venv's
bin/), never whatever a global PATH happens to hold."""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional


def script(name: str) -> str:
    path = os.path.join(os.path.dirname(sys.executable), name)
    assert os.access(path, os.X_OK), (
        f"{name} is not installed next to {sys.executable} (tests/run.sh installs vpncrypt into its venv)"
    )
    return path


def vpncrypt_command(env: Optional[Mapping[str, str]] = None) -> list[str]:
    """The command line to put before `up IFACE ...` for a daemon started
    with environment `env`: the installed `vpncrypt`, or where `env` asks for
    the tests' short timers (VPNCRYPT_TEST_TIMERS) the wrapper
    tests/daemon/shorttimers.py, which starts the same `up` with them (run
    from the repository's root)."""
    from tests.daemon.shorttimers import TEST_TIMERS_ENV, command

    if env and env.get(TEST_TIMERS_ENV, "").strip():
        return command()
    return [script("vpncrypt")]
