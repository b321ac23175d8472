"""`vpncrypt up IFACE`: the daemon in the foreground, its settings from the
command line, else the environment (vpncrypt-go, the systemd unit), else the
defaults; also the start shared with `vpncrypt-go`."""

from __future__ import annotations

import argparse
import os
import signal
from typing import TYPE_CHECKING, Callable, Optional

from ..daemon.logsetup import LEVELS, report_failure, setup_logging

if TYPE_CHECKING:  # the daemon and the data plane load when a daemon starts, not for --help
    from ..daemon.daemon import Daemon
    from ..daemon.metrics import MetricsSettings
    from ..protocol.timers import ProtocolConfig

UP_DESCRIPTION = """\
Run the vpncrypt daemon for interface IFACE in the foreground: create the TUN
device, apply the config file (the `wg setconf` format plus wg-quick's Address
and MTU), open the UDP socket and serve the WireGuard UAPI on
/var/run/wireguard/IFACE.sock, so `wg show`, `wg set` and `wg syncconf` work.
Without -c the interface starts unconfigured and waits for `wg setconf`.
SIGHUP re-reads the config file and applies only the differences; SIGTERM or
SIGINT removes the socket and the interface.
"""


def is_decimal(text: str) -> bool:
    """ASCII decimal digits only (int() and str.isdigit() also take other
    scripts' digits, underscores and spaces: "٣", "1_0", " 4")."""
    return text.isascii() and text.isdigit()


def decimal(text: str) -> int:
    """argparse type of a count: ASCII decimal digits."""
    if not is_decimal(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a decimal number")
    return int(text)


def hold_sighup() -> None:
    """A daemon's SIGHUP before its own handler is in place (it installs it,
    then reads the config) must not kill it, SIGHUP's default action: ignored
    until then, from the first thing the command does."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--log-level`` (default: $VPNCRYPT_LOG_LEVEL or info)."""
    default = os.environ.get("VPNCRYPT_LOG_LEVEL", "info").lower()
    if default not in LEVELS:
        default = "info"
    parser.add_argument(
        "--log-level", choices=list(LEVELS), default=default, help="log verbosity (default: %(default)s)"
    )


def add_metrics_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics",
        metavar="ADDR:PORT|unix:PATH",
        default=None,
        help="serve Prometheus/OpenMetrics on http://ADDR:PORT/metrics, or on a UNIX socket at "
        "PATH (default $VPNCRYPT_METRICS, else off); a loopback address unless "
        "--metrics-allow-remote.  Any local user can read a loopback port: a UNIX socket "
        "(see --metrics-socket-mode/-group) or --metrics-web-config restricts who may",
    )
    p.add_argument(
        "--metrics-allow-remote",
        action="store_true",
        default=None,
        help="allow a --metrics address other than loopback (the metrics name "
        "every peer's public key); also VPNCRYPT_METRICS_ALLOW_REMOTE=1",
    )
    p.add_argument(
        "--metrics-socket-mode",
        metavar="MODE",
        default=None,
        help="permissions of the unix:PATH socket, in octal (default "
        "$VPNCRYPT_METRICS_SOCKET_MODE, else 0660 with --metrics-socket-group, else 0600)",
    )
    p.add_argument(
        "--metrics-socket-group",
        metavar="GROUP",
        default=None,
        help="group (name or number) of the unix:PATH socket, e.g. prometheus (default "
        "$VPNCRYPT_METRICS_SOCKET_GROUP, else the daemon's)",
    )
    p.add_argument(
        "--metrics-web-config",
        metavar="FILE",
        default=None,
        help="TLS and basic authentication for the metrics, from a Prometheus exporter web "
        "config file (tls_server_config, basic_auth_users with bcrypt hashes, "
        "http_server_config.headers); default $VPNCRYPT_METRICS_WEB_CONFIG, else none",
    )
    p.add_argument(
        "--metrics-endpoints",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve each peer's endpoint (IP address and port) in vpncrypt_peer_info's "
        "endpoint label (default $VPNCRYPT_METRICS_ENDPOINTS, else off: the label is empty)",
    )


def add_up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("interface", metavar="IFACE", help="interface name (e.g. wg0)")
    p.add_argument(
        "-c", "--config", metavar="FILE", help="config file (default: none; configure through the UAPI)"
    )
    p.add_argument(
        "-f",
        "--foreground",
        action="store_true",
        default=True,
        help="stay in the foreground (the default; accepted for symmetry)",
    )
    p.add_argument(
        "--threads",
        type=decimal,
        default=None,
        metavar="N",
        help="data-plane threads: 1 (everything on the event loop) or 2 (receiving "
        "and sending on a thread each); default $VPNCRYPT_THREADS, else "
        f"{default_threads()} on this machine",
    )
    p.add_argument(
        "--queues",
        type=decimal,
        default=None,
        metavar="N",
        help=f"data-plane queues, {MIN_QUEUES}-{MAX_QUEUES}: a TUN queue (IFF_MULTI_QUEUE) and a UDP "
        "socket (one SO_REUSEPORT group) each, the kernel keeping each flow on one (with "
        "--threads 2, two threads per queue); "
        f"default $VPNCRYPT_QUEUES, else {default_queues()} on this machine",
    )
    p.add_argument(
        "--tun-offloads",
        choices=["on", "off"],
        default=None,
        help="TSO/USO and GRO on the TUN device (default $VPNCRYPT_TUN_OFFLOADS, else on)",
    )
    p.add_argument(
        "--fair-queue",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a fair queue with CoDel (RFC 8290) in front of each send round and CoDel (RFC 8289) "
        "on each UDP socket's sojourn time: lower latency for sparse flows beside bulk ones, "
        "at some throughput; drops counted as drop_aqm, drop_fq_*. Default $VPNCRYPT_FAIR_QUEUE "
        "(1/0, yes/no, true/false, on/off), else off",
    )
    add_metrics_arguments(p)
    add_logging_arguments(p)


