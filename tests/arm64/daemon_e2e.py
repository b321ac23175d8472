"""The arm64 daemon end to end, run on the host by tests/arm64/run.sh:

    python -m tests.arm64.daemon_e2e --cpu cortex-a53 --vpncrypt STAGE/bin/vpncrypt --chacha neon4

`vpncrypt up --threads N` (N = 1, then 2) of the arm64 build
(STAGE/bin/vpncrypt: the arm64 Python under qemu-aarch64, emulating --cpu)
in network namespace A, against the x86 wireguard-go of Debian in namespace
B, in the lab of the interop tests (tests/interop/lab.py).  The arm64 daemon has the peer's endpoint, so it
initiates.  Each step prints what it saw and asserts it:

  - the handshake: a latest handshake on both sides, one completed in the daemon;
  - ping both ways;
  - 1472-byte UDP round trips both ways through the tunnel (MTU 1500), via
    asyncio-dgram (tests/interop/tools.py: x86 client and echo on either side
    of the tunnel, so every packet goes through the arm64 daemon), every byte
    of every echo compared;
  - `wg show` through the daemon's UAPI;
  - the kernels: `vpncrypt show` (the arm64 client) prints those selected and
    those the data path last ran; all must be --chacha and the NEON Poly1305,
    and agree with the UAPI's vpncrypt_info_* lines.

Then SIGTERM: the daemon must exit 0, with no error or traceback in its log.
Last, a short `vpncrypt loopback-bench --json` of the arm64 build: intact,
and its "kernels" those of the core too."""

import argparse
import json
import os
import re
import subprocess
import sys
import time

from tests.interop.lab import PORT, Lab, need

ROUND_TRIPS = {"A->B": 200, "B->A": 100}
SIZE = 1472  # a full 1500-byte inner IP packet
MTU = 1500
SHOW_RE = re.compile(
    r"^crypto kernels: chacha20 (\S+), poly1305 (\S+); "
    r"the data path last ran chacha20 (\S+), poly1305 (\S+)$",
    re.M,
)


def say(cpu, what):
    print(f"arm64 daemon [{cpu}]: {what}", flush=True)


def uapi_info(node) -> dict:
    out = {}
    for line in node.uapi("get=vpncrypt\n\n").splitlines():
        k, _, v = line.partition("=")
        if k.startswith("vpncrypt_info_"):
            out[k[len("vpncrypt_info_") :]] = v
    return out


def ping(src, dst, count=3) -> str:
    """Every echo answered: the summary line of ping."""
    r = src.run("ping", "-c", str(count), "-W", "5", "-i", "0.2", dst.inner, check=False)
    summary = next((ln for ln in r.stdout.splitlines() if "packets transmitted" in ln), "")
    assert r.returncode == 0 and f"{count} received" in summary, (
        f"ping {src.side}->{dst.side}:\n{r.stdout}{r.stderr}"
    )
    return summary


