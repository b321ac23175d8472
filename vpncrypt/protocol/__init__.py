"""vpncrypt.protocol: the WireGuard protocol core, sans-I/O.

Modules: keys (X25519, wg-compatible base64 keys), noise (HASH/MAC/HMAC/KDF,
constants, SymmetricState), messages (wire formats), handshake (Noise IKpsk2 +
WireGuard framing), cookie (mac1/mac2, cookie replies, rate limiter, load),
timers (constants, ProtocolConfig, the timer table), events (Output and events),
peer, counters, and the Device (device) with its parts: handshakes, sessions
(lifecycle in the session table, vpncrypt.transport) and datapath.
"""

from vpncrypt.protocol.device import Device, Output
from vpncrypt.protocol.keys import genkey, genpsk, pubkey
from vpncrypt.protocol.timers import ProtocolConfig

__all__ = ["Device", "Output", "ProtocolConfig", "genkey", "genpsk", "pubkey"]
