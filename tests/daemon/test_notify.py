import os
import socket
import threading

import pytest

from vpncrypt.daemon import notify


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request, tmp_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        addr = str(tmp_path / "notify.sock")
        s.bind(addr)
        env_value = addr
    else:
        name = f"vpncrypt-test-{os.getpid()}-{id(s)}"
        s.bind("\0" + name)
        env_value = "@" + name
    s.settimeout(5)
    with s:
        yield s, {"NOTIFY_SOCKET": env_value}


def test_messages(notify_socket):
    sock, env = notify_socket
    assert notify.ready("serving wg0\n3 peers", env=env)
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving wg0 3 peers"
    assert notify.status("reloading", env=env)
    assert sock.recv(4096) == b"STATUS=reloading"
    assert notify.watchdog(env=env)
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notify.stopping(env=env)
    assert sock.recv(4096) == b"STOPPING=1"
    assert notify.reloading(env=env)
    msg = sock.recv(4096).decode()
    assert msg.startswith("RELOADING=1\nMONOTONIC_USEC=") and msg.split("=")[-1].isdigit()


def test_uses_environ(notify_socket, monkeypatch):
    sock, env = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", env["NOTIFY_SOCKET"])
    assert notify.ready()
    assert sock.recv(4096) == b"READY=1"


def test_no_socket_is_a_no_op(tmp_path):
    assert notify.ready(env={}) is False
    assert notify.watchdog(env={"NOTIFY_SOCKET": ""}) is False
    assert notify.watchdog(env={"NOTIFY_SOCKET": str(tmp_path / "missing")}) is False
    assert notify.watchdog(env={"NOTIFY_SOCKET": "vsock:2:1"}) is False


def test_watchdog_interval():
    assert notify.watchdog_interval({}) is None
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert (
        notify.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    )
    assert notify.watchdog_interval({"WATCHDOG_USEC": "junk"}) is None
    assert notify.watchdog_interval({"WATCHDOG_USEC": "0"}) is None


def test_a_receiver_that_stops_reading_never_blocks_the_daemon(tmp_path):
    """Once the receiver's queue is full, messages are dropped at once: a
    blocking send would stall the daemon's event loop (and the tunnel)."""
    path = str(tmp_path / "full.sock")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(path)
    try:
        env = {"NOTIFY_SOCKET": path}
        results = []

        def send_many():
            for i in range(5000):  # far more than a datagram queue holds
                results.append(notify.status(f"round {i}", env=env))

        sender = threading.Thread(target=send_many, daemon=True)
        sender.start()
        sender.join(10)
        assert not sender.is_alive(), f"notify blocked after {len(results)} messages"
        assert results[0] is True
        assert results[-1] is False, "the queue never filled: the test proves nothing"
        # the receiver still gets the messages that fitted, in order
        assert rx.recv(4096) == b"STATUS=round 0"
    finally:
        rx.close()
