"""Two pmd-pytcp stacks over an AF_UNIX datagram link: one TCP stream, timed.

Lab prototype for issue 32 (choosing the userspace TCP/IP stack): each stack
runs in its own process (pmd-pytcp keeps its stack in module globals) on an
L3 ("TUN") interface whose fd is one end of a socketpair, so every datagram is
one IP packet. Optionally a relay process adds one-way delay and loss.

    python pytcp_pair.py --seconds 10 [--delay-ms 25 --loss 0.001] [--v6]
    python pytcp_pair.py --idle 1000     # memory of N idle connections

Needs `pip install pmd-pytcp` (GPL-3.0-or-later); not a dependency of vpncrypt.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timed_relay import link, relay  # noqa: E402

MTU = 1420
PORT = 5001
ADDR = {4: ("10.200.0.1/24", "10.200.0.2/24"), 6: ("fd00:200::1/64", "fd00:200::2/64")}


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stack_stats() -> dict[str, int]:
    """The non-zero drop and retransmit counters of this process's stack."""
    from pmd_pytcp import stack

    out: dict[str, int] = {}
    for iface in stack.interfaces.values():
        for part in (iface._packet_stats_rx, iface._packet_stats_tx):
            for k in dir(part):
                v = getattr(part, k)
                if not isinstance(v, int):
                    continue
                if v and any(w in k for w in ("drop", "retrans", "dup", "sack", "rto", "ring")):
                    out[k] = v
    return out


async def bring_up(fd: int, host: str, ver: int) -> None:
    from pmd_net_addr import Ip4IfAddr, Ip6IfAddr
    from pmd_pytcp import stack
    from pmd_pytcp.lib.interface_layer import InterfaceLayer

    kw: dict[str, object] = {"ip4_support": ver == 4, "ip6_support": ver == 6}
    if ver == 4:
        kw.update(ip4_host=Ip4IfAddr(host), ip4_dhcp=False)
    else:
        kw.update(ip6_host=Ip6IfAddr(host), ip6_gua_autoconfig=False, ip6_lla_autoconfig=False)
    stack.init(
        fd=fd,
        layer=InterfaceLayer.L3,
        mtu=MTU,
        sysctls={"tcp.rcv_wnd_max": int(os.environ.get("LAB_RCV_WND", 4 << 20))},
        **kw,  # type: ignore[arg-type]
    )
    await stack.start()
    if os.environ.get("LAB_DEBUG"):
        import logging

        from pmd_pytcp.lib.logger import refresh_log_enabled

        logging.basicConfig(level=logging.DEBUG)
        refresh_log_enabled()


