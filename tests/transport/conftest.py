"""Fixtures for the session table tests: every test that takes `backend` runs
on both tables, native and pynacl (the pure-Python reference)."""

import pytest

from vpncrypt.transport import backends


@pytest.fixture(params=backends())
def backend(request):
    return request.param
