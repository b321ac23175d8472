"""What the benches show: a printed table's head and cells, the wireguard-go
builds they ran, and matplotlib for --plot (loaded only when a plot is asked
for)."""

from __future__ import annotations

import sys
from typing import Any


def load_pyplot(prog: str) -> Any | None:
    """matplotlib.pyplot on the Agg backend (no display needed), or None after
    saying on stderr that --plot needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"{prog}: --plot needs matplotlib, which is not installed (pip install "
            f"matplotlib, or pip install 'vpncrypt[bench]')",
            file=sys.stderr,
        )
        return None
    return plt


def print_head(head: str) -> None:
    """A printed table's column heads and the rule under them."""
    print(head)
    print("-" * len(head))


def cell(v: Any, fmt: str, none: str = "-") -> str:
    """v formatted with fmt, or none for a figure that was not taken (None)."""
    return none if v is None else format(v, fmt)


def print_builds(result: dict) -> None:
    """One line for each wireguard-go build of the run (result["versions"])."""
    for b in result["versions"]["wireguard-go-builds"]:
        print(f"  wireguard-go {b['version'].split()[-1]}: {b['path']}")
