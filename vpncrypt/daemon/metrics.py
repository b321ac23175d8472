"""Prometheus metrics of the running daemon (`vpncrypt up --metrics ADDR:PORT`).

An HTTP server on the daemon's event loop answers ``GET /metrics`` in the
Prometheus text format, or in OpenMetrics when the scraper asks for it
(prometheus_client's own encoders, chosen by the Accept header).  A scrape
reads the counters the session table and the Device already keep, at scrape
time: nothing is counted per packet for it.  The peers are read on the loop
in parts (the loop serves the sockets between them); the text is written
from that copy on a thread of its own.

No key material but public keys is ever served.  Off by default; an
address other than loopback is refused unless allow_remote is given
(`--metrics-allow-remote`).

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
import ipaddress
import logging
from typing import Optional

log = logging.getLogger("vpncrypt.daemon")

DEFAULT_PORT = 9586           # what prometheus_wireguard_exporter listens on
MAX_CLIENTS = 8               # scrapers served at a time; more are closed at once
REQUEST_TIMEOUT = 5.0         # seconds to send a whole request head
MAX_HEAD = 8192               # bytes of request line and headers
PART = 256                    # peers read per turn of the loop


class MetricsAddressError(ValueError):
    """--metrics ADDR:PORT that cannot be served (one line for the user)."""


def parse_address(text: str, allow_remote: bool = False) -> tuple:
    """``ADDR:PORT`` (``[v6]:PORT``; ``localhost`` is 127.0.0.1) as (host,
    port).  A non-loopback address needs allow_remote."""
    value = text.strip()
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
            "and endpoint, so serving them to other hosts needs --metrics-allow-remote")
    return str(addr), int(port)


def _b64(key: bytes) -> str:
    return base64.b64encode(bytes(key)).decode()


# --------------------------------------------------------------------------
# what a scrape reads (on the loop), and the families made from it (anywhere)

async def read_state(daemon, part: int = PART) -> dict:
    """The daemon's state for one scrape: plain data, read on the loop, the
    peers ``part`` at a time with the loop let run between parts."""
    dp = daemon.dataplane
    from .adapter import kernels
    state = {
        "interface": daemon.interface,
        "listen_port": daemon.listen_port,
        "public_key": _b64(dp.device.public_key) if dp.device.public_key else None,
        "counters": daemon.counters(peer_drops=False),
        "kernels": kernels(dp.engine),
        "uapi": {k: h.as_dict() for k, h in daemon.uapi.latency.items()}
        if daemon.uapi is not None else {},
        "peers": [],
    }
    peers = state["peers"]
    for rows in dp.metric_rows(part, drops=state["counters"]):
        peers.extend(rows)
        await asyncio.sleep(0)
    return state


def _families(state: dict):
    """The families of one scrape, made one at a time (each is freed once
    written: freeing them all at once would hold the interpreter lock, and
    so the loop, for tens of milliseconds at 10,000 peers)."""
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily, InfoMetricFamily)
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
    yield counter("vpncrypt_handshakes_initiated", "Handshake initiations sent (retries included).",
            c.get("handshakes_sent", 0))
    yield counter("vpncrypt_handshakes_completed", "Handshakes completed (as initiator or responder).",
            c.get("handshakes_completed", 0))
    yield counter("vpncrypt_handshakes_failed",
            "Handshakes given up after REKEY_ATTEMPT_TIME without a response.",
            c.get("handshakes_failed", 0))
    yield counter("vpncrypt_cookie_replies_sent",
            "Cookie replies sent to handshake messages that came without a valid mac2 under load.",
            c.get("drop_cookie_sent", 0))
    yield gauge("vpncrypt_under_load",
          "1 while the device is under load (handshake messages need a cookie), else 0.",
          c.get("under_load", 0))
    yield counter("vpncrypt_keepalives_sent", "Keepalives sent (passive and persistent).",
            c.get("keepalives_sent", 0))
    yield gauge("vpncrypt_open_fds", "File descriptors the daemon has open.", c.get("open_fds", -1))
    drops = CounterMetricFamily("vpncrypt_drops", "Messages and packets dropped, by reason.",
                                labels=["interface", "reason"])
    for k, v in sorted(c.items()):
        if k.startswith("drop_") and k != "drop_cookie_sent":
            drops.add_metric([iface, k[5:]], v)
    yield drops
    batches = CounterMetricFamily("vpncrypt_dataplane_batches",
                                  "Batches the data plane moved, by direction.",
                                  labels=["interface", "direction"])
    batches.add_metric([iface, "rx"], c.get("engine_rx_batches", 0))
    batches.add_metric([iface, "tx"], c.get("engine_tx_batches", 0))
    yield batches
    errors = CounterMetricFamily("vpncrypt_dataplane_errors",
                                 "Send and write failures the data plane saw, by kind.",
                                 labels=["interface", "kind"])
    for k in ("tx_send_errors", "tx_dropped", "inner_write_errors", "inner_dropped"):
        errors.add_metric([iface, k], c.get("engine_" + k, 0))
    yield errors
    tun = CounterMetricFamily("vpncrypt_tun_offload",
                              "TUN offload counters (TSO/USO splits on reads, GRO coalescing "
                              "on writes), by direction and counter.",
                              labels=["interface", "direction", "counter"])
    for k, v in sorted(c.items()):
        if k.startswith("tun_rx_") or k.startswith("tun_tx_"):
            tun.add_metric([iface, k[4:6], k[7:]], v)
    yield tun
    info = InfoMetricFamily("vpncrypt_crypto_kernels",
                            "The ChaCha20 and Poly1305 kernels selected, and those the data "
                            "path ran last.", labels=["interface"])
    k = state["kernels"]
    info.add_metric([iface], {"chacha20": k.get("chacha", ""), "poly1305": k.get("poly1305", ""),
                              "data_chacha20": k.get("data_chacha", ""),
                              "data_poly1305": k.get("data_poly1305", "")})
    yield info
    uapi_n = CounterMetricFamily("vpncrypt_uapi_requests", "UAPI requests served, by operation.",
                                 labels=["interface", "operation"])
    uapi_t = HistogramMetricFamily("vpncrypt_uapi_request_duration_seconds",
                                   "Seconds from a UAPI request read to its answer sent.",
                                   labels=["interface", "operation"])
    for op, h in sorted(state["uapi"].items()):
        if op not in ("get", "set") and not h["count"]:
            continue                        # requests of no known operation: only once seen
        uapi_n.add_metric([iface, op], h["count"])
        uapi_t.add_metric([iface, op], list(h["buckets"].items()), h["sum"])
    yield uapi_n
    yield uapi_t

    # ---- the peers: bytes and the latest handshake under the common exporters' names
    peers = state["peers"]
    keys = [_b64(r.public_key) for r in peers]
    lab = ["interface", "public_key"]

    def per_peer(family, value):
        for pk, r in zip(keys, peers):
            family.add_metric([iface, pk], value(r))
        return family

    f = GaugeMetricFamily("vpncrypt_peer_info",
                          "The peer's endpoint and allowed IPs (comma-separated); always 1.",
                          labels=lab + ["endpoint", "allowed_ips"])
    for pk, r in zip(keys, peers):
        f.add_metric([iface, pk, r.endpoint or "", ",".join(r.allowed_ips)], 1)
    yield f
    yield per_peer(CounterMetricFamily(
        "vpncrypt_peer_received_packets",
        "Messages received from the peer (transport data and handshake).", labels=lab),
        lambda r: r.rx_packets)
    yield per_peer(CounterMetricFamily(
        "vpncrypt_peer_sent_packets",
        "Messages sent to the peer (transport data and handshake).", labels=lab),
        lambda r: r.tx_packets)
    yield per_peer(CounterMetricFamily(
        "vpncrypt_peer_keepalives_sent", "Keepalives sent to the peer.", labels=lab),
        lambda r: r.keepalives_sent)
    yield per_peer(GaugeMetricFamily(
        "vpncrypt_peer_staged_packets", "Packets waiting for a handshake to complete.",
        labels=lab), lambda r: r.staged)
    f = HistogramMetricFamily("vpncrypt_peer_handshake_rtt_seconds",
                              "Seconds from a handshake initiation sent to the response that "
                              "completed it.", labels=lab)
    for pk, r in zip(keys, peers):
        if r.handshake_rtt is not None:
            h = r.handshake_rtt
            f.add_metric([iface, pk], list(h["buckets"].items()), h["sum"])
    yield f
    compat = ["interface", "public_key", "allowed_ips"]
    ips = [",".join(r.allowed_ips) for r in peers]
    for make, value in (
            (lambda: CounterMetricFamily("wireguard_sent_bytes",
                                         "Bytes sent to the peer (whole datagrams, as wg show)",
                                         labels=compat), lambda r: r.tx_bytes),
            (lambda: CounterMetricFamily("wireguard_received_bytes",
                                         "Bytes received from the peer (whole datagrams, as "
                                         "wg show)", labels=compat), lambda r: r.rx_bytes),
            (lambda: GaugeMetricFamily("wireguard_latest_handshake_seconds",
                                       "Unix time of the latest handshake with the peer (0: "
                                       "none yet)", labels=compat),
             lambda r: int(r.latest_handshake))):
        family = make()
        for pk, a, r in zip(keys, ips, peers):
            family.add_metric([iface, pk, a], value(r))
        yield family
        del family


class _One:
    """A registry for the encoders: one family."""

    def __init__(self, family):
        self.family = family

    def collect(self):
        return iter((self.family,))


_EOF = b"# EOF\n"


def render(state: dict, accept: str = "") -> tuple:
    """(body bytes, content type) for a scrape whose Accept header is
    ``accept`` (OpenMetrics if it asks for it, else the text format).  Each
    family is encoded by itself (prometheus_client's encoders) and freed
    before the next is made: no step holds the interpreter lock long."""
    from prometheus_client.exposition import choose_encoder
    encoder, content_type = choose_encoder(accept)
    chunks = []
    for family in _families(state):
        chunk = encoder(_One(family))
        if chunk.endswith(_EOF):                 # OpenMetrics: one "# EOF" at the end
            chunk = chunk[:-len(_EOF)]
        chunks.append(chunk)
        del family, chunk
    if "openmetrics" in content_type:
        chunks.append(_EOF)
    return b"".join(chunks), content_type


# --------------------------------------------------------------------------
# the HTTP server

class MetricsServer:
    def __init__(self, daemon, host: str, port: int):
        self.daemon = daemon
        self.host, self.port = host, port
        self._server: Optional[asyncio.AbstractServer] = None
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._clients = 0
        self._lock: Optional[asyncio.Lock] = None
        self.scrapes = 0

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self) -> "MetricsServer":
        self._lock = asyncio.Lock()
        self._server = await asyncio.start_server(self._client, self.host, self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="vpncrypt-metrics")
        log.info("metrics on http://%s/metrics", self.address)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _client(self, reader, writer) -> None:
        if self._clients >= MAX_CLIENTS:
            writer.close()
            return
        self._clients += 1
        try:
            await self._serve(reader, writer)
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            pass
        except Exception:             # noqa: BLE001 - a scrape never takes the daemon down
            log.exception("metrics: scrape failed")
        finally:
            self._clients -= 1
            writer.close()

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
                state = await read_state(self.daemon)
                worker = self._worker
                if worker is None:
                    return
                body, ctype = await asyncio.get_running_loop().run_in_executor(
                    worker, render, state, headers.get("accept", ""))
                del state
            self.scrapes += 1
        await self._reply(writer, 200, body, ctype, head_only=method == "HEAD")

    @staticmethod
    async def _reply(writer, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
                     *, extra: str = "", head_only: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}[status]
        writer.write((f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                      f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n").encode())
        if not head_only:
            writer.write(body)
        await asyncio.wait_for(writer.drain(), REQUEST_TIMEOUT)


async def start_metrics_server(daemon, host: str, port: int) -> MetricsServer:
    return await MetricsServer(daemon, host, port).start()

