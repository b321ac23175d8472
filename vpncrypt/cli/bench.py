"""`vpncrypt loopback-bench` and `vpncrypt bench ...`: each a module of
vpncrypt/bench/ with add_arguments(parser) and run(args) -> int, and whose
docstring is its --help.  These are the benches an operator runs; the lab
benches that only this project's tests and benchmarks need (a handshake
flood, a reconnect storm, UAPI and scrape load, ...) live outside the
installed package, in tests/benchlab/ (`python3 -m tests.benchlab.NAME` from
the repository's root)."""

from __future__ import annotations

import argparse
import importlib

# (name, module, --help line)
BENCHES = (
    (
        "crypto",
        "vpncrypt.bench.ciphers",
        "ChaCha20, AEAD seal and AEAD open throughput, every implementation side by side",
    ),
    (
        "tunnel",
        "vpncrypt.bench.tunnel",
        "iperf3 through vpncrypt and wireguard-go tunnels between network namespaces (root)",
    ),
)


def add_module_command(sub: argparse._SubParsersAction, name: str, module: str, help: str) -> None:
    """A subcommand whose arguments and run() come from `module`
    (add_arguments(parser), run(args) -> int) and whose --help is its docstring."""
    mod = importlib.import_module(module)
    p = sub.add_parser(
        name, help=help, description=mod.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mod.add_arguments(p)
    p.set_defaults(func=mod.run)


def register(sub: argparse._SubParsersAction) -> None:
    add_module_command(
        sub,
        "loopback-bench",
        "vpncrypt.bench.loopback",
        "two vpncrypt devices over 127.0.0.1: speed and correctness of the "
        "real data plane, against an unencrypted baseline",
    )
    bench = sub.add_parser(
        "bench",
        help="benchmarks (" + ", ".join(name for name, _, _ in BENCHES) + ")",
        description="Benchmarks: "
        + ", ".join(f"`vpncrypt bench {name} --help`" for name, _, _ in BENCHES)
        + ".",
    )
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bench_sub.required = True
    for name, module, help_line in BENCHES:
        add_module_command(bench_sub, name, module, help_line)
