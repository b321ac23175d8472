"""A tunnel's end leaves nothing: no process (the tunnel's, its host-side
helper), no namespace, no file (its UAPI socket), whether the program closes
it, exits without closing it, or is killed with SIGKILL."""

import os
import signal

import pytest

from tests.proxy.test_lifecycle import children, ended, holders, ns_inode, wait_for
from tests.userspace.conftest import Program


@pytest.mark.parametrize("how", ["close", "exit", "kill"])
def test_the_end_leaves_nothing(lab, conf, how):
    program = Program(lab, "hold", conf)
    up = program.line()
    pid, name = up["pid"], up["name"]
    assert name == f"py{pid}"
    sock = os.path.join(program.rundir, "vpncrypt", f"{name}.sock")
    assert os.path.exists(sock)
    assert ns_inode(pid, "user") != ns_inode(os.getpid(), "user")
    netns = ns_inode(pid, "net")
    assert netns != ns_inode(program.popen.pid, "net")  # the program stayed on its own network
    helpers = children(pid)
    assert len(helpers) == 1, helpers  # the host-side helper, forked before the unshare

    if how == "kill":
        program.popen.send_signal(signal.SIGKILL)
        program.popen.wait(30)
    else:
        program.tell(how)
        if how == "close":
            assert program.line() == {"closed": True}
        program.finish()
    wait_for("the tunnel's process's end", lambda: ended(pid))
    wait_for("the helper's end", lambda: ended(helpers[0]))
    assert holders(netns) == []  # nothing holds the namespace (its veth pair went with it)
    wait_for("the UAPI socket's removal", lambda: not os.path.exists(sock))
    assert os.listdir(os.path.dirname(sock)) == []


def test_the_tunnels_process_killed(lab, conf):
    """SIGKILL to the tunnel's process: its helper goes with it, and the
    program's next call raises TunnelClosed (a ConnectionError) at once, its
    close returns; only the UAPI socket file is left (as `vpncrypt proxy`
    leaves it on SIGKILL, cleared by the next start of that name)."""
    program = Program(lab, "hold", conf)
    pid = program.line()["pid"]
    helpers = children(pid)
    os.kill(pid, signal.SIGKILL)
    wait_for("the helper's end", lambda: ended(helpers[0]))
    program.tell("use")
    error = program.line()["error"]
    assert error["type"] == "TunnelClosed", error
    assert program.line() == {"closed": True}
    program.finish()
    assert ended(pid)
