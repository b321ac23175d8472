"""The lab benches: what only this project's own tests and benchmarks need,
kept out of the installed package (pyproject.toml installs vpncrypt* alone).
They need root, network namespaces, iperf3 and wireguard-go, and run from the
repository's root as `python3 -m tests.benchlab.NAME --help`:

    handshake_flood   an established session under a handshake flood, vpncrypt against wireguard-go
    reconnect_storm   a reconnect storm of N peers' handshakes, vpncrypt against wireguard-go
    handshakeload     the handshake generator both of those use (no command)
    uapi_load         big UAPI requests against a probe stream, `wg show dump` at 50,000 peers
    scrape_load       Prometheus scrapes at 10,000 peers against a probe stream
    rounds            the C cost of one data-plane round (no root)
    iobench           the batch UDP paths (no root)

The operator's benches stay `vpncrypt` commands (vpncrypt/bench/):
`vpncrypt loopback-bench`, `vpncrypt bench crypto`, `vpncrypt bench tunnel`."""

from __future__ import annotations

import argparse
import os
from typing import Callable, Optional, Sequence

from vpncrypt.selfcmd import python_command

# The repository's root: where `tests` is imported from, whatever the working
# directory of a child the lab starts in a namespace.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lab_python(code: str) -> list[str]:
    """[python, -c, ...] running `code` with this vpncrypt (python_command)
    and this repository's tests/ importable."""
    return python_command(f"sys.path.insert(1, {REPO!r}); {code}")


def lab_module(module: str, *args: str) -> list[str]:
    """The command line of `python3 -m MODULE ARGS...` for a module of this
    tree, run from any working directory."""
    return lab_python(
        f"import runpy; sys.argv[1:] = {list(args)!r}; runpy.run_module({module!r}, run_name='__main__')"
    )


def bench_main(
    module: str,
    doc: Optional[str],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Optional[Sequence[str]] = None,
) -> int:
    """`python3 -m MODULE ARGS...` of a bench with add_arguments(parser) and
    run(args) -> int (as `vpncrypt bench NAME` is for the operator's), its
    docstring its --help."""
    p = argparse.ArgumentParser(
        prog=f"python3 -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    return run(p.parse_args(argv))
