"""A histogram's counts, kept without a metrics library: what the Prometheus
collector (metrics.py) reads at scrape time.  Observing is a bisect and two
additions; there is no lock (every observer runs on the event loop)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

# seconds: a handshake's round trip, from a LAN's to a satellite link's and
# the 5 s REKEY_TIMEOUT after which it is retried (few buckets: one histogram
# per peer); a UAPI request's
RTT_BUCKETS = (0.001, 0.0025, 0.01, 0.05, 0.25, 1.0, 5.0)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    __slots__ = ("bounds", "counts", "total", "count")

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """[(upper bound as text, observations <= it)], ending with "+Inf"."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.count))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"buckets": dict(self.cumulative()), "sum": self.total, "count": self.count}

    def snapshot(self) -> "Histogram":
        """A copy (cheap: for a scrape to read on the event loop, and turn
        into text elsewhere)."""
        h = Histogram.__new__(Histogram)
        h.bounds, h.counts, h.total, h.count = self.bounds, self.counts[:], self.total, self.count
        return h
