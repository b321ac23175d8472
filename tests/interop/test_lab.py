"""The one namespace lab (vpncrypt.bench.nslab, which tests/interop/lab.py
extends): close() removes everything it made, also a process still running
in one of its namespaces that it did not start itself, and a second close()
is harmless."""

import os
import subprocess
import time

from tests.interop.lab import Lab
from vpncrypt.bench import nslab


def _namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_close_ends_a_stray_process_and_removes_namespaces_and_veths():
    lab = Lab()
    try:
        assert isinstance(lab, nslab.Lab)
        ns = list(lab.ns.values())
        assert all(n in _namespaces() for n in ns)
        # a process in namespace B that the lab knows nothing about (as a
        # test's helper that outlived its Popen would be)
        stray = subprocess.Popen(["ip", "netns", "exec", lab.ns["B"], "sleep", "300"], start_new_session=True)
        started = lab.spawn("sleeper", "A", ["sleep", "300"])
        lab.run_in("A", "ping", "-c", "1", "-W", "2", lab.outer["B"])
        tmp = lab.tmp
    finally:
        lab.close()
    deadline = time.monotonic() + 10
    while (_alive(stray.pid) or _alive(started.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
        stray.poll()
    assert not _alive(stray.pid), "a process in the lab's namespace survived close()"
    assert not _alive(started.pid)
    assert not any(n in _namespaces() for n in ns)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert lab.id not in links
    assert not os.path.exists(tmp)
    lab.close()  # twice: nothing to do, no error


def test_a_failing_command_names_itself():
    lab = Lab()
    try:
        try:
            lab.run_in("A", "ip", "link", "show", "nosuchdev0")
        except nslab.BenchError as e:
            assert "nosuchdev0" in str(e) and "failed" in str(e)
        else:
            raise AssertionError("a failing command did not raise")
    finally:
        lab.close()
