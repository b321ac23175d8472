"""A real systemd as PID 1 of a throwaway container, for testing the unit.

The container boots this machine's own /usr (Debian 12: systemd 252) with
`systemd-nspawn --volatile=yes`: its root and /etc are an empty tmpfs, /usr
is the host's, read-only, so nothing needs downloading or caching and
nothing the container does reaches the host.  It gets its own network
namespace (--private-network) and only the files bound into it.  Commands run
inside with nsenter into the container's PID 1.
"""

import os
import secrets
import shutil
import signal
import subprocess
import time


def need(tool):
    path = shutil.which(tool)
    assert path, (
        f"{tool} is not installed (Debian's systemd-container and util-linux; tests/run.sh installs them)"
    )
    return path


class Container:
    def __init__(self, binds_ro=(), binds=()):
        need("systemd-nspawn")
        need("nsenter")
        self.name = "vcsd" + secrets.token_hex(4)
        self.log_path = f"/tmp/{self.name}.console"
        args = [
            "systemd-nspawn",
            "--quiet",
            "-D",
            "/",
            "--volatile=yes",
            "--boot",
            "-M",
            self.name,
            "--private-network",
            "--console=pipe",
            "--register=no",
            "--keep-unit",
            "--bind=/dev/net/tun",
        ]
        for path in binds_ro:
            args.append(f"--bind-ro={path}")
        for path in binds:
            args.append(f"--bind={path}")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.leader = None
        try:
            self._wait_booted()
        except BaseException:
            self.close()
            raise

    def _wait_booted(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the container exited:\n{self.console()}"
            if self.leader is None or not _is_container_init(self.leader):
                self.leader = _container_init(self.proc.pid)
            if self.leader is not None:
                r = self.run("systemctl", "is-system-running", check=False)
                if r.stdout.strip() in ("running", "degraded"):
                    return
            time.sleep(0.3)
        raise AssertionError(f"the container's systemd did not finish booting:\n{self.console()}")

    def console(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def run(self, *cmd, check=True, timeout=60, input=None):
        r = subprocess.run(
            ["nsenter", "-t", str(self.leader), "-m", "-u", "-i", "-n", "-p", "-r", "-w", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check:
            assert r.returncode == 0, f"{' '.join(cmd)}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def show(self, unit, *props):
        """`systemctl show UNIT -p ...` as a dict."""
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def close(self):
        if self.proc.poll() is None:
            # SIGTERM asks nspawn to halt the container's systemd cleanly
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def _children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _is_container_init(pid) -> bool:
    """Whether `pid` is PID 1 of a PID namespace of its own (its NSpid line
    ends in 1): the container's systemd, not nspawn's short-lived
    intermediate child, which a look at the tree can catch under load."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    return len(ids) > 1 and ids[-1] == "1"
    except OSError:
        pass
    return False


def _container_init(pid):
    """The container's PID 1 among nspawn's descendants, or None (not yet)."""
    todo = _children(pid)
    while todo:
        p = todo.pop()
        if _is_container_init(p):
            return p
        todo.extend(_children(p))
    return None
