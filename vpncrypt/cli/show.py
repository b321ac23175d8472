"""`vpncrypt show [IFACE]`: interfaces read over the UAPI socket, printed as
`wg show` prints them plus vpncrypt's drop counters by reason (the
get=vpncrypt extension), or as JSON."""

from __future__ import annotations

import argparse
import errno
import functools
import gc
import glob
import os
import signal
import sys
import time
from binascii import b2a_base64
from typing import Any

from ..daemon.counter_snapshot import served_drops
from ..daemon.uapi_paths import DEFAULT_SOCKET_DIR
from ..daemon.uapiclient import get_device


def _b64(hexkey: str) -> str:
    return b2a_base64(bytes.fromhex(hexkey), newline=False).decode()


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024:
            return f"{size:.2f} {unit}"
    return f"{size / 1024:.2f} TiB"


def _ago(seconds: int) -> str:
    if seconds <= 0:
        return "Now"
    parts = []
    for name, size in (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        q, seconds = divmod(seconds, size)
        if q:
            parts.append(f"{q} {name}{'s' if q != 1 else ''}")
    return ", ".join(parts) + " ago"


_ZERO = (0, "0", None)  # a counter's value in parse_get's text, or a test's int


def _by_latest_handshake(peers: list) -> list:
    """As wg sorts them: the latest handshake first; those with none after
    them, in the order listed (most of 100,000 peers: not converted)."""
    done = [p for p in peers if p.get("last_handshake_time_sec") not in _ZERO]
    if not done:
        return peers
    done.sort(key=lambda p: -int(p["last_handshake_time_sec"]))
    return done + [p for p in peers if p.get("last_handshake_time_sec") in _ZERO]


def _name_line(entry: dict, now: int) -> str:
    """The peer's followed Endpoint name (vpncrypt's line: wg has none)."""
    how = [entry["state"]]
    if entry.get("resolved"):  # (only a resolved name has a time)
        how = [f"{entry['state']} {_ago(now - entry['resolved']).lower()}"]
    if entry.get("next_try"):
        how.append(f"next lookup in {max(0, entry['next_try'] - now)} s")
    elif entry["state"] != "resolved":
        how.append("lookup under way")
    return f"  endpoint name: {entry['name']} ({', '.join(how)})"


def _format_peer(p: dict, now: int, name: dict | None = None, mtu: int | None = None) -> str:
    """One peer's block of `wg show`, with the blank line before it (and
    the Endpoint name the daemon follows for it, if any, and the path MTU
    learned for its endpoint, if any)."""
    get = p.get
    out = [f"\npeer: {_b64(p['public_key'])}"]
    if "preshared_key" in p:
        out.append("  preshared key: (hidden)")
    if "endpoint" in p:
        out.append(f"  endpoint: {p['endpoint']}")
    if name:
        out.append(_name_line(name, now))
    if mtu:
        out.append(f"  path mtu: {mtu}")
    out.append(f"  allowed ips: {', '.join(p['allowed_ips']) or '(none)'}")
    lh = get("last_handshake_time_sec")
    if lh not in _ZERO:
        out.append(f"  latest handshake: {_ago(now - int(lh))}")
    rx, tx = get("rx_bytes"), get("tx_bytes")
    if rx not in _ZERO or tx not in _ZERO:
        out.append(f"  transfer: {_bytes(int(rx or 0))} received, {_bytes(int(tx or 0))} sent")
    ka = get("persistent_keepalive_interval")
    if ka not in _ZERO:
        out.append(f"  persistent keepalive: every {_ago(int(ka))[:-4]}")
    return "\n".join(out)


def _format_early(blocks: dict[int, str], peers: list) -> None:
    """The blocks of the peers with no handshake, made while the answer
    is still arriving (read_device's on_peers), by id(peer): a block of
    theirs does not depend on the time."""
    zero = _ZERO
    for p in peers:
        if p.get("last_handshake_time_sec") in zero:
            blocks[id(p)] = _format_peer(p, 0)


def _peer_blocks(dev: dict, now: int, early: dict[int, str]) -> list[str]:
    """Every peer's block, in wg's order: those made early (_format_early)
    as they are, but for a peer whose Endpoint name the daemon follows or
    that has a path MTU (both listed at the answer's end)."""
    names, mtus = dev.get("endpoint_names", {}), dev.get("path_mtus", {})
    if (names or mtus) and early:
        for p in dev["peers"]:
            if p["public_key"] in names or p["public_key"] in mtus:
                early.pop(id(p), None)
    return [
        early.get(id(p)) or _format_peer(p, now, names.get(p["public_key"]), mtus.get(p["public_key"]))
        for p in _by_latest_handshake(dev["peers"])
    ]


def format_show(
    interface: str, dev: dict, now: float | None = None, early: dict[int, str] | None = None
) -> str:
    """`wg show`'s text for one interface, and vpncrypt's counters; `early`:
    the blocks _format_early made of its peers."""
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
    out.extend(_peer_blocks(dev, int(now), {} if early is None else early))
    if not dev["counters"]:
        return "\n".join(out)  # another implementation (wireguard-go): no drop counters
    info = dev.get("info", {})
    if info:
        out.append("")
        out.append(
            f"crypto kernels: chacha20 {info.get('chacha', '?')}, poly1305 "
            f"{info.get('poly1305', '?')}; the data path last ran chacha20 "
            f"{info.get('data_chacha', '(nothing yet)')}, poly1305 "
            f"{info.get('data_poly1305', '(nothing yet)')}"
        )
    drops, other = served_drops(dev["counters"])
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


def _json_peer(p: dict, names: dict, mtus: dict) -> dict:
    get = p.get
    lh = int(get("last_handshake_time_sec") or 0)
    return {
        "public_key": _b64(p["public_key"]),
        "preshared_key": "(hidden)" if "preshared_key" in p else None,
        "endpoint": get("endpoint"),
        "allowed_ips": list(p["allowed_ips"]),
        "latest_handshake": lh + int(get("last_handshake_time_nsec") or 0) / 1e9 if lh else 0,
        "received_bytes": int(get("rx_bytes") or 0),
        "sent_bytes": int(get("tx_bytes") or 0),
        "persistent_keepalive": int(get("persistent_keepalive_interval") or 0),
        # its Endpoint name, if the daemon follows one: name, state, resolved, next_try
        "endpoint_name": names.get(p["public_key"]),
        # the path MTU learned for its endpoint (outer bytes), None while none is
        "path_mtu": mtus.get(p["public_key"]),
    }


_NO_NAMES: dict = {}


class _JsonPeers:
    """--json's peers made into JSON a part at a time while the answer is
    still arriving (read_device's on_peers): json.dumps() of each part's
    list, less its brackets.  A part is made again at the end when the
    daemon follows the Endpoint name of one of its peers, or one has a path
    MTU (both are listed at the answer's end)."""

    def __init__(self) -> None:
        self.parts: list[tuple[list, str]] = []

    def add(self, peers: list) -> None:
        import json

        self.parts.append((peers, json.dumps([_json_peer(p, _NO_NAMES, _NO_NAMES) for p in peers])[1:-1]))

    def text(self, names: dict, mtus: dict) -> str:
        """The list of every peer, as json.dumps() makes it."""
        import json

        out = []
        for peers, text in self.parts:
            if (names or mtus) and any(p["public_key"] in names or p["public_key"] in mtus for p in peers):
                text = json.dumps([_json_peer(p, names, mtus) for p in peers])[1:-1]
            out.append(text)
        return "[" + ", ".join(out) + "]"


# Where the peers go in an interface's JSON until their text is put there:
# the first string with a NUL in it (what comes before it, an interface's
# name, public key and implementation, cannot have one).
_PEERS_HERE = "\0peers\0"


def _interface_json(interface: str, dev: dict, ours: bool, peers: _JsonPeers) -> str:
    """json.dumps() of show_json(), its peers made as they were read."""
    import json

    text = json.dumps(show_json(interface, dev, ours, _PEERS_HERE))
    return text.replace(
        json.dumps(_PEERS_HERE), peers.text(dev.get("endpoint_names", {}), dev.get("path_mtus", {})), 1
    )


def _json_document(now: float, interfaces: list[str]) -> str:
    """json.dumps({"time": now, "interfaces": [...]}), the interfaces' JSON
    made already (on one line: json's C encoder takes no indent; with
    indent=2, the Python one took 2 s for 100,000 peers; `jq .` lays it
    out)."""
    import json

    return f'{{"time": {json.dumps(now)}, "interfaces": [{", ".join(interfaces)}]}}'


def show_json(interface: str, dev: dict, ours: bool, peers: Any = None) -> dict:
    """One interface as `vpncrypt show --json` gives it: what the metrics
    serve, structured (a daemon other than vpncrypt: what its get=1 says).
    No key material but public keys.  `peers`: what to give as its peers,
    if not the list of them (_interface_json)."""
    out: dict[str, Any] = {"name": interface, "implementation": "vpncrypt" if ours else "other"}
    if "private_key" in dev:
        from ..protocol import keys

        out["public_key"] = keys.pubkey(_b64(dev["private_key"]))
    else:
        out["public_key"] = None
    out["listen_port"] = int(dev.get("listen_port", 0))
    out["fwmark"] = int(dev.get("fwmark", 0))
    if peers is None:
        names, mtus = dev.get("endpoint_names", {}), dev.get("path_mtus", {})
        peers = [_json_peer(p, names, mtus) for p in dev["peers"]]
    out["peers"] = peers
    if dev["counters"]:
        drops, other = served_drops(dev["counters"])
        out["drops"] = dict(sorted(drops.items()))
        out["counters"] = dict(sorted(other.items()))
        out["crypto_kernels"] = dict(dev.get("info", {}))
    else:
        out["drops"] = out["counters"] = out["crypto_kernels"] = None
    return out


def _access_error(e: OSError) -> str:
    """What went wrong, in wg's words: a socket that is not there, or that
    nothing listens on, is an interface that does not exist (wg then asks
    the kernel, which answers ENODEV: "No such device")."""
    if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        return os.strerror(errno.ENODEV)
    return e.strerror or str(e)


def _write_out(text: str) -> int:
    """Print `text`; a reader that went away (`vpncrypt show | head`) ends
    it quietly, as SIGPIPE ends wg: exit status 141 (128 + SIGPIPE), no
    traceback."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # stdout is pointed at /dev/null, so that the interpreter's own
        # flush at exit meets no broken pipe either
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    # A command that lives for one answer: its objects (a few per peer, a
    # million at 100,000 peers) are freed by reference counting or at exit,
    # and none is in a cycle.  The cyclic collector only walked them again
    # and again: 0.4 s of --json's 0.75 s at 100,000 peers.
    gc.disable()
    if args.interface:
        names = [args.interface]
    else:
        names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(args.socket_dir, "*.sock")))
    status = 0
    blocks, found = [], []
    for name in names:
        # each peer made into its text or JSON as soon as it is read
        early: dict[int, str] = {}
        made = _JsonPeers()
        hook = made.add if args.json else functools.partial(_format_early, early)
        try:
            dev, ours = get_device(name, args.socket_dir, on_peers=hook)
        except OSError as e:
            # wg's text: `wg show IFACE` names no interface, `wg show` does
            where = "" if args.interface else f" {name}"
            print(f"Unable to access interface{where}: {_access_error(e)}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            found.append(_interface_json(name, dev, ours, made))
        else:
            blocks.append(format_show(name, dev, early=early))
    if args.json:
        return _write_out(_json_document(time.time(), found) + "\n") or status
    if blocks:
        return _write_out("\n\n".join(blocks) + "\n") or status
    return status


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help="show interfaces over the UAPI, like `wg show`, plus drops",
        description="Show one interface (or all userspace ones) as `wg show` "
        "does, read over the UAPI socket, plus vpncrypt's drop counters "
        "by reason (the get=vpncrypt extension).",
    )
    p.add_argument("interface", metavar="IFACE", nargs="?", help="interface (default: all)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: {\"time\": ..., \"interfaces\": [...]}, the data the "
        "metrics serve, structured (public keys only)",
    )
    p.add_argument("--socket-dir", default=DEFAULT_SOCKET_DIR, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_show)
