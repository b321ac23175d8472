"""The daemon's command-line commands: `vpncrypt up`, `genkey`, `pubkey`,
`genpsk`, `show`, and the wireguard-go compatible `vpncrypt-go IFACE`."""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

from .logsetup import add_logging_arguments, setup_logging
from .uapi import DEFAULT_SOCKET_DIR
from .uapiclient import get_device

UP_DESCRIPTION = """\
Run the vpncrypt daemon for interface IFACE in the foreground: create the TUN
device, apply the config file (the `wg setconf` format plus wg-quick's Address
and MTU), open the UDP socket and serve the WireGuard UAPI on
/var/run/wireguard/IFACE.sock, so `wg show`, `wg set` and `wg syncconf` work.
Without -c the interface starts unconfigured and waits for `wg setconf`.
SIGHUP re-reads the config file and applies only the differences; SIGTERM or
SIGINT removes the socket and the interface.
"""


# --------------------------------------------------------------------------
# up

def add_up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("interface", metavar="IFACE", help="interface name (e.g. wg0)")
    p.add_argument("-c", "--config", metavar="FILE",
                   help="config file (default: none; configure through the UAPI)")
    p.add_argument("-f", "--foreground", action="store_true", default=True,
                   help="stay in the foreground (the default; accepted for symmetry)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="data-plane threads: 1 (everything on the event loop) or 2 (receiving "
                        "and sending on a thread each); default $VPNCRYPT_THREADS, else "
                        f"{default_threads()} on this machine")
    p.add_argument("--tun-offloads", choices=["on", "off"], default=None,
                   help="TSO/USO and GRO on the TUN device (default $VPNCRYPT_TUN_OFFLOADS, else on)")
    add_metrics_arguments(p)
    add_logging_arguments(p)


def add_metrics_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", metavar="ADDR:PORT", default=None,
                   help="serve Prometheus/OpenMetrics on http://ADDR:PORT/metrics (default "
                        "$VPNCRYPT_METRICS, else off); a loopback address unless "
                        "--metrics-allow-remote")
    p.add_argument("--metrics-allow-remote", action="store_true", default=None,
                   help="allow a --metrics address other than loopback (the metrics name "
                        "every peer's public key and endpoint); also "
                        "VPNCRYPT_METRICS_ALLOW_REMOTE=1")


def _metrics_settings(address=None, allow_remote=None):
    """--metrics / --metrics-allow-remote, else the environment: (host, port)
    or None (off).  ValueError with one line for the user."""
    from .metrics import parse_address
    if address is None:
        address = os.environ.get("VPNCRYPT_METRICS", "").strip() or None
    if allow_remote is None:
        env = os.environ.get("VPNCRYPT_METRICS_ALLOW_REMOTE", "").strip().lower()
        if env not in ("", "0", "1", "no", "yes", "false", "true"):
            raise ValueError(f"VPNCRYPT_METRICS_ALLOW_REMOTE: {env!r} is not 1 or 0")
        allow_remote = env in ("1", "yes", "true")
    if address is None or address.lower() == "off":
        return None
    return parse_address(address, allow_remote)


