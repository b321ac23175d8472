"""What the metrics read of each peer: HandshakeStats, kept from the
Device's events (handshake round trips, failures, keepalives, the load
state: per event, never per packet), and MetricRow, one peer as a scrape
shows it (DataPlane.metric_rows reads them from the session table)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

from .histogram import RTT_BUCKETS, Histogram

if TYPE_CHECKING:
    from ..protocol.device import Device
    from ..protocol.events import Event


@dataclasses.dataclass(slots=True)
class MetricRow:
    """What a scrape shows of one peer (no key but its public one)."""

    public_key: bytes
    endpoint: Optional[str]
    allowed_ips: list[str]  # text
    latest_handshake: float  # Unix time; 0 = never
    rx_bytes: int  # as `wg show`: whole datagrams, handshakes included
    tx_bytes: int
    rx_packets: int  # transport data messages and handshake messages
    tx_packets: int
    staged: int  # packets waiting for a handshake
    keepalives_sent: int
    handshake_rtt: Optional[Histogram]  # a copy, or None before the first round trip
    path_mtu: int = 0  # the path MTU learned for its endpoint (0: none)


class HandshakeStats:
    """What the metrics read from the Device's events: the round trip of
    each handshake this side initiated (from the initiation sent, a retry's
    included, to the response that completed it), handshakes given up,
    keepalives sent, and whether the device is under load.  Kept only for
    the device's peers: a removed peer is forgotten."""

    def __init__(self, device: Optional[Device] = None) -> None:
        self.device = device
        self.started: dict[bytes, float] = {}  # public key -> when its last initiation went out (monotonic)
        self.rtt: dict[bytes, Histogram] = {}  # public key -> Histogram of round trips
        self.keepalives: dict[bytes, int] = {}  # public key -> keepalives sent
        self.failed = 0
        self.keepalives_total = 0
        self.under_load = False

    def events(self, events: Iterable[Event], now: float) -> None:
        from ..protocol import events as E

        for ev in events:
            if type(ev) is E.KeepaliveSent:
                pk = ev.peer.public_key
                self.keepalives[pk] = self.keepalives.get(pk, 0) + 1
                self.keepalives_total += 1
            elif type(ev) is E.HandshakeInitiated:
                self.started[ev.peer.public_key] = now
            elif type(ev) is E.HandshakeCompleted:
                t0 = self.started.pop(ev.peer.public_key, None)
                if ev.initiator and t0 is not None:
                    h = self.rtt.get(ev.peer.public_key)
                    if h is None:
                        h = self.rtt[ev.peer.public_key] = Histogram(RTT_BUCKETS)
                    h.observe(max(0.0, now - t0))
            elif type(ev) is E.HandshakeGaveUp:
                self.started.pop(ev.peer.public_key, None)
                self.failed += 1
            elif type(ev) is E.LoadChanged:
                self.under_load = bool(ev.under_load)
        self._prune()

    def forget(self, public_key: bytes) -> None:
        for d in (self.started, self.rtt, self.keepalives):
            d.pop(public_key, None)

    def _prune(self) -> None:
        dev = self.device
        if dev is None:
            return
        limit = 2 * len(dev.peers) + 64
        for name in ("started", "rtt", "keepalives"):
            d = getattr(self, name)
            if len(d) > limit:
                setattr(self, name, {k: v for k, v in d.items() if k in dev.peers})
