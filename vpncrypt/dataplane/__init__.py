"""Batch data-plane I/O on the native core: UDP (recvmmsg/sendmmsg, GRO/GSO) and TUN."""
from vpncrypt.dataplane.io import (
    EndpointCache,
    TunBatch,
    UdpBatchSocket,
    endpoint_from_addr,
    endpoint_to_addr,
    open_tun,
)

__all__ = ["EndpointCache", "TunBatch", "UdpBatchSocket", "endpoint_from_addr",
           "endpoint_to_addr", "open_tun"]
