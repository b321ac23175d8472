"""The private keys the example configs once published are refused
wherever a private key comes in: the config file and the UAPI's set
(`wg set IFACE private-key FILE`), and so is any other spelling of them
that X25519 takes for the same key (clamping ignores bits 0-2 of the
first byte and bit 7 of the last, and sets bit 6 of the last)."""

import base64

import pytest

from tests.daemon.fakes import stub_host
from vpncrypt.config import ConfigError, parse_config
from vpncrypt.daemon.device_control import DeviceControl
from vpncrypt.daemon.uapi import handle_request
from vpncrypt.protocol import keys

PUBLISHED = [
    base64.b64decode("8GIQxST+0XtOtOJknYACVFNJonZVkRsic1xgmkVP4Xg="),  # wg0.conf.example, 0.1.0
    base64.b64decode("aIkfaj9R5mxQ1XR/7Xh17bHAyEOcKQOwSj9Vp6sIYVQ="),  # client.conf.example, 0.1.0
]
PRIV = bytes(range(1, 33))


def _unclamped(key: bytes) -> bytes:
    """Another private key X25519 takes for `key`: the bits clamping sets
    or clears flipped."""
    raw = bytearray(key)
    raw[0] ^= 0x07
    raw[31] ^= 0x80
    raw[31] &= 0xBF  # bit 6: clamping sets it again
    return bytes(raw)


def _variants():
    for key in PUBLISHED:
        yield key
        other = _unclamped(key)
        assert other != key and keys.public_from_private(other) == keys.public_from_private(key)
        yield other


@pytest.mark.parametrize(
    "key", list(_variants()), ids=["server", "server-unclamped", "laptop", "laptop-unclamped"]
)
def test_config_refuses_published_private_keys(key):
    text = f"[Interface]\nPrivateKey = {base64.b64encode(key).decode()}\n"
    with pytest.raises(ConfigError) as e:
        parse_config(text, "/etc/x.conf")
    message = str(e.value)
    assert message.startswith("/etc/x.conf:2: [Interface] PrivateKey: a key from vpncrypt's example configs")
    assert base64.b64encode(key).decode() not in message and key.hex() not in message


@pytest.mark.parametrize(
    "key", list(_variants()), ids=["server", "server-unclamped", "laptop", "laptop-unclamped"]
)
def test_uapi_set_refuses_published_private_keys(key, caplog):
    with stub_host(PRIV) as host:
        control = DeviceControl(host)
        before = bytes(host.device.private_key)
        # with another change in the same request: nothing of it is applied
        body = f"private_key={key.hex()}\nlisten_port=0\n"
        assert handle_request("set=1", body, control) == b"errno=-22\n\n"
        assert bytes(host.device.private_key) == before
    assert key.hex() not in caplog.text and base64.b64encode(key).decode() not in caplog.text


def test_uapi_set_takes_other_keys_and_the_zero_key():
    with stub_host(PRIV) as host:
        control = DeviceControl(host)
        fresh = keys.generate_private()
        assert handle_request("set=1", f"private_key={fresh.hex()}\n", control) == b"errno=0\n\n"
        assert bytes(host.device.private_key) == fresh
        assert handle_request("set=1", f"private_key={bytes(32).hex()}\n", control) == b"errno=0\n\n"
