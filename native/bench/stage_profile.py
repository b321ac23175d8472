"""The vpncrypt daemons' CPU by data-plane stage, from `perf script` output.

    perf record -g -F 499 -p PID_A,PID_B -o perf.data -- sleep 10
    perf script -i perf.data -F tid,period,ip,sym,dso > perf.script
    python3 native/bench/stage_profile.py perf.script [--bench bench.txt] [--markdown]

(native/bench/profile_tunnel.sh does all of it around `vpncrypt bench tunnel`.)
Each sample is put in one stage by its call chain: the native entry point it runs
under (the cffi wrapper `_cffi_f_vc_*` or the exported `vc_*` function nearest the
root) names the stage, and the kernel frames below it say whether the time went
to the system call or to the C code around it.  Samples outside any native
entry are Python (the interpreter and cffi's argument handling per batch), the
threads' waits (poll, the GIL's futex, the wake-up pipe), or interrupts.  With
--bench (the bench's table from the same run), each stage's share is also given
as CPU seconds per Gbit: the share times the bench's "CPU s/Gbit" (both
daemons).  The module must be built with frame pointers for the native frames
to be walked (CFLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer").
"""

import argparse
import re
import sys
from collections import Counter

# native entry -> (stage of its C code, stage of the system calls under it)
ENTRIES = {
    "vc_tun_read_offload": ("split (copies, checksums)", "TUN read (kernel: readv)"),
    "vc_tun_read_batch": ("TUN read (C)", "TUN read (kernel: readv)"),
    "vc_wg_seal_batch": ("seal (table, ChaCha20-Poly1305)", "seal (kernel)"),
    "vc_udp_send_batch": ("UDP send (C)", "UDP send (kernel: sendmmsg)"),
    "vc_udp_recv_batch_segs": ("UDP receive (C)", "UDP receive (kernel: recvmmsg)"),
    "vc_udp_recv_batch": ("UDP receive (C)", "UDP receive (kernel: recvmmsg)"),
    "vc_wg_open_batch": ("open (table, ChaCha20-Poly1305)", "open (kernel)"),
    "vc_tun_write_offload": ("coalesce (copies, checksum checks)", "TUN write (kernel: write)"),
    "vc_tun_write_batch": ("TUN write (C)", "TUN write (kernel: write)"),
    "vc_gro_coalesce": ("coalesce (copies, checksum checks)", "TUN write (kernel: write)"),
}
ORDER = [
    "TUN read (kernel: readv)",
    "TUN read (C)",
    "split (copies, checksums)",
    "seal (table, ChaCha20-Poly1305)",
    "UDP send (C)",
    "UDP send (kernel: sendmmsg)",
    "UDP receive (kernel: recvmmsg)",
    "UDP receive (C)",
    "open (table, ChaCha20-Poly1305)",
    "coalesce (copies, checksum checks)",
    "TUN write (kernel: write)",
    "TUN write (C)",
    "other native calls (timers, table upkeep)",
    "Python per batch (interpreter, cffi calls)",
    "waits: poll, GIL futex, wake-up pipe (kernel)",
    "other system calls",
    "interrupts and softirqs outside a system call",
    "unknown",
]
WAIT_SYSCALLS = (
    "do_sys_poll",
    "__x64_sys_poll",
    "__x64_sys_ppoll",
    "do_epoll_wait",
    "futex_",
    "pipe_write",
    "pipe_read",
    "__x64_sys_epoll_wait",
    "do_select",
)
# A system call under a native entry whose own frames are lost (the rounds of
# wg_rounds.c call libc's wrappers, which keep no frame pointer): the kernel's
# symbols say which call it was: the first stage one of whose symbols is in the
# chain (exact names: a read and a write both pass do_iter_readv_writev)
KERNEL_STAGES = (
    (("__sys_recvmmsg", "do_recvmmsg", "__x64_sys_recvmmsg", "recvmmsg"), "UDP receive (kernel: recvmmsg)"),
    (("__sys_sendmmsg", "__x64_sys_sendmmsg", "sendmmsg", "__sendmmsg"), "UDP send (kernel: sendmmsg)"),
    (("tun_chr_write_iter", "tun_get_user"), "TUN write (kernel: write)"),
    (("tun_chr_read_iter", "tun_do_read"), "TUN read (kernel: readv)"),
    # and by libc's wrapper when the kernel's frames end on the way back to user
    # mode (a task switch, as after the wake-ups of a TUN write, in exit_to_user_mode_loop)
    (("do_writev", "vfs_writev", "__x64_sys_writev", "__GI___writev", "writev"), "TUN write (kernel: write)"),
    (("do_readv", "vfs_readv", "__x64_sys_readv", "__GI___readv", "readv"), "TUN read (kernel: readv)"),
)
PYTHON_DSO = re.compile(r"libpython|/python3|_cffi_backend|\[unknown\]")


