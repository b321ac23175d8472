"""The `vpncrypt` command line."""
import argparse
import signal
import sys


def _add_module_command(sub, name: str, module: str, help: str) -> None:
    """A subcommand whose arguments and run() come from a module
    (add_arguments(parser), run(args) -> int) and whose --help is its docstring."""
    import importlib
    mod = importlib.import_module(module)
    p = sub.add_parser(name, help=help, description=mod.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    mod.add_arguments(p)
    p.set_defaults(func=mod.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vpncrypt",
        description="A WireGuard-compatible userspace VPN daemon with a native ChaCha20-Poly1305 core.")
    parser.add_argument("--version", action="version",
                        version=f"vpncrypt {__import__('vpncrypt').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from vpncrypt.daemon import commands as daemon_commands
    daemon_commands.register(sub)
    _add_module_command(sub, "loopback-bench", "vpncrypt.bench.loopback",
                        "two vpncrypt devices over 127.0.0.1: speed and correctness of the "
                        "real data plane, against an unencrypted baseline")

    bench = sub.add_parser("bench", help="benchmarks (crypto, tunnel, flood, storm, uapi)",
                           description="Benchmarks: `vpncrypt bench crypto --help`, "
                           "`vpncrypt bench tunnel --help`, `vpncrypt bench flood --help`, "
                           "`vpncrypt bench storm --help`, `vpncrypt bench uapi --help`.")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bench_sub.required = True
    _add_module_command(bench_sub, "crypto", "vpncrypt.bench.crypto",
                        "ChaCha20, AEAD seal and AEAD open throughput, every implementation "
                        "side by side")
    _add_module_command(bench_sub, "tunnel", "vpncrypt.bench.tunnel",
                        "iperf3 through vpncrypt and wireguard-go tunnels between network "
                        "namespaces (root)")
    _add_module_command(bench_sub, "flood", "vpncrypt.bench.flood",
                        "an established session under a handshake flood, vpncrypt against "
                        "wireguard-go (root)")
    _add_module_command(bench_sub, "storm", "vpncrypt.bench.storm",
                        "a reconnect storm of N peers' handshakes, vpncrypt against wireguard-go "
                        "(root)")
    _add_module_command(bench_sub, "uapi", "vpncrypt.bench.uapi",
                        "big UAPI requests against a probe stream through a tunnel, and "
                        "`wg show dump` at 50,000 peers, vpncrypt against wireguard-go (root)")
    return parser


def main(argv=None) -> int:
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["up"]:
        hold_sighup()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130


def hold_sighup() -> None:
    """A daemon's SIGHUP before its own handler is in place (it installs it,
    then reads the config) must not kill it, SIGHUP's default action: ignored
    until then, from the first thing the command does."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def go_main(argv=None) -> int:
    """The `vpncrypt-go IFACE [-f]` entry point (wireguard-go's command line)."""
    hold_sighup()
    from vpncrypt.daemon.commands import go_main as _go_main
    try:
        return _go_main(argv)
    except KeyboardInterrupt:
        return 130
