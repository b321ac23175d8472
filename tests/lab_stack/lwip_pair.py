"""Run lwip_pair.c's two ends over a packet link, optionally through the delay/loss relay.

    python lwip_pair.py BINARY --seconds 10 [--delay-ms 25 --loss 0.001]

BINARY is lwip_pair.c built against Debian's liblwip-dev (see README.md in this folder).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timed_relay import link, relay  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay (RTT = 2x)")
    ap.add_argument("--loss", type=float, default=0.0)
    a = ap.parse_args()
    c_end, s_end = link()
    relay_proc = None
    if a.delay_ms or a.loss:
        r1, r2 = link()
        relay_proc = multiprocessing.Process(target=relay, args=(s_end, r1, a.delay_ms, a.loss))
        relay_proc.start()
        s_end = r2
    srv = subprocess.Popen(
        [a.binary, "server", str(s_end.fileno()), "10.200.0.2", str(a.seconds)], pass_fds=[s_end.fileno()]
    )
    cli = subprocess.Popen(
        [a.binary, "client", str(c_end.fileno()), "10.200.0.1", "10.200.0.2", str(a.seconds)],
        pass_fds=[c_end.fileno()],
    )
    try:
        srv.wait(timeout=a.seconds + 60)
    finally:
        for p in (srv, cli):
            p.kill()
            p.wait()
        if relay_proc is not None:
            relay_proc.kill()
            relay_proc.join()


if __name__ == "__main__":
    main()
