"""The protocol suite's fixtures (both crypto backends, a fake clock) for the
reliability tests that drive the sans-I/O core directly."""
from tests.protocol.conftest import clock, crypto  # noqa: F401 - fixtures
