"""Handshake message and drop counters, per peer and per device (transport
data is counted by the session table)."""

from typing import Any

# Handshake-side reasons (the session table counts transport data's own).
DROP_REASONS = (
    "bad_mac1",
    "bad_tag",
    "replay",
    "unknown_index",
    "unknown_peer",
    "malformed",
    "rate_limited",
    "queue_full",
    "handshake_queue_full",
    "staged_flushed",  # waited for a handshake that did not come (given up, keys zeroed)
    "no_endpoint",
    "cookie_sent",
    "internal_error",
)


class Counters:
    __slots__ = (
        "rx_bytes",
        "rx_packets",
        "tx_bytes",
        "tx_packets",
        "handshakes_sent",
        "handshakes_completed",
        "last_handshake",
        "drops",
    )

    def __init__(self) -> None:
        self.rx_bytes = 0
        self.rx_packets = 0
        self.tx_bytes = 0
        self.tx_packets = 0
        self.handshakes_sent = 0
        self.handshakes_completed = 0
        self.last_handshake = 0.0  # wall clock of the last completed handshake
        self.drops: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)

    def drop(self, reason: str, n: int = 1) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + n

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__slots__ if k != "drops"}
        d["drops"] = dict(self.drops)
        return d

    def __repr__(self) -> str:
        return f"<Counters rx={self.rx_packets}/{self.rx_bytes}B tx={self.tx_packets}/{self.tx_bytes}B>"
