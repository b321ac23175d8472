"""vpncrypt: a WireGuard-compatible userspace VPN daemon with a native ChaCha20-Poly1305 core."""

__version__ = "0.1.0"
