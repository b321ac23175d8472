"""The installed vpncrypt commands the tests run: the `vpncrypt` and
`vpncrypt-go` scripts that pip put next to this interpreter (the venv's
bin/), never whatever a global PATH happens to hold."""
import os
import sys


def script(name: str) -> str:
    path = os.path.join(os.path.dirname(sys.executable), name)
    assert os.access(path, os.X_OK), (
        f"{name} is not installed next to {sys.executable} "
        "(tests/run.sh installs vpncrypt into its venv)")
    return path
