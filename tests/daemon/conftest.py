import asyncio
import os
import secrets
import shutil
import subprocess
import threading

import pytest

from tests.daemon.fakes import FakeControl


class LoopThread:
    """An asyncio loop running in a background thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def loop_thread():
    lt = LoopThread()
    try:
        yield lt
    finally:
        lt.stop()


@pytest.fixture
def wg_server(loop_thread):
    """A UAPI server on /var/run/wireguard/<random>.sock (where `wg` looks)
    with a FakeControl. Yields (interface name, control, server)."""
    assert os.geteuid() == 0, "the UAPI tests need root to create /var/run/wireguard"
    from vpncrypt.daemon.uapi import socket_path, start_uapi_server

    name = "vct" + secrets.token_hex(4)
    path = socket_path(name)
    control = FakeControl()
    server = loop_thread.run(start_uapi_server(path, control))
    try:
        yield name, control, server
    finally:

        async def stop():
            server.close()
            await server.wait_closed()

        try:
            loop_thread.run(stop())
        finally:
            if os.path.exists(path):
                os.unlink(path)


@pytest.fixture
def wg_tool():
    exe = shutil.which("wg")
    assert exe, "wg (wireguard-tools) is not installed (tests/run.sh installs it)"
    return exe


@pytest.fixture
def netns():
    """A network namespace of its own for a TUN test (removed after it)."""
    # Tests never skip: without root, iproute2 or /dev/net/tun this is a failure.
    assert os.geteuid() == 0, "the TUN tests need root (tests/run.sh runs them as root in CI)"
    assert shutil.which("ip"), "iproute2 is not installed (tests/run.sh installs it)"
    assert os.path.exists("/dev/net/tun"), "no /dev/net/tun on this machine"
    name = "vpncrypt-test-" + secrets.token_hex(4)
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    assert r.returncode == 0, f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
