"""The `vpncrypt` command line."""
import argparse
import sys


def _bench_crypto(sub):
    from vpncrypt.bench import crypto as bench_crypto
    p = sub.add_parser("crypto", help="ChaCha20, AEAD seal and AEAD open throughput, "
                       "every implementation side by side",
                       description=bench_crypto.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_crypto.add_arguments(p)
    p.set_defaults(func=bench_crypto.run)


def _bench_tunnel(sub):
    from vpncrypt.bench import tunnel as bench_tunnel
    p = sub.add_parser("tunnel", help="iperf3 through vpncrypt and wireguard-go tunnels between "
                       "network namespaces (root)",
                       description=bench_tunnel.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_tunnel.add_arguments(p)
    p.set_defaults(func=bench_tunnel.run)


def _loopback_bench(sub):
    from vpncrypt.bench import loopback
    p = sub.add_parser("loopback-bench", help="two vpncrypt devices over 127.0.0.1: speed and "
                       "correctness of the real data plane, against an unencrypted baseline",
                       description=loopback.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    loopback.add_arguments(p)
    p.set_defaults(func=loopback.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vpncrypt",
        description="A WireGuard-compatible userspace VPN daemon with a native ChaCha20-Poly1305 core.")
    parser.add_argument("--version", action="version",
                        version=f"vpncrypt {__import__('vpncrypt').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from vpncrypt.daemon import commands as daemon_commands
    daemon_commands.register(sub)
    _loopback_bench(sub)

    bench = sub.add_parser("bench", help="benchmarks (crypto, tunnel)",
                           description="Benchmarks: `vpncrypt bench crypto --help`, "
                           "`vpncrypt bench tunnel --help`.")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bench_sub.required = True
    _bench_crypto(bench_sub)
    _bench_tunnel(bench_sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130


def go_main(argv=None) -> int:
    """The `vpncrypt-go IFACE [-f]` entry point (wireguard-go's command line)."""
    from vpncrypt.daemon.commands import go_main as _go_main
    try:
        return _go_main(argv)
    except KeyboardInterrupt:
        return 130
