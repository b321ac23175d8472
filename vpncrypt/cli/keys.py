"""`vpncrypt genkey`, `pubkey` and `genpsk`: keys in base64, as `wg` prints them."""

from __future__ import annotations

import argparse
import os
import stat
import sys


def _warn_if_others_can_read(command: str) -> None:
    """As `wg genkey` and `wg genpsk` do: a secret about to go into a
    regular file that others can read (the shell made it before we ran,
    under its umask) gets a warning on stderr; the key is still printed."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return
    if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IRWXO:
        print(
            f"vpncrypt {command}: warning: the file the key goes to can be read by others; "
            "run `umask 077` first, then again",
            file=sys.stderr,
        )


def cmd_genkey(args: argparse.Namespace) -> int:
    from ..protocol import keys

    _warn_if_others_can_read("genkey")
    print(keys.genkey())
    return 0


def cmd_genpsk(args: argparse.Namespace) -> int:
    from ..protocol import keys

    _warn_if_others_can_read("genpsk")
    print(keys.genpsk())
    return 0


def cmd_pubkey(args: argparse.Namespace) -> int:
    from ..config.keytypes import KeyFormatError, PrivateKey
    from ..protocol import keys

    data = sys.stdin.read(1024)
    try:
        private = PrivateKey.from_base64(data)  # canonical base64 only, as `wg pubkey`
    except KeyFormatError as e:
        print(f"vpncrypt pubkey: {e}", file=sys.stderr)
        return 1
    print(keys.pubkey(private.to_base64()))
    return 0


# (name, --help line, description, command)
COMMANDS = (
    (
        "genkey",
        "print a new private key (base64), like `wg genkey`",
        "Print a new random private key in base64, like `wg genkey`.",
        cmd_genkey,
    ),
    (
        "pubkey",
        "read a private key on stdin, print its public key",
        "Read a base64 private key on standard input and print its public key, like `wg pubkey`.",
        cmd_pubkey,
    ),
    (
        "genpsk",
        "print a new preshared key, like `wg genpsk`",
        "Print a new random preshared key in base64, like `wg genpsk`.",
        cmd_genpsk,
    ),
)


def register(sub: argparse._SubParsersAction) -> None:
    for name, help_line, description, func in COMMANDS:
        sub.add_parser(name, help=help_line, description=description).set_defaults(func=func)