def metrics_settings(
    address: Optional[str] = None,
    allow_remote: Optional[bool] = None,
    socket_mode: Optional[str] = None,
    socket_group: Optional[str] = None,
    web_config: Optional[str] = None,
    endpoints: Optional[bool] = None,
) -> Optional[MetricsSettings]:
    """The --metrics* options, else the environment: where and how the
    metrics are served, or None (off).  ValueError with one line for the
    user (the web config file is read and checked here, before the start)."""
    from ..daemon.metrics import MetricsSettings, parse_address
    from ..daemon.webconfig import load_web_config

    address = address if address is not None else _env("VPNCRYPT_METRICS")
    if allow_remote is None:
        allow_remote = env_switch("VPNCRYPT_METRICS_ALLOW_REMOTE")
    mode_text = socket_mode if socket_mode is not None else _env("VPNCRYPT_METRICS_SOCKET_MODE")
    group = socket_group if socket_group is not None else _env("VPNCRYPT_METRICS_SOCKET_GROUP")
    web_path = web_config if web_config is not None else _env("VPNCRYPT_METRICS_WEB_CONFIG")
    if endpoints is None:
        endpoints = env_switch("VPNCRYPT_METRICS_ENDPOINTS")
    if address is None or address.lower() == "off":
        return None
    host, port = parse_address(address, allow_remote)
    unix = port if host == "unix" else None
    if unix is None and (mode_text or group):
        raise ValueError(f"--metrics {address}: --metrics-socket-mode and -group are for a unix:PATH socket")
    gid = _group_id(group) if group else None
    mode = _socket_mode(mode_text) if mode_text else (0o660 if gid is not None else 0o600)
    web = load_web_config(web_path) if web_path else None
    if unix is not None:
        return MetricsSettings(unix_path=unix, socket_mode=mode, socket_gid=gid, web=web, endpoints=endpoints)
    return MetricsSettings(host=host, port=port, web=web, endpoints=endpoints)


def _env(name: str) -> Optional[str]:
    """An environment variable's value, None if unset or blank."""
    return os.environ.get(name, "").strip() or None


def _socket_mode(text: str) -> int:
    """Octal permission bits (0660, 660, 0o660), nothing beyond 0777."""
    digits = text[2:] if text.lower().startswith("0o") else text
    if not (digits and digits.isascii() and all(c in "01234567" for c in digits) and int(digits, 8) <= 0o777):
        raise ValueError(
            f"--metrics-socket-mode {text!r}: give permissions in octal, 0000 to 0777 (e.g. 0660)"
        )
    return int(digits, 8)


def _group_id(group: str) -> int:
    """A group's number, from its name or as given."""
    import grp

    if is_decimal(group):
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"--metrics-socket-group {group!r}: no such group") from None


def fair_queue_settings(fair_queue: Optional[bool] = None) -> bool:
    """--fair-queue / --no-fair-queue, else $VPNCRYPT_FAIR_QUEUE, else off.
    ValueError with one line for the user."""
    if fair_queue is not None:
        return fair_queue
    return env_switch("VPNCRYPT_FAIR_QUEUE")


_SWITCH = {"": False, "0": False, "no": False, "false": False, "off": False}
_SWITCH.update({"1": True, "yes": True, "true": True, "on": True})


def env_switch(name: str) -> bool:
    """An on/off environment variable: 1/0, yes/no, true/false, on/off (any
    case), unset or empty is off.  ValueError with one line for the user."""
    env = os.environ.get(name, "").strip().lower()
    if env not in _SWITCH:
        raise ValueError(f"{name}: {env!r} is not one of 1/0, yes/no, true/false, on/off")
    return _SWITCH[env]


def default_threads() -> int:
    """What is best for the machine: a thread per direction only where there
    are cores to spare for it.  On 2 cores one thread carries more (the
    kernel's network stack and the applications need the other core: see
    BENCHMARKS.md, `vpncrypt bench tunnel --vpncrypt-threads 1,2`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 if cores >= 4 else 1


MIN_QUEUES, MAX_QUEUES = 1, 64


def default_queues() -> int:
    """What is best for the machine: one queue below 4 cores (measured on 2:
    a second queue costs more than it carries there, see BENCHMARKS.md), a
    second where there are cores for it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 if cores >= 4 else 1


