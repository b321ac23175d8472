"""vpncrypt.protocol: the WireGuard protocol core.

Modules: keys (X25519, wg-compatible base64 keys), noise (HASH/MAC/HMAC/KDF,
constants, SymmetricState), noise_ik (Noise IKpsk2 and WireGuard's framing),
messages (wire formats), cookie (the sending side of mac1/mac2, and the
cookies peers send us; the receiving side, the cookie secret, the per-source
rate limiter and the load state are the session table's: vpncrypt.transport,
native/wg_admit.c), timers (constants, ProtocolConfig, the timer table),
events (Output and events), peer, counters, and the Device (device) with its
parts: handshakes, handshake_work and responder_native (an initiation
answered in a compute phase and an apply phase), sessions (lifecycle in the
session table, vpncrypt.transport) and datapath.

The Device is sans-I/O: it opens no socket and reads no clock (every call
takes ``now``).  Its data-path object, datapath.BatchPath, is the exception
by design: the data plane hands it the UDP and TUN descriptors, and each of
its rounds does their I/O and the table's work in one call into C.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vpncrypt.protocol.device import Device, Output
    from vpncrypt.protocol.keys import genkey, genpsk, pubkey
    from vpncrypt.protocol.timers import ProtocolConfig

__all__ = ["Device", "Output", "ProtocolConfig", "genkey", "genpsk", "pubkey"]

# The names above, imported when first asked for: `vpncrypt show` needs
# keys.pubkey alone, and importing the Device with it took 0.2 s of every
# show (issue 31 compares its time with `wg show`'s).
_WHERE = {
    "Device": "device",
    "Output": "device",
    "ProtocolConfig": "timers",
    "genkey": "keys",
    "genpsk": "keys",
    "pubkey": "keys",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