def parse(lines):
    """Yield (tid, period, frames) with frames [(sym, dso)] leaf first."""
    head, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head[0], head[1], frames
            head, frames = None, []
            continue
        if not line.startswith("\t"):
            parts = line.split()
            head = (int(parts[0]), int(parts[1]) if len(parts) > 1 else 1)
            frames = []
            continue
        m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)$", line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            frames.append((sym, m.group(2)))
    if head is not None:
        yield head[0], head[1], frames


def stage_of(frames) -> str:
    entry = None
    for sym, _dso in reversed(frames):  # root first: the outermost native entry
        name = sym[len("_cffi_f_") :] if sym.startswith("_cffi_f_") else sym
        if name in ENTRIES:
            entry = name
            break
        if name.startswith("vc_") and "_native" in _dso:
            entry = entry or name
    kernel = any(dso == "[kernel.kallsyms]" for _s, dso in frames)
    syscall = any(s.startswith(("entry_SYSCALL", "do_syscall_64")) for s, _d in frames)
    if entry in ENTRIES:
        c_stage, k_stage = ENTRIES[entry]
        return k_stage if kernel and syscall else c_stage
    if entry is not None:
        if kernel and syscall:
            in_chain = {sym for sym, _dso in frames}
            for names, stage in KERNEL_STAGES:
                if in_chain.intersection(names):
                    return stage
            return "other system calls"
        return "other native calls (timers, table upkeep)"
    if kernel:
        if not syscall:
            return "interrupts and softirqs outside a system call"
        if any(s.startswith(WAIT_SYSCALLS) or s in WAIT_SYSCALLS for s, _d in frames):
            return "waits: poll, GIL futex, wake-up pipe (kernel)"
        return "other system calls"
    if frames and PYTHON_DSO.search(frames[0][1]):
        return "Python per batch (interpreter, cffi calls)"
    if frames and ("libc" in frames[0][1] or "ld-linux" in frames[0][1]):
        return "Python per batch (interpreter, cffi calls)"
    return "unknown"


def bench_cpu_per_gbit(path: str):
    """(Gbit/s, CPU s per Gbit) of the first vpncrypt row of a bench table."""
    with open(path) as f:
        for line in f:
            if line.startswith("vpncrypt<->vpncrypt"):
                cols = line.split()
                # pairing proto Gbit/s N retr|loss CPU-A CPU-B CPUs/Gbit ...
                nums = [c for c in cols[2:] if re.match(r"^[0-9.]+%?$", c)]
                return float(cols[2]), float(nums[4])
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("script", help="perf script -F tid,period,ip,sym,dso output")
    ap.add_argument("--bench", help="the bench table of the same run (for CPU s per Gbit)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    o = ap.parse_args(argv)
    by_stage: Counter = Counter()
    total = 0
    with open(o.script, errors="replace") as f:
        for _tid, period, frames in parse(f):
            by_stage[stage_of(frames)] += period
            total += period
    if not total:
        print("no samples", file=sys.stderr)
        return 1
    per_gbit = None
    if o.bench:
        got = bench_cpu_per_gbit(o.bench)
        if got:
            gbit, per_gbit = got
            print(f"bench: {gbit} Gbit/s, {per_gbit} CPU s per Gbit (both daemons)")
    if o.markdown:
        print("| stage | % of daemon CPU | CPU s per Gbit |")
        print("|---|---|---|")
    for st in ORDER + sorted(set(by_stage) - set(ORDER)):
        if not by_stage[st]:
            continue
        share = by_stage[st] / total
        spg = f"{share * per_gbit:.3f}" if per_gbit is not None else "-"
        if o.markdown:
            print(f"| {st} | {100 * share:.1f} | {spg} |")
        else:
            print(f"  {st:50s} {100 * share:5.1f} %  {spg:>7s} s/Gbit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
