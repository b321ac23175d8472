"""Command lines that run this same vpncrypt in a child process.

`python -m vpncrypt` puts the working directory first on sys.path, so run
from a source checkout it imports the checkout's vpncrypt/ (which has no
compiled native core) instead of the installed package.  These commands run
the interpreter of this process with sys.path fixed: the directory this
vpncrypt was imported from first, the working directory never."""

from __future__ import annotations

import os
import sys

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_command(code: str) -> list[str]:
    """[python, -c, ...] running `code` after fixing sys.path."""
    prelude = (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        f"sys.path.insert(0, {_PACKAGE_PARENT!r}); "
    )
    return [sys.executable, "-c", prelude + code]


def vpncrypt_command(*args: str) -> list[str]:
    """The `vpncrypt ARGS...` command line: this interpreter running the
    `vpncrypt` script installed next to it (a venv's bin/, which is then the
    first entry of sys.path), else running vpncrypt.cli."""
    installed = os.path.join(os.path.dirname(sys.executable), "vpncrypt")
    if os.path.isfile(installed):
        return [sys.executable, installed, *args]
    return python_command(
        f"sys.argv[0] = 'vpncrypt'; from vpncrypt.cli import main; sys.exit(main({list(args)!r}))"
    )
