import os

import pytest

from tests.interop.lab import Lab, need


@pytest.fixture
def lab():
    """Two network namespaces joined by a veth pair (see lab.py); removed
    after the test, whatever happened."""
    assert os.geteuid() == 0, "the interop tests run as root"
    need("ping")
    need("wireguard-go")
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
