"""Errors raised by vpncrypt.crypto."""


class AuthenticationError(ValueError):
    """A sealed message failed to authenticate (bad tag, key, nonce or AAD)."""


class CounterOverflowError(OverflowError):
    """The message would wrap ChaCha20's 32-bit block counter."""
