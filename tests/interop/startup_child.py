"""`vpncrypt ARGS...` that sends itself SIGTERM right after its N-th step of
start-up, for test_startup_signals.py:

    python3 -m tests.interop.startup_child N COUNT_FILE VPNCRYPT ARGS...

A step is each `ip`/`nft` command the daemon runs (each reads or changes the
host) and the creation of the TUN device.  N = 0 sends nothing; the number
of steps taken is written to COUNT_FILE at exit.  VPNCRYPT is the command
line's program (the venv's `vpncrypt`), in whose place this runs ARGS."""

import atexit
import os
import signal
import subprocess
import sys


def main():
    n, count_file, args = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
    steps = [0]

    def step():
        steps[0] += 1
        if steps[0] == n:
            os.kill(os.getpid(), signal.SIGTERM)

    real_run = subprocess.run

    def run(*a, **kw):
        r = real_run(*a, **kw)
        step()
        return r

    subprocess.run = run

    from vpncrypt.daemon import tun

    real_create = tun.TunDevice.create.__func__

    def create(cls, *a, **kw):
        dev = real_create(cls, *a, **kw)
        step()
        return dev

    tun.TunDevice.create = classmethod(create)

    def write_count():
        with open(count_file, "w") as f:
            f.write(str(steps[0]))

    atexit.register(write_count)
    from vpncrypt.cli import main as cli_main

    sys.exit(cli_main(args))


if __name__ == "__main__":
    main()