def default_threads() -> int:
    """What is best for the machine: a thread per direction only where there
    are cores to spare for it.  On 2 cores one thread carries more (the
    kernel's network stack and the applications need the other core: see
    BENCHMARKS.md, `vpncrypt bench tunnel --vpncrypt-threads 1,2`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 2 if cores >= 4 else 1


def _data_plane_settings(threads=None, tun_offloads=None):
    """--threads / --tun-offloads, else the environment (vpncrypt-go, the unit), else defaults."""
    if threads is None:
        env = os.environ.get("VPNCRYPT_THREADS", "").strip()
        if env and not (env.isdigit() and 1 <= int(env) <= 2):
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


def _build_daemon(interface, config, on_ready=None, threads=None, tun_offloads=None,
                  metrics=None, metrics_allow_remote=None):
    from .daemon import Daemon
    from .fdlimit import raise_open_files_limit
    from .logsetup import report_failure
    from .testtimers import timer_config_from_env
    from .tun import validate_interface_name
    try:
        validate_interface_name(interface)
        raise_open_files_limit()
        timers = timer_config_from_env()
        threads, offloads = _data_plane_settings(threads, tun_offloads)
        metrics_address = _metrics_settings(metrics, metrics_allow_remote)
    except ValueError as e:
        report_failure(str(e))
        return None
    return Daemon(interface, config, timer_config=timers, on_ready=on_ready, threads=threads,
                  tun_offloads=offloads, metrics_address=metrics_address)


def cmd_up(args) -> int:
    from .daemon import run_daemon
    setup_logging(args.log_level)
    daemon = _build_daemon(args.interface, args.config, threads=args.threads,
                           tun_offloads=args.tun_offloads, metrics=args.metrics,
                           metrics_allow_remote=args.metrics_allow_remote)
    if daemon is None:
        return 1
    return run_daemon(daemon)


# --------------------------------------------------------------------------
# keys

def cmd_genkey(args) -> int:
    from ..protocol import keys
    old = os.umask(0o077)
    try:
        print(keys.genkey())
    finally:
        os.umask(old)
    return 0


def cmd_genpsk(args) -> int:
    from ..protocol import keys
    print(keys.genpsk())
    return 0


def cmd_pubkey(args) -> int:
    from ..config.keys import KeyFormatError, PrivateKey
    from ..protocol import keys
    data = sys.stdin.read(1024)
    try:
        private = PrivateKey.from_base64(data)      # canonical base64 only, as `wg pubkey`
    except KeyFormatError as e:
        print(f"vpncrypt pubkey: {e}", file=sys.stderr)
        return 1
    print(keys.pubkey(private.to_base64()))
    return 0


# --------------------------------------------------------------------------
# show

def _b64(hexkey: str) -> str:
    import base64
    return base64.b64encode(bytes.fromhex(hexkey)).decode()


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}"


def _ago(seconds: int) -> str:
    if seconds <= 0:
        return "Now"
    parts = []
    for name, size in (("year", 365 * 86400), ("day", 86400), ("hour", 3600),
                       ("minute", 60), ("second", 1)):
        q, seconds = divmod(seconds, size)
        if q:
            parts.append(f"{q} {name}{'s' if q != 1 else ''}")
    return ", ".join(parts) + " ago"


def format_show(interface: str, dev: dict, now: float | None = None) -> str:
    now = time.time() if now is None else now
    out = [f"interface: {interface}"]
    if "private_key" in dev:
        from ..protocol import keys
        out.append(f"  public key: {keys.pubkey(_b64(dev['private_key']))}")
        out.append("  private key: (hidden)")
    if dev.get("listen_port"):
        out.append(f"  listening port: {dev['listen_port']}")
    if dev.get("fwmark"):
        out.append(f"  fwmark: 0x{int(dev['fwmark']):x}")
    peers = sorted(dev["peers"], key=lambda p: -int(p.get("last_handshake_time_sec", 0)))
    for p in peers:
        out.append("")
        out.append(f"peer: {_b64(p['public_key'])}")
        if "preshared_key" in p:
            out.append("  preshared key: (hidden)")
        if "endpoint" in p:
            out.append(f"  endpoint: {p['endpoint']}")
        out.append(f"  allowed ips: {', '.join(p['allowed_ips']) or '(none)'}")
        lh = int(p.get("last_handshake_time_sec", 0))
        if lh:
            out.append(f"  latest handshake: {_ago(int(now) - lh)}")
        rx, tx = int(p.get("rx_bytes", 0)), int(p.get("tx_bytes", 0))
        if rx or tx:
            out.append(f"  transfer: {_bytes(rx)} received, {_bytes(tx)} sent")
        ka = int(p.get("persistent_keepalive_interval", 0))
        if ka:
            out.append(f"  persistent keepalive: every {_ago(ka)[:-4]}")
    if not dev["counters"]:
        return "\n".join(out)      # another implementation (wireguard-go): no drop counters
    info = dev.get("info", {})
    if info:
        out.append("")
        out.append(f"crypto kernels: chacha20 {info.get('chacha', '?')}, poly1305 "
                   f"{info.get('poly1305', '?')}; the data path last ran chacha20 "
                   f"{info.get('data_chacha', '(nothing yet)')}, poly1305 "
                   f"{info.get('data_poly1305', '(nothing yet)')}")
    drops = {k[5:]: v for k, v in dev["counters"].items() if k.startswith("drop_")}
    other = {k: v for k, v in dev["counters"].items() if not k.startswith("drop_")}
    out.append("")
    out.append("drops:")
    if any(drops.values()):
        for k, v in sorted(drops.items()):
            if v:
                out.append(f"  {k}: {v}")
    else:
        out.append("  (none)")
    if other:
        out.append("counters:")
        for k, v in sorted(other.items()):
            out.append(f"  {k}: {v}")
    return "\n".join(out)


def show_json(interface: str, dev: dict, ours: bool) -> dict:
    """One interface as `vpncrypt show --json` gives it: what the metrics
    serve, structured (a daemon other than vpncrypt: what its get=1 says).
    No key material but public keys."""
    out = {"name": interface, "implementation": "vpncrypt" if ours else "other"}
    if "private_key" in dev:
        from ..protocol import keys
        out["public_key"] = keys.pubkey(_b64(dev["private_key"]))
    else:
        out["public_key"] = None
    out["listen_port"] = int(dev.get("listen_port", 0))
    out["fwmark"] = int(dev.get("fwmark", 0))
    peers = []
    for p in dev["peers"]:
        lh = int(p.get("last_handshake_time_sec", 0))
        peers.append({
            "public_key": _b64(p["public_key"]),
            "preshared_key": "(hidden)" if "preshared_key" in p else None,
            "endpoint": p.get("endpoint"),
            "allowed_ips": list(p["allowed_ips"]),
            "latest_handshake": lh + int(p.get("last_handshake_time_nsec", 0)) / 1e9 if lh else 0,
            "received_bytes": int(p.get("rx_bytes", 0)),
            "sent_bytes": int(p.get("tx_bytes", 0)),
            "persistent_keepalive": int(p.get("persistent_keepalive_interval", 0)),
        })
    out["peers"] = peers
    if dev["counters"]:
        c = dev["counters"]
        out["drops"] = {k[5:]: v for k, v in sorted(c.items()) if k.startswith("drop_")}
        out["counters"] = {k: v for k, v in sorted(c.items()) if not k.startswith("drop_")}
        out["crypto_kernels"] = dict(dev.get("info", {}))
    else:
        out["drops"] = out["counters"] = out["crypto_kernels"] = None
    return out


def cmd_show(args) -> int:
    if args.interface:
        names = [args.interface]
    else:
        names = sorted(os.path.basename(p)[:-5]
                       for p in glob.glob(os.path.join(args.socket_dir, "*.sock")))
    status = 0
    blocks, found = [], []
    for name in names:
        try:
            dev, ours = get_device(name, args.socket_dir)
        except OSError as e:
            print(f"vpncrypt show: {name}: {e.strerror or e}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            found.append(show_json(name, dev, ours))
        else:
            blocks.append(format_show(name, dev))
    if args.json:
        import json
        print(json.dumps({"time": time.time(), "interfaces": found}, indent=2))
    elif blocks:
        print("\n\n".join(blocks))
    return status


# --------------------------------------------------------------------------
# registration in vpncrypt.cli

def register(sub) -> None:
    p = sub.add_parser("up", help="run the daemon for an interface (foreground)",
                       description=UP_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_up_arguments(p)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("genkey", help="print a new private key (base64), like `wg genkey`",
                       description="Print a new random private key in base64, like `wg genkey`.")
    p.set_defaults(func=cmd_genkey)
    p = sub.add_parser("pubkey", help="read a private key on stdin, print its public key",
                       description="Read a base64 private key on standard input and print "
                       "its public key, like `wg pubkey`.")
    p.set_defaults(func=cmd_pubkey)
    p = sub.add_parser("genpsk", help="print a new preshared key, like `wg genpsk`",
                       description="Print a new random preshared key in base64, like `wg genpsk`.")
    p.set_defaults(func=cmd_genpsk)

    p = sub.add_parser("show", help="show interfaces over the UAPI, like `wg show`, plus drops",
                       description="Show one interface (or all userspace ones) as `wg show` "
                       "does, read over the UAPI socket, plus vpncrypt's drop counters "
                       "by reason (the get=vpncrypt extension).")
    p.add_argument("interface", metavar="IFACE", nargs="?", help="interface (default: all)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {\"time\": ..., \"interfaces\": [...]}, the data the "
                        "metrics serve, structured (public keys only)")
    p.add_argument("--socket-dir", default=DEFAULT_SOCKET_DIR, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_show)


# --------------------------------------------------------------------------
# vpncrypt-go: the wireguard-go command line

GO_DESCRIPTION = """\
Like wireguard-go: create interface IFACE and serve the WireGuard UAPI on
/var/run/wireguard/IFACE.sock, unconfigured (configure it with `wg setconf`).
Without -f it forks, and the parent exits 0 once the interface, socket and
UAPI are ready (exit 1 if the daemon failed to start).  Also honours
WG_PROCESS_FOREGROUND=1 and LOG_LEVEL=verbose|debug|info|error|silent (the
default, as wireguard-go's, is error; without LOG_LEVEL a forked daemon logs
nowhere once it is ready).  For
WG_QUICK_USERSPACE_IMPLEMENTATION=vpncrypt-go wg-quick up CONF.
"""

_GO_LEVELS = {"verbose": "debug", "debug": "debug", "info": "info", "error": "error",
              "silent": "critical"}


def go_main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="vpncrypt-go", description=GO_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("interface", metavar="IFACE", help="interface name")
    p.add_argument("-f", "--foreground", action="store_true", help="do not fork")
    p.add_argument("--version", action="version",
                   version=f"vpncrypt-go {__import__('vpncrypt').__version__}")
    args = p.parse_args(argv)
    env_level = os.environ.get("LOG_LEVEL", "").lower()
    level = _GO_LEVELS.get(env_level, "error")     # wireguard-go's default
    foreground = args.foreground or os.environ.get("WG_PROCESS_FOREGROUND") == "1"
    if foreground:
        setup_logging(level)
        from .daemon import run_daemon
        daemon = _build_daemon(args.interface, None)
        return 1 if daemon is None else run_daemon(daemon)
    return _fork_daemon(args.interface, level, keep_output=bool(env_level))


def _fork_daemon(interface: str, level: str, keep_output: bool) -> int:
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
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        setup_logging(level)

        def ready():
            os.write(w, b"R")
            os.close(w)
            if not keep_output:  # detach from the caller's terminal/pipes
                os.dup2(null, 1)
                os.dup2(null, 2)
        daemon = _build_daemon(interface, None, on_ready=ready)
        if daemon is not None:
            from .daemon import run_daemon
            code = run_daemon(daemon)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)
