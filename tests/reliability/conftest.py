"""Fixtures for the reliability tests: the protocol suite's (both crypto
backends, a fake clock) for the tests that drive the sans-I/O core directly,
and `lab` for those that run real daemons in network namespaces."""

import os

import pytest

from tests.interop.lab import Lab, need
from tests.protocol.conftest import clock, crypto  # noqa: F401 - fixtures


@pytest.fixture
def lab():
    """Two namespaces joined by a veth pair (tests/interop/lab.py), removed
    afterwards with everything started in them.  Tests never skip: a missing
    tool is a failure."""
    assert os.geteuid() == 0, "these tests run as root (namespaces, TUN, setuid)"
    for tool in ("ip", "ping", "tc", "wg", "wireguard-go"):
        need(tool)
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
