"""`vpncrypt up` with short protocol timers, for the tests (the product has
no such hook): VPNCRYPT_TEST_TIMERS="rekey_after_time=3,rekey_timeout=1" in
this wrapper's environment replaces fields of
vpncrypt.protocol.timers.ProtocolConfig, so that tests see rekeys within
seconds, and the wrapper starts the product's `up` command with that config.

    python -m tests.daemon.shorttimers up IFACE [vpncrypt up's arguments]

(from the repository's root; tests.installed.vpncrypt_command(env) picks this
wrapper when `env` names short timers)."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Mapping, Optional, Sequence

from vpncrypt.protocol.timers import ProtocolConfig

TEST_TIMERS_ENV = "VPNCRYPT_TEST_TIMERS"


def protocol_config_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[ProtocolConfig]:
    """ProtocolConfig from $VPNCRYPT_TEST_TIMERS ("name=value,..."), or None.
    Raises ValueError naming the variable and the bad entry."""
    env = os.environ if env is None else env
    spec = env.get(TEST_TIMERS_ENV, "").strip()
    if not spec:
        return None
    fields = {f.name: f for f in dataclasses.fields(ProtocolConfig)}
    values: dict[str, Any] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ValueError(
                f"{TEST_TIMERS_ENV}: unknown timer {name!r} (known: {', '.join(sorted(fields))})"
            )
        try:
            values[name] = int(value) if fields[name].type in (int, "int") else float(value)
        except ValueError:
            raise ValueError(f"{TEST_TIMERS_ENV}: {name}: not a number: {value!r}") from None
    return ProtocolConfig(**values)


def command() -> list[str]:
    """This wrapper's command line (run it with the repository's root as the
    working directory, as the tests' namespace lab does)."""
    return [sys.executable, "-m", "tests.daemon.shorttimers"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`vpncrypt up ...` as the installed command runs it, with the
    ProtocolConfig of $VPNCRYPT_TEST_TIMERS; any other command is refused."""
    from vpncrypt.cli import build_parser, hold_sighup
    from vpncrypt.cli.up import cmd_up

    hold_sighup()  # as `vpncrypt up` does, first thing
    try:
        config = protocol_config_from_env()
    except ValueError as e:
        print(f"tests.daemon.shorttimers: {e}", file=sys.stderr)
        return 1
    args = build_parser().parse_args(argv)
    if args.command != "up":
        print(f"tests.daemon.shorttimers: only `up`, not {args.command!r}", file=sys.stderr)
        return 2
    try:
        return cmd_up(args, protocol_config=config)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
