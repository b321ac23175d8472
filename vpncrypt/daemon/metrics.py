"""Prometheus metrics of the running daemon (`vpncrypt up --metrics ADDR:PORT`,
or `--metrics unix:PATH`).

An HTTP server on the daemon's event loop answers ``GET /metrics`` in the
Prometheus text format, or in OpenMetrics when the scraper asks for it
(prometheus_client's own encoders, chosen by the Accept header).  A scrape
reads the counters the session table and the Device already keep, at scrape
time: nothing is counted per packet for it.  The peers are read on the loop
in parts (the loop serves the sockets between them); the text is written
from that copy on a thread of its own.

No key material but public keys is ever served.  Off by default; an
address other than loopback is refused unless allow_remote is given
(`--metrics-allow-remote`).  A TCP port on loopback is open to every local
user; a UNIX socket (`--metrics unix:PATH`) is open to those its mode and
group let in (unixlisten.py).  TLS and basic authentication come from an
exporter web config file (webconfig.py).  The peers' endpoints (their IP
addresses and ports) are served only with `--metrics-endpoints`: otherwise
vpncrypt_peer_info's ``endpoint`` label is empty (the names stay the same).

The names: everything under ``vpncrypt_``, plus the three that the common
WireGuard exporters (prometheus_wireguard_exporter) serve and dashboards
read: ``wireguard_sent_bytes_total``, ``wireguard_received_bytes_total``
(counters) and ``wireguard_latest_handshake_seconds`` (a gauge, Unix time),
labelled ``interface``, ``public_key``, ``allowed_ips`` (comma-separated).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import ipaddress
import logging
import os
from typing import Any, Callable, Optional

from ..dataplane.engine import BATCH_SIZE_BOUNDS
from ..drop_reasons import DropReason
from .webconfig import WebConfig

log = logging.getLogger("vpncrypt.daemon")

DEFAULT_PORT = 9586  # what prometheus_wireguard_exporter listens on
MAX_CLIENTS = 8  # scrapers served at a time; more are closed at once
REQUEST_TIMEOUT = 5.0  # seconds to send a whole request head
MAX_HEAD = 8192  # bytes of request line and headers
PART = 256  # peers read per turn of the loop


class MetricsAddressError(ValueError):
    """--metrics ADDR:PORT that cannot be served (one line for the user)."""


@dataclasses.dataclass(frozen=True)
class MetricsSettings:
    """Where and how the metrics are served: a TCP (host, port), or a UNIX
    socket at `unix_path` with `socket_mode` and the group `socket_gid`
    (None: the daemon's); `web`: TLS and basic auth (webconfig.py);
    `endpoints`: the peers' endpoints in vpncrypt_peer_info."""

    host: str = ""
    port: int = 0
    unix_path: Optional[str] = None
    socket_mode: int = 0o600
    socket_gid: Optional[int] = None
    web: Optional[WebConfig] = None
    endpoints: bool = False

    @property
    def address(self) -> str:
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


UNIX_PREFIX = "unix:"


def parse_address(text: str, allow_remote: bool = False) -> tuple:
    """``ADDR:PORT`` (``[v6]:PORT``; ``localhost`` is 127.0.0.1) as (host,
    port), or ``unix:/ABSOLUTE/PATH`` as ("unix", path).  A non-loopback
    address needs allow_remote."""
    value = text.strip()
    if value.startswith(UNIX_PREFIX):
        path = value[len(UNIX_PREFIX) :]
        if not path.startswith("/") or "\0" in path or path.endswith("/"):
            raise MetricsAddressError(
                f"--metrics {text!r}: a UNIX socket needs an absolute path, e.g. "
                "unix:/run/vpncrypt/wg0-metrics.sock"
            )
        if len(os.fsencode(path)) > 107:  # sun_path: 108 bytes with the NUL
            raise MetricsAddressError(f"--metrics {text!r}: the path is longer than 107 bytes")
        return "unix", path
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise MetricsAddressError(f"--metrics {text!r}: use ADDR:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise MetricsAddressError(f"--metrics {text!r}: {host!r} is not an IP address") from None
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        raise MetricsAddressError(f"--metrics {text!r}: the port must be 1-65535")
    if not addr.is_loopback and not allow_remote:
        raise MetricsAddressError(
            f"--metrics {text}: {host} is not a loopback address; the metrics name every peer "
            "(and with --metrics-endpoints their addresses), so serving them to other hosts needs "
            "--metrics-allow-remote"
        )
    return str(addr), int(port)


def _b64(key: bytes) -> str:
    return base64.b64encode(bytes(key)).decode()


# --------------------------------------------------------------------------
# what a scrape reads (on the loop), and the families made from it (anywhere)


async def read_state(daemon, part: int = PART, endpoints: bool = False) -> dict:
    """The daemon's state for one scrape: plain data, read on the loop, the
    peers ``part`` at a time with the loop let run between parts.
    `endpoints`: whether the peers' endpoints are served (else empty)."""
    dp = daemon.dataplane
    from .data_plane import kernels

    state = {
        "endpoints": endpoints,
        "interface": daemon.interface,
        "listen_port": daemon.listen_port,
        "public_key": _b64(dp.device.public_key) if dp.device.public_key else None,
        "counters": daemon.counters(peer_drops=False),
        "kernels": kernels(dp.engine),
        "batch_sizes": dp.engine_counters().batch_sizes(),
        "uapi": {k: h.as_dict() for k, h in daemon.uapi.latency.items()} if daemon.uapi is not None else {},
        "peers": [],
        "endpoint_names": daemon.endpoint_name_rows(),  # the followed Endpoint names (_name_families)
    }
    peers = state["peers"]
    for rows in dp.metric_rows(part, drops=state["counters"].drops):
        peers.extend(rows)
        await asyncio.sleep(0)
    return state


# The interface's families read from the device's counters: (family, name,
# help, counter (CounterSnapshot.device's, or a drop reason), value when the
# counter is missing).
_INTERFACE_COUNTERS = (
    (
        "counter",
        "vpncrypt_handshakes_initiated",
        "Handshake initiations sent (retries included).",
        "handshakes_sent",
        0,
    ),
    (
        "counter",
        "vpncrypt_handshakes_completed",
        "Handshakes completed (as initiator or responder).",
        "handshakes_completed",
        0,
    ),
    (
        "counter",
        "vpncrypt_handshakes_failed",
        "Handshakes given up after REKEY_ATTEMPT_TIME without a response.",
        "handshakes_failed",
        0,
    ),
    (
        "counter",
        "vpncrypt_cookie_replies_sent",
        "Cookie replies sent to handshake messages that came without a valid mac2 under load.",
        DropReason.COOKIE_SENT,
        0,
    ),
    (
        "gauge",
        "vpncrypt_under_load",
        "1 while the device is under load (handshake messages need a cookie), else 0.",
        "under_load",
        0,
    ),
    (
        "counter",
        "vpncrypt_keepalives_sent",
        "Keepalives sent (passive and persistent).",
        "keepalives_sent",
        0,
    ),
    (
        "counter",
        "vpncrypt_source_addresses_forgotten",
        "Peers' source addresses given up because the kernel refused them (the address was removed).",
        "source_addresses_forgotten",
        0,
    ),
    ("gauge", "vpncrypt_open_fds", "File descriptors the daemon has open.", "open_fds", -1),
)


def _families(state: dict):
    """The families of one scrape, made one at a time (each is freed once
    written: freeing them all at once would hold the interpreter lock, and
    so the loop, for tens of milliseconds at 10,000 peers)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        InfoMetricFamily,
    )

    iface = state["interface"]
    c = state["counters"]

    def gauge(name, doc, value):
        f = GaugeMetricFamily(name, doc, labels=["interface"])
        f.add_metric([iface], value)
        return f

    def counter(name, doc, value):
        f = CounterMetricFamily(name, doc, labels=["interface"])
        f.add_metric([iface], value)
        return f

    # ---- the interface
    yield gauge("vpncrypt_listen_port", "UDP port the interface listens on.", state["listen_port"])
    yield gauge("vpncrypt_peers", "Peers configured on the interface.", len(state["peers"]))
    for family, name, doc, key, missing in _INTERFACE_COUNTERS:
        value = (c.drops if isinstance(key, DropReason) else c.device).get(key, missing)
        yield (counter if family == "counter" else gauge)(name, doc, value)
    drops = CounterMetricFamily(
        "vpncrypt_drops", "Messages and packets dropped, by reason.", labels=["interface", "reason"]
    )
    for reason, n in sorted(c.drops.items()):
        if reason is not DropReason.COOKIE_SENT:  # served as vpncrypt_cookie_replies_sent_total
            drops.add_metric([iface, reason.value], n)
    yield drops
    batches = CounterMetricFamily(
        "vpncrypt_dataplane_batches",
        "Batches the data plane moved, by direction.",
        labels=["interface", "direction"],
    )
    batches.add_metric([iface, "rx"], c.engine.get("rx_batches", 0))
    batches.add_metric([iface, "tx"], c.engine.get("tx_batches", 0))
    yield batches
    sizes = HistogramMetricFamily(
        "vpncrypt_dataplane_batch_size",
        "Packets per batch the data plane moved, by direction.",
        labels=["interface", "direction"],
    )
    for direction, (counts, packets) in sorted(state.get("batch_sizes", {}).items()):
        running, buckets = 0, []
        for bound, n in zip([*map(str, BATCH_SIZE_BOUNDS), "+Inf"], counts):
            running += n
            buckets.append((bound, running))
        sizes.add_metric([iface, direction], buckets, packets)
    yield sizes
    errors = CounterMetricFamily(
        "vpncrypt_dataplane_errors",
        "Send and write failures the data plane saw, by kind.",
        labels=["interface", "kind"],
    )
    for k in ("tx_send_errors", "tx_dropped", "inner_write_errors", "inner_dropped"):
        errors.add_metric([iface, k], c.engine.get(k, 0))
    yield errors
    by_result = (
        (
            "vpncrypt_icmp_errors",
            "ICMP destination-unreachable errors for packets no peer (or no endpoint) takes: "
            "sent back into the TUN, or not sent for the rate limits.",
            {"sent": "engine_icmp_errors_sent", "rate_limited": "engine_icmp_errors_limited"},
        ),
        (
            "vpncrypt_path_mtu_errors",
            "ICMP fragmentation-needed / ICMPv6 packet-too-big errors for inner packets larger than "
            "their peer's path MTU: sent back into the TUN, or not sent for the rate limits.",
            {"sent": "engine_pmtu_errors_sent", "rate_limited": "engine_pmtu_errors_limited"},
        ),
        (
            "vpncrypt_path_mtu_reports",
            "Errors of the UDP sockets' error queues (ICMP fragmentation needed, packet too big, "
            "this host's EMSGSIZE) taken as a peer's path MTU, or refused (not for a peer's current "
            "endpoint, not its message, not lower, not a size error).",
            {"taken": "path_mtu_learned", "refused": "path_mtu_refused"},
        ),
    )
    served = c.served()
    for name, text, counters in by_result:
        yield _by_result(name, text, iface, {result: served.get(k, 0) for result, k in counters.items()})
    tun = CounterMetricFamily(
        "vpncrypt_tun_offload",
        "TUN offload counters (TSO/USO splits on reads, GRO coalescing on writes), by direction and counter.",
        labels=["interface", "direction", "counter"],
    )
    for direction, stats in (("rx", c.tun_rx), ("tx", c.tun_tx)):
        for k, v in sorted(stats.items()):
            tun.add_metric([iface, direction, k], v)
    yield tun
    info = InfoMetricFamily(
        "vpncrypt_crypto_kernels",
        "The ChaCha20 and Poly1305 kernels selected, and those the data path ran last.",
        labels=["interface"],
    )
    k = state["kernels"]
    info.add_metric(
        [iface],
        {
            "chacha20": k.get("chacha", ""),
            "poly1305": k.get("poly1305", ""),
            "data_chacha20": k.get("data_chacha", ""),
            "data_poly1305": k.get("data_poly1305", ""),
        },
    )
    yield info
    uapi_n = CounterMetricFamily(
        "vpncrypt_uapi_requests", "UAPI requests served, by operation.", labels=["interface", "operation"]
    )
    uapi_t = HistogramMetricFamily(
        "vpncrypt_uapi_request_duration_seconds",
        "Seconds from a UAPI request read to its answer sent.",
        labels=["interface", "operation"],
    )
    for op, h in sorted(state["uapi"].items()):
        if op not in ("get", "set") and not h["count"]:
            continue  # requests of no known operation: only once seen
        uapi_n.add_metric([iface, op], h["count"])
        uapi_t.add_metric([iface, op], list(h["buckets"].items()), h["sum"])
    yield uapi_n
    yield uapi_t
    yield from _name_families(state)


def _name_families(state: dict):
    """The peers' Endpoint names that the daemon follows (endpoint_names.py):
    their state as 1 for the one they are in (pending, resolved, failed),
    and the Unix times of their last resolution and next lookup (0: never /
    none wanted).  The `name` label is empty unless endpoints are served."""
    from prometheus_client.core import GaugeMetricFamily

    iface, rows = state["interface"], state.get("endpoint_names", ())
    labels = ["interface", "public_key", "name"]
    states = GaugeMetricFamily(
        "vpncrypt_peer_endpoint_name_state",
        "The peer's Endpoint host name: 1 for its state (pending, resolved, failed), else 0.",
        labels=[*labels, "state"],
    )
    resolved = GaugeMetricFamily(
        "vpncrypt_peer_endpoint_name_resolved_seconds",
        "Unix time the peer's Endpoint name was last resolved (0: never).",
        labels=labels,
    )
    next_try = GaugeMetricFamily(
        "vpncrypt_peer_endpoint_name_next_lookup_seconds",
        "Unix time of the next lookup of the peer's Endpoint name (0: none wanted or one under way).",
        labels=labels,
    )
    for r in rows:
        # the name says where the peer is, as its endpoint does: served only
        # with --metrics-endpoints (empty otherwise)
        v = [iface, _b64(r["public_key"]), r["name"] if state.get("endpoints") else ""]
        for s in ("pending", "resolved", "failed"):
            states.add_metric([*v, s], 1 if r["state"] == s else 0)
        resolved.add_metric(v, r["resolved"] or 0)
        next_try.add_metric(v, r["next_try"] or 0)
    yield states
    yield resolved
    yield next_try


def _by_result(name: str, text: str, iface: str, counts: dict) -> Any:
    """A counter of the interface with a `result` label, one sample per result."""
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(name, text, labels=["interface", "result"])
    for result, n in counts.items():
        family.add_metric([iface, result], n)
    return family


# The per-peer metrics: (type, name, help, label names after interface and
# public_key's order is taken into account, value).  Bytes and the latest
# handshake are served under the common exporters' names only.
_PEER_METRICS: tuple[tuple[str, str, str, str, Callable[[Any], Any]], ...] = (
    (
        "gauge",
        "vpncrypt_peer_info",
        "The peer's endpoint (empty unless --metrics-endpoints) and allowed IPs (comma-separated); always 1.",
        "info",
        lambda r: 1,
    ),
    (
        "counter",
        "vpncrypt_peer_received_packets",
        "Messages received from the peer (transport data and handshake).",
        "peer",
        lambda r: r.rx_packets,
    ),
    (
        "counter",
        "vpncrypt_peer_sent_packets",
        "Messages sent to the peer (transport data and handshake).",
        "peer",
        lambda r: r.tx_packets,
    ),
    (
        "counter",
        "vpncrypt_peer_keepalives_sent",
        "Keepalives sent to the peer.",
        "peer",
        lambda r: r.keepalives_sent,
    ),
    (
        "gauge",
        "vpncrypt_peer_path_mtu_bytes",
        "The path MTU learned for the peer's endpoint (outer IP datagram bytes); 0 while none is.",
        "peer",
        lambda r: r.path_mtu,
    ),
    (
        "gauge",
        "vpncrypt_peer_staged_packets",
        "Packets waiting for a handshake to complete.",
        "peer",
        lambda r: r.staged,
    ),
    (
        "histogram",
        "vpncrypt_peer_handshake_rtt_seconds",
        "Seconds from a handshake initiation sent to the response that completed it.",
        "peer",
        lambda r: r.handshake_rtt,
    ),
    (
        "counter",
        "wireguard_sent_bytes",
        "Bytes sent to the peer (whole datagrams, as wg show)",
        "compat",
        lambda r: r.tx_bytes,
    ),
    (
        "counter",
        "wireguard_received_bytes",
        "Bytes received from the peer (whole datagrams, as wg show)",
        "compat",
        lambda r: r.rx_bytes,
    ),
    (
        "gauge",
        "wireguard_latest_handshake_seconds",
        "Unix time of the latest handshake with the peer (0: none yet)",
        "compat",
        lambda r: int(r.latest_handshake),
    ),
)
_LABELS = {
    "peer": ["interface", "public_key"],
    "compat": ["interface", "public_key", "allowed_ips"],
    "info": ["interface", "public_key", "endpoint", "allowed_ips"],
}


def _peer_families(state: dict):
    """The per-peer families as prometheus_client's MetricFamily objects
    (the reference for _peer_lines)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    make = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
    iface, peers = state["interface"], state["peers"]
    for kind, name, doc, labels, value in _PEER_METRICS:
        family = make[kind](name, doc, labels=_LABELS[labels])
        for r in peers:
            v = [iface, _b64(r.public_key)]
            if labels == "info":
                v += [_endpoint(state, r), ",".join(r.allowed_ips)]
            elif labels == "compat":
                v.append(",".join(r.allowed_ips))
            x = value(r)
            if kind != "histogram":
                family.add_metric(v, x)
            elif x is not None:
                family.add_metric(v, x.cumulative(), x.total)
        yield family
        del family


def _endpoint(state: dict, row) -> str:
    """A peer's endpoint label: its address only if the operator asked for
    them (--metrics-endpoints)."""
    return (row.endpoint or "") if state.get("endpoints") else ""


def _esc(value: str) -> str:
    """A label value as both formats write it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


FLUSH = 4096  # sample lines joined into one chunk of bytes


class _Lines:
    """A per-peer family written directly: its head (HELP, TYPE) by the
    encoder from an empty family, its samples here, in the very form the
    encoders give them (labels sorted by name, values as floatToGoString:
    tests/metrics/test_collector.py compares the bytes).  Ten times faster
    than a Sample object per line: a scrape of 10,000 peers stays well
    under a second."""

    def __init__(self, head):
        self.head, self.chunks = head, []


def _peer_lines(state: dict):
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString as num

    make = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
    iface, peers = _esc(state["interface"]), state["peers"]
    keys = [_esc(_b64(r.public_key)) for r in peers]
    ips = [_esc(",".join(r.allowed_ips)) for r in peers]
    for kind, name, doc, labels, value in _PEER_METRICS:
        out = _Lines(make[kind](name, doc, labels=_LABELS[labels]))
        lines: list[str] = []
        add = lines.append

        def flush(out=out, lines=lines):
            out.chunks.append("".join(lines).encode())
            lines.clear()

        if kind == "histogram":
            for pk, r in zip(keys, peers):
                h = value(r)
                if h is None:
                    continue
                tail = f'public_key="{pk}"}} '
                for le, n in h.cumulative():
                    add(f'{name}_bucket{{interface="{iface}",le="{le}",{tail}{num(n)}\n')
                add(f'{name}_count{{interface="{iface}",{tail}{num(h.count)}\n')
                add(f'{name}_sum{{interface="{iface}",{tail}{num(h.total)}\n')
                if len(lines) >= FLUSH:
                    flush()
        else:
            sample = name + "_total" if kind == "counter" else name
            for i, (pk, r) in enumerate(zip(keys, peers)):
                if labels == "peer":
                    add(f'{sample}{{interface="{iface}",public_key="{pk}"}} {num(value(r))}\n')
                elif labels == "compat":
                    add(
                        f'{sample}{{allowed_ips="{ips[i]}",interface="{iface}",public_key="{pk}"}} '
                        f'{num(value(r))}\n'
                    )
                else:
                    add(
                        f'{sample}{{allowed_ips="{ips[i]}",endpoint="{_esc(_endpoint(state, r))}",'
                        f'interface="{iface}",public_key="{pk}"}} {num(value(r))}\n'
                    )
                if len(lines) >= FLUSH:
                    flush()
        flush()
        yield out
        del out, lines, add


class _One:
    """A registry for the encoders: one family."""

    def __init__(self, family):
        self.family = family

    def collect(self):
        return iter((self.family,))


_EOF = b"# EOF\n"


def choose(accept: str, fast: bool = True) -> tuple:
    """prometheus_client's encoder for the Accept header, and its content
    type.  Every name served here is a legacy one ([a-zA-Z_:][a-zA-Z0-9_:]*),
    so the "underscores" escaping changes nothing in it; with ``fast`` the
    OpenMetrics encoder is told so (it otherwise checks the name of every
    sample character by character: two thirds of a scrape's time), and the
    bytes are the same (tests/metrics/test_collector.py compares them)."""
    import functools
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.openmetrics import exposition as om

    encoder, content_type = choose_encoder(accept)
    keywords = getattr(encoder, "keywords", None) or {}
    if (
        fast
        and getattr(encoder, "func", None) is om.generate_latest
        and keywords.get("escaping") == getattr(om, "UNDERSCORES", None)
    ):
        encoder = functools.partial(om.generate_latest, **{**keywords, "escaping": om.ALLOWUTF8})
    return encoder, content_type


def render(state: dict, accept: str = "", fast: bool = True) -> tuple:
    """(body bytes, content type) for a scrape whose Accept header is
    ``accept`` (OpenMetrics if it asks for it, else the text format).  Each
    family is encoded by itself and freed before the next is made: no step
    holds the interpreter lock long.  Without ``fast``, every family goes
    through prometheus_client's encoders (the reference)."""
    encoder, content_type = choose(accept, fast)
    chunks = []
    for family in _families(state):
        chunks.append(_encoded(encoder, family))
        del family
    for family in _peer_lines(state) if fast else _peer_families(state):
        if isinstance(family, _Lines):
            chunks.append(_encoded(encoder, family.head))
            chunks.extend(family.chunks)
        else:
            chunks.append(_encoded(encoder, family))
        del family
    if "openmetrics" in content_type:
        chunks.append(_EOF)
    return b"".join(chunks), content_type


def render_and_free(box: list, accept: str = "") -> tuple:
    """render() of the one state in ``box``, which is then freed here, a
    slice of peers at a time (freed on the loop at once, 10,000 peers' rows
    would hold it for milliseconds)."""
    state = box.pop()
    try:
        return render(state, accept)
    finally:
        peers = state["peers"]
        while peers:
            del peers[-PART:]


def _encoded(encoder, family) -> bytes:
    chunk = encoder(_One(family))
    return chunk[: -len(_EOF)] if chunk.endswith(_EOF) else chunk  # OpenMetrics: one at the end


# --------------------------------------------------------------------------
# the HTTP server


class MetricsServer:
    def __init__(self, daemon, settings: MetricsSettings):
        self.daemon = daemon
        self.settings = settings
        self.host, self.port = settings.host, settings.port
        self._server: Optional[asyncio.AbstractServer] = None
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._unix: Optional[tuple] = None  # (path, (st_dev, st_ino)) of the socket made
        self._clients = 0
        self._tasks: set = set()  # the clients being served, cancelled at close
        self._lock = asyncio.Lock()  # one scrape at a time
        self._bcrypt_slot = asyncio.Lock()  # one bcrypt check at a time (webconfig.Verdicts)
        self.scrapes = 0
        web = settings.web
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in (web.headers if web else ()))

    @property
    def address(self) -> str:
        return MetricsSettings(host=self.host, port=self.port, unix_path=self.settings.unix_path).address

    async def start(self) -> "MetricsServer":
        s = self.settings
        tls = s.web.tls if s.web is not None else None
        if s.unix_path is not None:
            from .unixlisten import bind_unix_listener

            sock, ident = bind_unix_listener(s.unix_path, s.socket_mode, s.socket_gid)
            self._unix = (s.unix_path, ident)
            self._server = await asyncio.start_unix_server(
                self._client, sock=sock, ssl=tls, ssl_handshake_timeout=REQUEST_TIMEOUT if tls else None
            )
        else:
            self._server = await asyncio.start_server(
                self._client,
                self.host,
                self.port,
                reuse_address=True,
                ssl=tls,
                ssl_handshake_timeout=REQUEST_TIMEOUT if tls else None,
            )
            self.port = self._server.sockets[0].getsockname()[1]
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vpncrypt-metrics")
        what = [w for w, on in (("TLS", tls), ("basic auth", s.web and s.web.users)) if on]
        scheme = "https" if tls else "http"
        if s.unix_path:
            group = _group_name(s.socket_gid)
            where = f"unix:{s.unix_path} (mode {s.socket_mode:04o}, group {group}), path /metrics"
        else:
            where = f"{scheme}://{self.address}/metrics"
        log.info(
            "metrics on %s%s%s",
            where,
            f" with {' and '.join(what)}" if what else "",
            ", with the peers' endpoints" if s.endpoints else "",
        )
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()  # a client mid-request (or waiting for bcrypt) ends here
        if self._unix is not None:
            from .unixlisten import remove_unix_listener

            remove_unix_listener(*self._unix)
            self._unix = None
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _client(self, reader, writer) -> None:
        if self._clients >= MAX_CLIENTS:
            writer.close()
            return
        self._clients += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # the server closes: nothing to tell
        except (
            asyncio.TimeoutError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ):
            pass
        except Exception:  # noqa: BLE001 - a scrape never takes the daemon down
            log.exception("metrics: scrape failed")
        finally:
            self._clients -= 1
            self._tasks.discard(task)
            writer.close()

    async def _authorized(self, headers: dict) -> bool:
        """basic_auth_users' verdict: at once without credentials or when
        cached; else bcrypt's tens of milliseconds on a thread of the
        loop's (the loop serves the tunnel meanwhile), one check at a time:
        the others wait here, MAX_CLIENTS at most."""
        web = self.settings.web
        if web is None or web.users is None:
            return True
        authorization = headers.get("authorization")
        verdict = web.quick_verdict(authorization)
        if verdict is not None:
            return verdict
        async with self._bcrypt_slot:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, web.authorized, authorization)

    async def _serve(self, reader, writer) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
        if len(head) > MAX_HEAD:
            return await self._reply(writer, 431, b"request head too large\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return await self._reply(writer, 400, b"bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        if not await self._authorized(headers):
            return await self._reply(
                writer, 401, b"unauthorized\n", extra='WWW-Authenticate: Basic realm="vpncrypt"\r\n'
            )
        if target != "/metrics":
            return await self._reply(writer, 404, b"not found: the metrics are at /metrics\n")
        if method not in ("GET", "HEAD"):
            return await self._reply(writer, 405, b"method not allowed\n", extra="Allow: GET, HEAD\r\n")
        from .uapi import _cyclic_gc_paused, _short_switch_interval

        # one scrape at a time; meanwhile the cyclic collector waits (it
        # would traverse every peer of the device while holding the loop)
        # and the interpreter lock passes between the writer thread and the
        # loop at the short interval the UAPI uses for big requests
        async with self._lock:
            with _cyclic_gc_paused(True), _short_switch_interval(True):
                box = [await read_state(self.daemon, endpoints=self.settings.endpoints)]
                worker = self._worker
                if worker is None:
                    return
                body, ctype = await asyncio.get_running_loop().run_in_executor(
                    worker, render_and_free, box, headers.get("accept", "")
                )
            self.scrapes += 1
        await self._reply(writer, 200, body, ctype, head_only=method == "HEAD")

    async def _reply(
        self,
        writer,
        status: int,
        body: bytes,
        ctype: str = "text/plain; charset=utf-8",
        *,
        extra: str = "",
        head_only: bool = False,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            405: "Method Not Allowed",
            431: "Request Header Fields Too Large",
        }[status]
        writer.write(
            (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n{extra}{self._headers}Connection: close\r\n\r\n"
            ).encode()
        )
        if not head_only:
            writer.write(body)
        await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)


def _group_name(gid: Optional[int]) -> str:
    """The socket's group for the log: its name, else its number (None: the daemon's)."""
    import grp

    gid = os.getegid() if gid is None else gid
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


async def start_metrics_server(daemon, settings: MetricsSettings) -> MetricsServer:
    return await MetricsServer(daemon, settings).start()