async def server_main(fd: int, ver: int, seconds: float, idle: int, q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from pmd_pytcp import socket as psock

    await bring_up(fd, ADDR[ver][1], ver)
    fam = psock.AF_INET if ver == 4 else psock.AF_INET6
    ls = psock.socket(fam, psock.SOCK_STREAM)
    ls.bind(("0.0.0.0" if ver == 4 else "::", PORT))
    ls.listen(backlog=max(idle, 16))
    q.put(("ready", rss_kib()))
    if idle:
        conns = []
        for _ in range(idle):
            c, _ = await ls.accept()
            conns.append(c)
        q.put(("server-idle", rss_kib()))
        await asyncio.sleep(3600)
    c, _ = await ls.accept()
    total = len(await c.recv())
    t0 = time.monotonic()
    cpu0 = cpu_s()
    while time.monotonic() - t0 < seconds:
        data = await c.recv(timeout=10.0)
        if not data:
            break
        total += len(data)
    q.put(("server-stats", stack_stats()))
    q.put(("server-done", total, time.monotonic() - t0, cpu_s() - cpu0))
    await asyncio.sleep(3600)


async def client_main(fd: int, ver: int, seconds: float, idle: int, q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from pmd_pytcp import socket as psock

    await bring_up(fd, ADDR[ver][0], ver)
    fam = psock.AF_INET if ver == 4 else psock.AF_INET6
    dst = ADDR[ver][1].split("/")[0]
    await asyncio.sleep(0.5)
    if idle:
        base = rss_kib()
        conns = []
        t0 = time.monotonic()
        for _ in range(idle):
            s = psock.socket(fam, psock.SOCK_STREAM)
            await s.connect((dst, PORT))
            conns.append(s)
        q.put(("client-idle", base, rss_kib(), time.monotonic() - t0))
        await asyncio.sleep(3600)
    s = psock.socket(fam, psock.SOCK_STREAM)
    await s.connect((dst, PORT))
    chunk = b"x" * 65536
    sent = 0
    t0 = time.monotonic()
    stats_sent = False
    trace: list[tuple[float, int, int, int, int, int]] = []
    sess = s.tcp_session
    assert sess is not None

    def sample() -> None:
        # (t, bytes acked, cwnd, rto_ms, srtt_ms, retransmit count): the stall finder
        trace.append(
            (
                round(time.monotonic() - t0, 2),
                (sess._snd_seq.una - una0) % (1 << 32),
                sess._cc.cwnd,
                sess._rto_state.rto_ms,
                sess._rto_state.srtt_ms,
                sess._retransmit_count,
            )
        )
        if time.monotonic() - t0 < seconds:
            asyncio.get_running_loop().call_later(0.5, sample)

    una0 = sess._snd_seq.una
    tx = s.tcp_session._tx.buffer  # type: ignore[union-attr]
    # pmd-pytcp's send() queues without limit (0.3.8): hold the queue near 4 MiB
    # as a kernel socket's send buffer would.
    sample()
    cpu0 = cpu_s()
    while time.monotonic() - t0 < seconds + 5:
        while len(tx) > 4 << 20:
            await asyncio.sleep(0.002)
        sent += await s.send(chunk)
        if time.monotonic() - t0 > seconds and not stats_sent:
            q.put(("client-stats", stack_stats(), trace, cpu_s() - cpu0))
            stats_sent = True
    s.close()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    q.put(("client-done", sent, time.monotonic() - t0, cpu.ru_utime + cpu.ru_stime))  # not awaited by main
    await asyncio.sleep(3600)


def run(target, *args) -> None:  # type: ignore[no-untyped-def]
    prof = os.environ.get("LAB_PROFILE")
    if not prof:
        asyncio.run(target(*args))
        return
    import cProfile

    pr = cProfile.Profile()
    pr.enable()
    try:
        asyncio.run(asyncio.wait_for(target(*args), float(prof)))
    except (TimeoutError, asyncio.TimeoutError):
        pass
    pr.disable()
    pr.dump_stats(f"/tmp/lab_stack_{target.__name__}.prof")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay (RTT = 2x)")
    ap.add_argument("--loss", type=float, default=0.0)
    ap.add_argument("--v6", action="store_true")
    ap.add_argument("--idle", type=int, default=0, help="open N idle connections instead")
    a = ap.parse_args()
    ver = 6 if a.v6 else 4
    q: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    c_end, s_end = link()
    procs = []
    if a.delay_ms or a.loss:
        r1, r2 = link()
        procs.append(multiprocessing.Process(target=relay, args=(s_end, r1, a.delay_ms, a.loss)))
        s_end = r2
    procs.append(
        multiprocessing.Process(target=run, args=(server_main, s_end.fileno(), ver, a.seconds, a.idle, q))
    )
    procs.append(
        multiprocessing.Process(target=run, args=(client_main, c_end.fileno(), ver, a.seconds, a.idle, q))
    )
    for p in procs:
        p.start()
    deadline = time.monotonic() + a.seconds + 120
    want = {"server-idle", "client-idle"} if a.idle else {"server-done", "client-stats"}
    try:
        while want and time.monotonic() < deadline:
            msg = q.get(timeout=max(0.1, deadline - time.monotonic()))
            print(msg, flush=True)
            want.discard(msg[0])
            if msg[0] == "server-done":
                mbit = msg[1] * 8 / 1e6
                print(
                    f"goodput {mbit / msg[2]:.1f} Mbit/s over {msg[2]:.1f} s; receiver CPU {msg[3]:.2f} s",
                    flush=True,
                )
                print(f"per receiver CPU-second: {mbit / msg[3]:.1f} Mbit/s", flush=True)
            if msg[0] == "client-stats":
                print(f"sender CPU {msg[3]:.2f} s", flush=True)
    finally:
        for p in procs:
            p.kill()
            p.join()


if __name__ == "__main__":
    main()
