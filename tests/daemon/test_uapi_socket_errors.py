"""A UAPI socket that cannot be made says which file it was (the daemon's
`cannot start IFACE: PATH: reason` line names it)."""

import errno
import os
import subprocess

import pytest

from tests.daemon.fakes import FakeControl
from vpncrypt.daemon.daemon import describe
from vpncrypt.daemon.uapi import start_uapi_server


def test_a_socket_that_cannot_be_made_is_named(loop_thread, tmp_path):
    assert os.geteuid() == 0, "this test needs root to mount a full tmpfs"
    d = tmp_path / "full"
    d.mkdir()
    # a tmpfs with one inode, taken by its root directory: no room for the socket
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=1,mode=700", "none", str(d)], check=True
    )
    try:
        path = str(d / "wg9.sock")
        with pytest.raises(OSError) as ei:
            loop_thread.run(start_uapi_server(path, FakeControl()))
        assert ei.value.errno == errno.ENOSPC
        assert describe(ei.value) == f"{path}: No space left on device"
        assert not os.path.exists(path)
    finally:
        subprocess.run(["umount", str(d)], check=True)
