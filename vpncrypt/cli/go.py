"""`vpncrypt-go IFACE [-f]`: wireguard-go's command line, for
WG_QUICK_USERSPACE_IMPLEMENTATION=vpncrypt-go wg-quick."""

from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence

from ..daemon.logsetup import setup_logging
from .up import build_daemon, hold_sighup

GO_DESCRIPTION = """\
Like wireguard-go: create interface IFACE and serve the WireGuard UAPI on
/var/run/wireguard/IFACE.sock, unconfigured (configure it with `wg setconf`).
Without -f it forks, and the parent exits 0 once the interface, socket and
UAPI are ready (exit 1 if the daemon failed to start).  Also honours
WG_PROCESS_FOREGROUND=1 and LOG_LEVEL=verbose|debug|info|error|silent (the
default, as wireguard-go's, is error; without LOG_LEVEL a forked daemon logs
nowhere once it is ready).  The data plane's settings come from the
environment, as for `vpncrypt up`: VPNCRYPT_THREADS, VPNCRYPT_QUEUES,
VPNCRYPT_TUN_OFFLOADS, VPNCRYPT_FAIR_QUEUE.  For
WG_QUICK_USERSPACE_IMPLEMENTATION=vpncrypt-go wg-quick up CONF.
"""

_GO_LEVELS = {"verbose": "debug", "debug": "debug", "info": "info", "error": "error", "silent": "critical"}


def go_main(argv: Optional[Sequence[str]] = None) -> int:
    """The `vpncrypt-go IFACE [-f]` entry point: SIGHUP held first thing, then
    the arguments; the exit status (the parent's, when it forks)."""
    hold_sighup()
    try:
        return _go(argv)
    except KeyboardInterrupt:
        return 130


def _go(argv: Optional[Sequence[str]]) -> int:
    p = argparse.ArgumentParser(
        prog="vpncrypt-go", description=GO_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("interface", metavar="IFACE", help="interface name")
    p.add_argument("-f", "--foreground", action="store_true", help="do not fork")
    p.add_argument("--version", action="version", version=f"vpncrypt-go {__import__('vpncrypt').__version__}")
    args = p.parse_args(argv)
    env_level = os.environ.get("LOG_LEVEL", "").lower()
    level = _GO_LEVELS.get(env_level, "error")  # wireguard-go's default
    foreground = args.foreground or os.environ.get("WG_PROCESS_FOREGROUND") == "1"
    if foreground:
        from ..daemon.daemon import run_daemon

        setup_logging(level)
        daemon = build_daemon(args.interface, None)
        return 1 if daemon is None else run_daemon(daemon)
    return _fork_daemon(args.interface, level, keep_output=bool(env_level))


def _fork_daemon(interface: str, level: str, keep_output: bool) -> int:
    """Fork; the parent waits for the child's "ready" byte on a pipe (exit 0)
    or its exit (its status, at least 1).  The child detaches (setsid, stdin
    from /dev/null; stdout and stderr too once ready unless `keep_output`)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        with os.fdopen(r, "rb") as f:
            got = f.read(1)
        if got == b"R":
            return 0
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return code if code > 0 else 1
    # the daemon
    os.close(r)
    code = 1
    try:
        from ..daemon.daemon import run_daemon

        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        setup_logging(level)

        def ready() -> None:
            os.write(w, b"R")
            os.close(w)
            if not keep_output:  # detach from the caller's terminal/pipes
                os.dup2(null, 1)
                os.dup2(null, 2)

        daemon = build_daemon(interface, None, on_ready=ready)
        if daemon is not None:
            code = run_daemon(daemon)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)