def queue_settings(queues: Optional[int] = None) -> tuple[int, bool]:
    """--queues, else $VPNCRYPT_QUEUES, else default_queues(): (N, whether a
    persistent TUN made without multi_queue may fall back to one queue:
    only for the default, never for a number the user gave)."""
    if queues is None:
        env = os.environ.get("VPNCRYPT_QUEUES", "").strip()
        if not env:
            return default_queues(), True
        if not (is_decimal(env) and MIN_QUEUES <= int(env) <= MAX_QUEUES):
            raise ValueError(
                f"VPNCRYPT_QUEUES: {env!r} is not a number of queues from {MIN_QUEUES} to {MAX_QUEUES}"
            )
        return int(env), False
    if not MIN_QUEUES <= queues <= MAX_QUEUES:
        raise ValueError(f"--queues {queues}: use {MIN_QUEUES} to {MAX_QUEUES}")
    return queues, False


def data_plane_settings(
    threads: Optional[int] = None, tun_offloads: Optional[str] = None
) -> tuple[int, bool]:
    """--threads / --tun-offloads, else the environment (vpncrypt-go, the unit), else defaults."""
    if threads is None:
        env = os.environ.get("VPNCRYPT_THREADS", "").strip()
        if env and not (is_decimal(env) and 1 <= int(env) <= 2):
            raise ValueError(f"VPNCRYPT_THREADS: {env!r} is not 1 or 2")
        threads = int(env) if env else default_threads()
    elif not 1 <= threads <= 2:
        raise ValueError(f"--threads {threads}: use 1 or 2")
    if tun_offloads is None:
        env = os.environ.get("VPNCRYPT_TUN_OFFLOADS", "on").strip().lower()
        if env not in ("on", "off"):
            raise ValueError(f"VPNCRYPT_TUN_OFFLOADS: {env!r} is not on or off")
        tun_offloads = env
    return threads, tun_offloads == "on"


# The command line's data-plane and metrics settings, as build_daemon takes
# them (None: from the environment, else the default)
UP_SETTINGS = (
    "threads",
    "tun_offloads",
    "queues",
    "metrics",
    "metrics_allow_remote",
    "metrics_socket_mode",
    "metrics_socket_group",
    "metrics_web_config",
    "metrics_endpoints",
    "fair_queue",
)


def build_daemon(
    interface: str,
    config: Optional[str],
    *,
    on_ready: Optional[Callable[[], None]] = None,
    threads: Optional[int] = None,
    tun_offloads: Optional[str] = None,
    queues: Optional[int] = None,
    metrics: Optional[str] = None,
    metrics_allow_remote: Optional[bool] = None,
    metrics_socket_mode: Optional[str] = None,
    metrics_socket_group: Optional[str] = None,
    metrics_web_config: Optional[str] = None,
    metrics_endpoints: Optional[bool] = None,
    protocol_config: Optional[ProtocolConfig] = None,
    fair_queue: Optional[bool] = None,
) -> Optional[Daemon]:
    """The Daemon for `interface`, or None after one line on stderr for a
    bad setting.  `protocol_config`: the protocol's timers and limits (None:
    WireGuard's)."""
    from ..daemon.daemon import Daemon
    from ..daemon.fdlimit import raise_open_files_limit
    from ..daemon.tun import validate_interface_name

    try:
        validate_interface_name(interface)
        raise_open_files_limit()
        threads_n, offloads = data_plane_settings(threads, tun_offloads)
        queues_n, queue_fallback = queue_settings(queues)
        metrics_address = metrics_settings(
            metrics,
            metrics_allow_remote,
            metrics_socket_mode,
            metrics_socket_group,
            metrics_web_config,
            metrics_endpoints,
        )
        fair_queue_on = fair_queue_settings(fair_queue)
    except ValueError as e:
        report_failure(str(e))
        return None
    return Daemon(
        interface,
        config,
        protocol_config=protocol_config,
        on_ready=on_ready,
        threads=threads_n,
        tun_offloads=offloads,
        metrics_address=metrics_address,
        queues=queues_n,
        queue_fallback=queue_fallback,
        fair_queue=fair_queue_on,
    )


def cmd_up(args: argparse.Namespace, protocol_config: Optional[ProtocolConfig] = None) -> int:
    """Run `vpncrypt up` as parsed into `args` until SIGTERM/SIGINT; the exit
    status.  `protocol_config` is for code that starts a daemon with other
    timers (the tests); the command line has no way to set it."""
    from ..daemon.daemon import run_daemon

    setup_logging(args.log_level)
    settings = {name: getattr(args, name) for name in UP_SETTINGS}
    daemon = build_daemon(args.interface, args.config, protocol_config=protocol_config, **settings)
    if daemon is None:
        return 1
    return run_daemon(daemon)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run the daemon for an interface (foreground)",
        description=UP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_up_arguments(p)
    p.set_defaults(func=cmd_up)
