"""tests/arm64: run by tests/arm64/run.sh under qemu-aarch64; on any other machine
there is nothing to collect here (the host suite covers the host kernels)."""

import platform

if platform.machine() != "aarch64":
    collect_ignore_glob = ["test_*.py"]
