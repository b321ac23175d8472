"""The open-files limit the daemon runs under.

Go programs (wireguard-go among them) raise their soft RLIMIT_NOFILE to the
hard limit at startup; vpncrypt does the same, so that a low default soft
limit (1024, or whatever a shell left) does not cap the UAPI clients and
the subprocesses that the daemon needs.  Below a floor it refuses to start,
with one clear line, instead of failing later wherever a descriptor is
missing (the event loop, a `ip` subprocess, the TUN): the floor covers the
standard streams, the TUN and UDP sockets, the event loop's own descriptors,
a route command's pipes and the 32 UAPI clients served at a time.
"""

from __future__ import annotations

import resource

MIN_OPEN_FILES = 64


def raise_open_files_limit() -> int:
    """Raise the soft limit to the hard one; return the soft limit now in
    force.  ValueError if it is below MIN_OPEN_FILES."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass  # keep the soft limit we have
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        raise ValueError(
            f"the open files limit (ulimit -n) is {soft}; vpncrypt needs at least {MIN_OPEN_FILES}"
        )
    return soft
