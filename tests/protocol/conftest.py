"""Fixtures for the protocol tests: both crypto backends and a fake clock."""

import pytest

from vpncrypt.crypto import get_backend
from tests.protocol.helpers import Clock


@pytest.fixture(params=["native", "pynacl"])
def crypto(request):
    return get_backend(request.param)


@pytest.fixture
def clock():
    return Clock()
