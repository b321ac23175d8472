"""What the bench tests need of the machine: root (they make network
namespaces) and the tools the bench runs.  A missing one fails the test with
its name; tests never skip."""

import os
import shutil
from collections.abc import Iterable


def root_and_tools(bench: str, tools: Iterable[str]) -> None:
    assert os.geteuid() == 0, f"the {bench} bench tests run as root"
    for tool in tools:
        assert shutil.which(tool), f"required tool {tool!r} is not installed (tests never skip)"
