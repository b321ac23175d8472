import asyncio
import os
import secrets
import shutil
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
