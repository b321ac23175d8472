"""The data plane: batch UDP (recvmmsg/sendmmsg, GRO/GSO) and TUN (TSO/USO split,
GRO coalescing) I/O on the native core, and the engine that moves batches between
them, the session table and the protocol Device."""

from vpncrypt.dataplane.io import (
    EndpointCache,
    TunBatch,
    UdpBatchSocket,
    endpoint_from_addr,
    endpoint_to_addr,
    open_tun,
)

__all__ = [
    "EndpointCache",
    "TunBatch",
    "UdpBatchSocket",
    "endpoint_from_addr",
    "endpoint_to_addr",
    "open_tun",
]
