"""The host suite on two pytest-xdist workers (tests/run.sh: `-n 2 --dist
loadfile`, a file's tests on one worker), and the tests that must have the
machine to themselves.

Most of the host suite waits: on daemons coming up, handshakes, timers, pings
in network namespaces.  Run one test at a time, CI used 42% of its two cores
(20 min 17 s of CPU in 24 min 26 s), so two workers share the machine well.
A few tests are different: they load every core on purpose (floods, the
benches, the long runs at a fixed rate) or judge what they measured against a
bound (a loss within a margin of a control, a handshake within the protocol's
timers).  Those run ALONE: while one runs, the other worker waits before its
next test, and such a test waits for the other worker's current test to end.

The lock is a readers-writer lock on a file shared by the session's workers
(fcntl.flock: LOCK_SH for a test that shares, LOCK_EX for one that runs alone),
with a turnstile before it so that a waiting exclusive test is not starved by
the other worker taking shared locks back to back; the controller makes the
files' directory and removes it at the end.  Outside xdist (a plain `pytest`)
there is nothing to share, and no lock is taken.
"""

import fcntl
import os
import shutil
import tempfile

import pytest

# The tests that run alone, by path (relative to the repository) or path::name
# prefix, and why.  The rest of their files shares the machine (argument errors,
# parsing, a clean-up after an interrupt: nothing that load changes).
ALONE = (
    # the benches that drive every core (iperf3 through tunnels, handshake
    # floods and storms, the loopback planes) and judge what their rounds
    # delivered (half of the UDP datagrams at least, every packet intact)
    "tests/bench/test_tunnel_bench.py::test_short_run_",
    "tests/bench/test_tunnel_bench.py::test_latency_run_",
    # the proxy pairings beside the TUN pairing; they also run the proxy as
    # nobody with o+x on the directories above (see ONE_WORKER)
    "tests/bench/test_tunnel_bench.py::test_short_proxy_",
    "tests/bench/test_tunnel_bench.py::test_bench_killed_",
    "tests/bench/test_flood_bench.py::test_tiny_flood_",
    "tests/bench/test_storm_bench.py::test_tiny_storm_",
    "tests/bench/test_loopback_bench.py",
    # 100,000 initiations/s at the victim, judged against a no-flood control
    "tests/reliability/test_flood.py",
    # fixed-rate traffic for a while, with rekeys: loss and memory judged flat
    "tests/reliability/test_long_run.py",
    "tests/reliability/test_daemon_long_run.py",
    # a stream through a hostile relay in Python (200,000 datagrams, 90% of
    # them to arrive), and restarts judged against the protocol's timer bounds
    # (the handshake within REKEY_TIMEOUT + jitter + 0.5 s)
    "tests/reliability/test_hostile_path.py",
    "tests/reliability/test_hostile_wggo.py",
    "tests/reliability/test_restarts.py::test_kill9_",
    # paced UDP through the fair queue beside TCP streams: 20 of 400 datagrams
    # lost at most (126 were, with another test's daemons on the cores)
    "tests/e2e/test_fair_queue.py::test_the_fair_queue_carries_",
    # 10,000 peers: READY=1 within 15 s, most of it the configuration's parse
    "tests/interop/test_many_peers.py::test_ten_thousand_",
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Directories whose tests go to one worker together, by unit name: the fuzz
# harnesses share a sanitizer build worth making once (~15 s of a core); the
# proxy's and the asyncio API's labs run programs as nobody and, while they
# stand, add o+x to the directories above the checkout and the interpreter
# (CI's clone is in a 0700 directory), putting the modes back after: two such
# labs on two workers at once would take the access from under each other.
ONE_WORKER = {"tests/fuzz/": "tests/fuzz/", "tests/proxy/": "as-nobody", "tests/userspace/": "as-nobody"}


def _path(item) -> str:
    return os.path.relpath(str(item.path), REPO).replace(os.sep, "/")


def _alone(item) -> bool:
    return f"{_path(item)}::{item.name}".startswith(ALONE)


def pytest_collection_modifyitems(config, items):
    """On an xdist worker: the files that hold a test that runs alone go last
    (each file's own order kept; every worker sorts alike).  tests/run.sh
    starts the arm64 run beside the host suite, and it keeps a core busy under
    qemu for its first minutes (about 4 on a quiet machine): the tests that
    judge load come once it is done, and the benches (first in the tree) no
    longer meet it."""
    if not hasattr(config, "workerinput"):
        return
    late = {_path(item) for item in items if _alone(item)}
    items.sort(key=lambda item: _path(item) in late)  # sort is stable


def _scope(nodeid: str) -> str:
    """A test's work unit for xdist: its file, or its ONE_WORKER directory."""
    path = nodeid.split("::", 1)[0]
    return next((unit for d, unit in ONE_WORKER.items() if path.startswith(d)), path)


def _lock_dir(config):
    """The controller's directory of the two lock files, made once a session
    (each run has its own: another worktree's run on the same machine too)."""
    if not hasattr(config, "_vpncrypt_lock_dir"):
        config._vpncrypt_lock_dir = tempfile.mkdtemp(prefix="vpncrypt-pytest-")
    return config._vpncrypt_lock_dir


def pytest_unconfigure(config):
    d = getattr(config, "_vpncrypt_lock_dir", None)
    if d:
        shutil.rmtree(d, ignore_errors=True)


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # no xdist: the suite runs in one process, and nothing is scheduled
    pass
else:

    class _Scheduling(LoadFileScheduling):
        """`--dist loadfile` (a file's tests on one worker: their module fixtures
        are set up once), with each ONE_WORKER directory as one unit."""

        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return _Scheduling(config, log) if config.getoption("dist") == "loadfile" else None

    def pytest_configure_node(node):
        node.workerinput["vpncrypt_lock_dir"] = _lock_dir(node.config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Every test under the session's lock: shared, or exclusive for ALONE's."""
    d = getattr(item.config, "workerinput", {}).get("vpncrypt_lock_dir")
    if d is None:  # not an xdist worker
        yield
        return
    mode = fcntl.LOCK_EX if _alone(item) else fcntl.LOCK_SH
    with open(os.path.join(d, "turnstile"), "a") as turnstile, open(os.path.join(d, "lock"), "a") as lock:
        # through the turnstile: a test that waits for the lock holds it, so an
        # exclusive one is not passed by the other worker's next shared one
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, mode)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield  # setup, call and teardown (module fixtures' too): all under the lock
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
