"""`vpncrypt proxy -c FILE`: a SOCKS5/HTTP proxy and TCP forwards over
WireGuard, for an ordinary user (no root, no capability, no TUN), reading
wireproxy's config.  The steps are vpncrypt.proxy.service's."""

from __future__ import annotations

import argparse
import logging
import os
import re

from ..daemon.logsetup import report_failure, setup_logging
from .up import add_logging_arguments

log = logging.getLogger("vpncrypt.proxy")

DESCRIPTION = """\
Runs in the foreground as the user who starts it.  The proxied connections
leave from the kernel's own TCP/IP stack in a user and network namespace the
proxy creates (no TUN and no capability needed; user namespaces are).

The config is wireproxy's: a wg-quick [Interface]/[Peer] config (or
WGConfig = PATH, relative to the config's directory) with [Socks5], [http],
[TCPClientTunnel] and [TCPServerTunnel] sections.  Names are resolved
through the tunnel with the [Interface] DNS servers.

The UAPI socket is $XDG_RUNTIME_DIR/vpncrypt/NAME.sock (else
/tmp/vpncrypt-UID/NAME.sock): `vpncrypt show --socket-dir DIR` reads it."""


def default_name(config: str) -> str:
    """The config file's name without its extension, if it is a valid
    interface name, else "proxy"."""
    stem = os.path.splitext(os.path.basename(config))[0]
    return stem if re.fullmatch(r"[A-Za-z0-9_=+.-]{1,15}", stem) and stem not in (".", "..") else "proxy"


def cmd_proxy(args: argparse.Namespace) -> int:
    from ..config.model import ConfigError
    from ..daemon.daemon import StartupError, describe, run_daemon
    from ..daemon.fdlimit import raise_open_files_limit
    from ..daemon.tun import validate_interface_name
    from ..proxy.namespace import NamespaceUnavailable, enter_namespace
    from ..proxy.service import STACK_NAME, Prepared, ProxyDaemon, link_plan, user_socket_dir
    from ..proxy.settings import load_settings

    setup_logging(args.log_level)
    try:
        name = validate_interface_name(args.name or default_name(args.config))
        raise_open_files_limit()  # a file descriptor per proxied connection, two with its peer
        settings = load_settings(args.config)
        socket_dir = args.socket_dir or user_socket_dir()
    except (ConfigError, StartupError, ValueError) as e:
        report_failure(str(e))
        return 1
    except OSError as e:
        report_failure(f"vpncrypt proxy: {describe(e)}")
        return 1
    try:
        prepared = Prepared(settings)
    except StartupError as e:
        report_failure(str(e))
        return 1
    except OSError as e:
        report_failure(f"vpncrypt proxy: cannot open the UDP socket: {describe(e)}")
        return 1
    daemon = ProxyDaemon(name, prepared, socket_dir=socket_dir)
    try:
        daemon.resolve_endpoints()
        daemon.link = enter_namespace(link_plan(settings.wg))
    except (ConfigError, NamespaceUnavailable) as e:
        prepared.close()
        report_failure(str(e))
        return 1
    log.info("stack: %s", STACK_NAME)
    return run_daemon(daemon)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "proxy",
        help="SOCKS5/HTTP proxy and TCP forwards over WireGuard, without root (wireproxy's config)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-c", "--config", required=True, help="the config file (wireproxy's format)")
    p.add_argument("--name", help="the device's name for the UAPI socket (default: the config file's name)")
    p.add_argument("--socket-dir", help="where the UAPI socket goes (default: the user's runtime directory)")
    add_logging_arguments(p)
    p.set_defaults(func=cmd_proxy)