def tunnel(cpu: str, vpncrypt: str, chacha: str, threads: int) -> None:
    lab = Lab()
    try:
        a, b = lab.node("A", "vpncrypt"), lab.node("B", "wggo")
        b.start_wggo(b.conf([{"public": a.public, "inner": a.inner}]), mtu=MTU)
        t0 = time.monotonic()
        a.write_conf(
            a.conf([{"public": b.public, "inner": b.inner, "endpoint": f"{b.outer}:{PORT}"}], mtu=MTU)
        )
        a.proc = lab.spawn_vpncrypt(
            "A",
            a.iface,
            a.conf_path,
            command=vpncrypt,
            wait_ready=False,
            env={"QEMU_CPU": cpu},
            extra_args=("--threads", str(threads)),
        )
        lab.wait_notify(a.proc, "READY=1", timeout=120)
        tag = f"{cpu}, {threads} thread{'s' if threads > 1 else ''}"
        say(
            tag,
            f"{a.iface} up in {time.monotonic() - t0:.1f} s (READY=1), against {b.binary} (x86) on {b.iface}",
        )

        for src, dst in ((a, b), (b, a)):
            say(tag, f"ping {src.side}->{dst.side}: {ping(src, dst)}")
        da, db = a.dump()[b.public], b.dump()[a.public]
        assert da["handshake"] > 0 and db["handshake"] > 0, (da, db)
        c = a.counters()
        assert c["handshakes_sent"] >= 1 and c["handshakes_completed"] >= 1, c
        say(
            tag,
            f"handshake: initiated by the daemon (handshakes_sent={c['handshakes_sent']}, "
            f"handshakes_completed={c['handshakes_completed']}); latest handshake "
            f"{time.strftime('%H:%M:%S', time.gmtime(da['handshake']))} UTC in `wg show "
            f"dump` of both sides",
        )

        for way, count in ROUND_TRIPS.items():
            src, dst = (a, b) if way == "A->B" else (b, a)
            echo = lab.tool_bg(dst.side, "udp-echo", dst.inner, "7777")
            try:
                t = time.monotonic()
                res = lab.tool(src.side, "udp-rtt", dst.inner, "7777", str(SIZE), str(count), timeout=300)
                secs = time.monotonic() - t
            finally:
                echo.terminate()
                echo.communicate(timeout=10)
            assert res["ok"] == count and res["bad"] == 0, res
            say(
                tag,
                f"UDP {way}: {res['ok']}/{count} round trips of {SIZE} bytes, every byte "
                f"matched ({res['sends']} sends, {res['bad']} bad) in {secs:.1f} s",
            )

        show = a.wg("show", a.iface).stdout.rstrip()
        assert b.public in show and "latest handshake" in show and "transfer" in show, show
        say(tag, "wg show through the daemon's UAPI:\n    " + show.replace("\n", "\n    "))

        r = subprocess.run(
            [vpncrypt, "show", a.iface],
            capture_output=True,
            text=True,
            timeout=120,
            env={"QEMU_CPU": cpu, "PATH": "/usr/sbin:/usr/bin"},
        )
        assert r.returncode == 0, r.stderr
        m = SHOW_RE.search(r.stdout)
        assert m, f"no kernels line in `vpncrypt show`:\n{r.stdout}"
        say(tag, f"vpncrypt show: {m.group(0)}")
        want = (chacha, "neon", chacha, "neon")
        assert m.groups() == want, f"kernels {m.groups()}, want {want}"
        info = uapi_info(a)
        assert (
            info.get("chacha"),
            info.get("poly1305"),
            info.get("data_chacha"),
            info.get("data_poly1305"),
        ) == want, info
        say(tag, "UAPI get=vpncrypt: " + ", ".join(f"vpncrypt_info_{k}={v}" for k, v in sorted(info.items())))
        tasks = len(os.listdir(f"/proc/{a.proc.popen.pid}/task"))
        say(tag, f"daemon process: {tasks} host threads (qemu-user runs each guest thread on one)")
        busy = {
            k: v
            for k, v in a.counters().items()
            if v and (k.startswith(("drop_", "tun_tx_coalesced", "engine_")))
        }
        say(tag, "daemon counters: " + ", ".join(f"{k}={v}" for k, v in sorted(busy.items())))

        code = a.stop(timeout=60)
        log = a.proc.log()
        assert code == 0, f"the daemon exited with {code}:\n{log[-4000:]}"
        bad = [ln for ln in log.splitlines() if " ERROR " in ln or "Traceback" in ln]
        assert not bad, "errors in the daemon's log:\n" + "\n".join(bad)
        notes = [ln.split(": ", 1)[-1] for ln in log.splitlines() if "offloads" in ln or "WARNING" in ln]
        say(tag, "daemon log: " + "; ".join(notes))

        say(tag, f"stopped with exit 0; {time.monotonic() - t0:.1f} s in all")
    except BaseException:
        print(lab.logs(), file=sys.stderr)
        raise
    finally:
        lab.close()


def loopback(cpu: str, vpncrypt: str, chacha: str) -> None:
    r = subprocess.run(
        [
            vpncrypt,
            "loopback-bench",
            "--packets",
            "1000",
            "--no-baseline",
            "--threads",
            "1",
            "--json",
            "--progress",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"QEMU_CPU": cpu, "PATH": "/usr/sbin:/usr/bin"},
    )
    assert r.returncode == 0, f"loopback-bench failed:\n{r.stdout}\n{r.stderr}"
    res = json.loads(r.stdout)
    kernels = res["kernels"]
    say(cpu, f"loopback-bench --json: ok={res['ok']}, kernels={json.dumps(kernels)}")
    assert res["ok"] is True, res
    assert kernels == {"chacha": chacha, "poly1305": "neon", "served": [[chacha, "neon"]]}, kernels


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", required=True, help="the core qemu emulates (QEMU_CPU)")
    p.add_argument("--vpncrypt", required=True, help="the arm64 vpncrypt command")
    p.add_argument("--chacha", required=True, help="the ChaCha kernel the core must select")
    args = p.parse_args(argv)
    need("wireguard-go")
    need("ping")
    for threads in (1, 2):
        tunnel(args.cpu, args.vpncrypt, args.chacha, threads)
    loopback(args.cpu, args.vpncrypt, args.chacha)
    return 0


if __name__ == "__main__":
    sys.exit(main())
