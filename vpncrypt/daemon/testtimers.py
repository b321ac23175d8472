"""Test-only protocol timers: VPNCRYPT_TEST_TIMERS="rekey_after_time=3,rekey_timeout=1"
replaces fields of vpncrypt.protocol.timers.TimerConfig, so that tests see
rekeys within seconds.  Never use it in production: it weakens nothing
cryptographically, but breaks interop expectations about timing."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ..protocol.timers import TimerConfig

TEST_TIMERS_ENV = "VPNCRYPT_TEST_TIMERS"


def timer_config_from_env(env=None) -> Optional[TimerConfig]:
    """TimerConfig from $VPNCRYPT_TEST_TIMERS ("name=value,..."), or None.
    Raises ValueError naming the variable and the bad entry."""
    env = os.environ if env is None else env
    spec = env.get(TEST_TIMERS_ENV, "").strip()
    if not spec:
        return None
    fields = {f.name: f for f in dataclasses.fields(TimerConfig)}
    values = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ValueError(f"{TEST_TIMERS_ENV}: unknown timer {name!r} "
                             f"(known: {', '.join(sorted(fields))})")
        try:
            values[name] = int(value) if fields[name].type in (int, "int") else float(value)
        except ValueError:
            raise ValueError(f"{TEST_TIMERS_ENV}: {name}: not a number: {value!r}") from None
    return TimerConfig(**values)
