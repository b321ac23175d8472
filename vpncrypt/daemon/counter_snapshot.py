"""CounterSnapshot: one reading of an interface's counters, a field per
source (DataPlane.counters makes it; the metrics read its fields), and the
names they are served under: served() gives every counter by the name
`get=vpncrypt` lists (vpncrypt_NAME=N), `vpncrypt show` prints and
docs/metrics.md documents; served_drops() reads the drops back from such a
listing (the UAPI's client, `vpncrypt show`).  A source's prefix is
written here and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..drop_reasons import DropReason

_DROP = "drop_"


@dataclass
class CounterSnapshot:
    # every reason the interface counts, 0 or more, each summed over the
    # layers that count it (DataPlane.drops): served as drop_REASON
    drops: dict[DropReason, int] = field(default_factory=dict)
    # the engine's (EngineCounters.as_dict()), empty before it starts: engine_NAME
    engine: dict[str, int] = field(default_factory=dict)
    # the TUN offloads' reads (the send direction) and writes (vc_tun_rx_stats,
    # vc_tun_tx_stats), empty without a virtio-net header: tun_rx_NAME, tun_tx_NAME
    tun_rx: dict[str, int] = field(default_factory=dict)
    tun_tx: dict[str, int] = field(default_factory=dict)
    # (packets received, packets sent) of each queue, with two queues or more:
    # queues, queue_K_rx_packets, queue_K_tx_packets
    queues: list[tuple[int, int]] = field(default_factory=list)
    # packets the send rounds' fair queues took in (None without --fair-queue)
    fair_queue_packets: int | None = None
    # the device's own (handshakes_sent ... open_fds), under their own names
    device: dict[str, int] = field(default_factory=dict)

    def served(self) -> dict[str, int]:
        """Every counter by its served name."""
        out = {_DROP + reason.value: n for reason, n in self.drops.items()}
        for prefix, part in (("engine_", self.engine), ("tun_rx_", self.tun_rx), ("tun_tx_", self.tun_tx)):
            out.update({prefix + name: n for name, n in part.items()})
        if self.queues:
            out["queues"] = len(self.queues)
            for k, (rx, tx) in enumerate(self.queues):
                out[f"queue_{k}_rx_packets"] = rx
                out[f"queue_{k}_tx_packets"] = tx
        if self.fair_queue_packets is not None:
            out["fair_queue_packets"] = self.fair_queue_packets
        out.update(self.device)
        return out


def served_drops(counters: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Counters by their served names (a daemon's get=vpncrypt, which may be
    of another version than this one) as (drops by reason name, the rest)."""
    drops = {name[len(_DROP) :]: n for name, n in counters.items() if name.startswith(_DROP)}
    return drops, {name: n for name, n in counters.items() if not name.startswith(_DROP)}
