"""The `vpncrypt` and `vpncrypt-go` command lines (the entry points
vpncrypt.cli:main and vpncrypt.cli:go_main): every command once, each in a
module of this package, on top of the daemon."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import bench, keys, proxy, show, up
from .go import go_main
from .up import hold_sighup

__all__ = ["build_parser", "go_main", "hold_sighup", "main"]


def _command(argv: Optional[Sequence[str]]) -> Optional[str]:
    """The command named: the first argument that is not an option (the
    top level takes no option with a value)."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (the command line if None).  The benches'
    commands import their modules (0.3 s: the bench modules and what they
    import), so they are registered only when the command is not one of the
    others: `vpncrypt show` at 100,000 peers is compared with `wg show`."""
    parser = argparse.ArgumentParser(
        prog="vpncrypt",
        description="A WireGuard-compatible userspace VPN daemon with a native ChaCha20-Poly1305 core.",
    )
    parser.add_argument(
        "--version", action="version", version=f"vpncrypt {__import__('vpncrypt').__version__}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    up.register(sub)
    keys.register(sub)
    show.register(sub)
    proxy.register(sub)
    if _command(argv) not in sub.choices:  # a bench, a typo (listed with the benches) or --help
        bench.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The `vpncrypt COMMAND ...` entry point: the command's exit status."""
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["up"]:
        hold_sighup()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
