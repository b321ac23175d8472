"""Routing table names as iproute2 knows them, so that a config file's
``Table = NAME`` is checked when the file is read rather than when `ip`
fails after the interface is up.

iproute2 reads ``rt_tables`` and every ``rt_tables.d/*.conf`` under its
configuration directories (/etc/iproute2 first, then the distribution's
defaults); lines are ``NUMBER NAME``, ``#`` starts a comment. A few names are
built into `ip` itself and work with no file at all.
"""

from __future__ import annotations

import glob
import os
from typing import Iterable

# base files; each one's ".d" directory is read too
RT_TABLES_FILES = ("/etc/iproute2/rt_tables", "/usr/share/iproute2/rt_tables", "/usr/lib/iproute2/rt_tables")
BUILTIN_NAMES = frozenset({"unspec", "default", "main", "local"})


def _names_in(path: str) -> set:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return set()
    names = set()
    for line in text.split("\n"):
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            names.add(fields[1])
    return names


def table_names(files: Iterable[str] | None = None) -> frozenset:
    """Every table name defined in the iproute2 files (``files``: the base
    rt_tables paths to read, default RT_TABLES_FILES), plus `ip`'s built-in ones."""
    names = set(BUILTIN_NAMES)
    for base in RT_TABLES_FILES if files is None else files:
        names |= _names_in(base)
        for extra in sorted(glob.glob(os.path.join(glob.escape(base + ".d"), "*.conf"))):
            names |= _names_in(extra)
    return frozenset(names)
