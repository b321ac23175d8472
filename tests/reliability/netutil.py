"""Helpers shared by the namespace-based reliability tests (built on
tests/interop/lab.py): process CPU and memory, a UAPI responsiveness probe,
reading another process's socket with pidfd_getfd, JSON reports."""

import ctypes
import json
import argparse
import os
import re
import socket
import threading
import time

REPORT_DIR = os.environ.get("VPNCRYPT_RELIABILITY_REPORT")  # also write reports here
SOAK = float(os.environ.get("VPNCRYPT_SOAK_SECONDS", "0"))
TICK = os.sysconf("SC_CLK_TCK")


def short_timers(rekey_after_time: float, reject_after_time: float) -> dict:
    """Protocol timers short enough for rekeys and expiry to come up within a
    test run of seconds (run_pair's `timers`)."""
    return dict(
        rekey_after_time=rekey_after_time,
        reject_after_time=reject_after_time,
        rekey_timeout=0.5,
        rekey_timeout_jitter=0.1,
        keepalive_timeout=1.0,
        rekey_attempt_time=5.0,
    )


def pair_args(timers: dict, **kw) -> argparse.Namespace:
    """run_pair's options for one WireGuard pair: 1200-byte random-mix traffic both
    ways for 2 s as fast as it goes, in batches of 32, unless `kw` says otherwise."""
    base = dict(
        size=1200,
        mix="random",
        bidirectional=True,
        peers=1,
        packets=None,
        duration=2.0,
        rate=0.0,
        batch=32,
        timers=timers,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class UapiProbe(threading.Thread):
    """Asks a daemon `request` every `every` seconds; records how long each answer took."""

    def __init__(self, node, request="get=1\n\n", every=0.1):
        super().__init__(daemon=True)
        self.node, self.request, self.every = node, request, every
        self.latencies, self.errors = [], []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            t = time.monotonic()
            try:
                ans = self.node.uapi(self.request)
                assert ans.endswith("errno=0\n\n"), ans[-40:]
                self.latencies.append(time.monotonic() - t)
            except Exception as e:  # noqa: BLE001 - a timeout is what we look for
                self.errors.append(f"{type(e).__name__}: {e}")
                self.latencies.append(time.monotonic() - t)
            self._halt.wait(self.every)

    def finish(self):
        self._halt.set()
        self.join(10)
        lat = sorted(self.latencies)
        return {
            "requests": len(lat),
            "errors": self.errors[:5],
            "max_s": lat[-1] if lat else None,
            "p50_s": lat[len(lat) // 2] if lat else None,
        }


_libc = ctypes.CDLL(None, use_errno=True)
SYS_pidfd_getfd = 438


def steal_udp_socket(pid: int, port: int) -> socket.socket:
    """A duplicate of process `pid`'s UDP socket bound to `port` (pidfd_getfd):
    setsockopt on it changes the daemon's own socket."""
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = _libc.syscall(SYS_pidfd_getfd, pidfd, int(name), 0)
            if fd < 0:
                raise OSError(ctypes.get_errno(), f"pidfd_getfd({pid}, {name})")
            s = socket.socket(fileno=fd)
            if (
                s.type == socket.SOCK_DGRAM
                and s.family in (socket.AF_INET, socket.AF_INET6)
                and s.getsockname()[1] == port
            ):
                return s
            s.close()
    finally:
        os.close(pidfd)
    raise AssertionError(f"process {pid} has no UDP socket on port {port}")


_PROC_UDP = ("/proc/net/udp", "/proc/net/udp6")


def _udp_rows(ports, lab=None, side=None):
    """The /proc/net/udp and udp6 rows (split) of the UDP sockets on `ports`,
    in `lab`'s namespace `side` (None: this one)."""
    if lab is None:
        text = "".join(open(f).read() for f in _PROC_UDP)
    else:
        text = lab.run_in(side, "cat", *_PROC_UDP).stdout
    for line in text.splitlines():
        parts = line.split()
        if (
            len(parts) > 12
            and re.fullmatch(r"[0-9A-F]+:[0-9A-F]{4}", parts[1])
            and int(parts[1].split(":")[1], 16) in ports
        ):
            yield parts


def udp_socket_drops(lab, side, port: int) -> int:
    """The kernel's drop count of the UDP socket on `port` in a namespace."""
    return sum(int(parts[-1]) for parts in _udp_rows({port}, lab, side))


def udp_receive_queues(ports, lab=None, side=None) -> int:
    """Bytes waiting in the receive queues of the UDP sockets on `ports` (the
    rx_queue column), in `lab`'s namespace `side` or this one."""
    return sum(int(parts[4].split(":")[1], 16) for parts in _udp_rows(ports, lab, side))


def wait_received(ports, settle: float = 0.2, timeout: float = 30.0, lab=None, side=None) -> None:
    """Wait until the UDP sockets on `ports` (in `lab`'s namespace `side`, or
    this one) have read everything queued for them, then `settle` seconds more
    for the batch each may still be opening."""
    deadline = time.monotonic() + timeout
    while udp_receive_queues(ports, lab, side):
        if time.monotonic() > deadline:
            raise AssertionError(f"UDP sockets on {sorted(ports)} still hold data after {timeout} s")
        time.sleep(0.01)
    time.sleep(settle)


def save_report(tmp_path, name: str, report: dict) -> None:
    text = json.dumps(report, indent=1, default=str)
    (tmp_path / name).write_text(text)
    if REPORT_DIR:
        os.makedirs(REPORT_DIR, exist_ok=True)
        with open(os.path.join(REPORT_DIR, name), "w") as f:
            f.write(text)
    print(f"\n{name}: {text}")
