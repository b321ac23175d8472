"""Static cycle estimate of the arm64 ChaCha routines with llvm-mca.

Compiles native/mca/mca_entry.c (which includes native/chacha_neon.c) to
assembly with the package's own compiler and flags by default,
aarch64-linux-gnu-gcc -O3 -S plus build_native.py's CFLAGS (the code that
ships), or with clang --target=aarch64-linux-gnu (--cc clang; --cc both reports
both).  It compiles the entry file as shipped (the double-round
loop stays a loop; the region between the "LLVM-MCA-BEGIN dround" / "LLVM-MCA-END"
markers that the C code emits gives the loop body, analysed with -iterations=100)
and once with VC_MCA_UNROLL (the 20-round loop fully unrolled, constant length:
the whole call is straight-line code, analysed once with -iterations=1; gcc
gets "#pragma GCC unroll" there).

The whole call is, by default, the shipped code of a constant-length entry
point with its loop body laid out trip-count times in a row (the loop branch
dropped); --unrolled uses clang's own full unroll instead (VC_MCA_UNROLL).

Usage: python3 native/mca/mca_report.py [--cc gcc|clang|both] [--tune] [--unrolled]
                                        [--keep DIR] [extra compiler flags...]
  --cc     the compiler (default gcc: $CROSS_CC or aarch64-linux-gnu-gcc; clang: $CLANG).
  --tune   compile with -mtune=<model> for each model (default: generic tuning, as the
           package is built).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "mca_entry.c")
MODELS = ["cortex-a57", "cortex-a53"]
CLANG = os.environ.get("CLANG", "clang")
GCC = os.environ.get("CROSS_CC", "aarch64-linux-gnu-gcc")


def product_cflags():
    """CFLAGS from native/build_native.py: the flags the extension is built with."""
    import ast
    src = open(os.path.join(os.path.dirname(HERE), "build_native.py")).read()
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CFLAGS":
            return list(ast.literal_eval(node.value))
    sys.exit("mca: no CFLAGS in build_native.py")
MCA = os.environ.get("LLVM_MCA", "llvm-mca")

# (label, straight entry, bytes)
# (label, straight entry, bytes, loop trips for 20 rounds)
CALLS = [
    ("neon  320 B (4 NEON + 1 ALU)", "mca_neon_320", 320, 5),
    ("neon  256 B (4 NEON lanes)", "mca_neon_256", 256, 5),
    ("neon  192 B (4 NEON lanes)", "mca_neon_192", 192, 5),
    ("neon   64 B (one block, ALU)", "mca_neon_64", 64, 10),
    ("neon4 256 B (pure 4-way)", "mca_neon4_256", 256, 5),
    ("neon4  64 B (pure 4-way)", "mca_neon4_64", 64, 5),
    ("neon  seal, key + 256 B (4+1, otk)", "mca_neon_otk_256", 256, 5),
    ("neon4 seal, key + 192 B (otk)", "mca_neon4_otk_192", 192, 5),
]
# (label, function holding the loop, double rounds per loop iteration)
LOOPS = [
    ("neon  loop, 4 NEON + 1 ALU", "vc_chacha_neon_call5", 2),
    ("neon  loop, 4 NEON lanes", "vc_chacha_neon_call4", 2),
    ("neon4 loop, pure 4-way", "vc_chacha_neon4_call", 2),
    ("neon  loop, one block ALU", "vc_chacha_neon_call1", 1),
]


def compile_asm(out, flags, cc):
    if cc == "gcc":
        cmd = [GCC] + product_cflags() + ["-S", "-DVC_MCA_MARKERS"]
    else:
        cmd = [CLANG, "--target=aarch64-linux-gnu"] + product_cflags() + [
            "-S", "-DVC_MCA_MARKERS", "-Wno-pass-failed"]
    cmd += ["-I" + os.path.dirname(HERE), ENTRY, "-o", out] + flags
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return f.read().split("\n")


def function_body(lines, name):
    start = next((i for i, l in enumerate(lines) if l.startswith(name + ":")), None)
    if start is None:
        sys.exit(f"mca: function {name} not found in the assembly")
    body = []
    for l in lines[start + 1:]:
        if l.startswith(".Lfunc_end") or re.match(r"^\s*\.size\s", l):
            break
        body.append(l)
    return body


def is_insn(l):
    s = l.strip()
    return bool(s) and not s.startswith(("//", "#", ".", ";")) and not re.match(r"^[\w.$]+:", s)


COND = r"(?:eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)"
JUMP = rf"^\s+(b|b\.?{COND}|cbnz|cbz|tbnz|tbz)\s+(?:\w+,\s*)*(\.L\w+)\s*$"


def local_labels(body):
    """The line index of each local label (.Lxxx:) in a function's lines."""
    return {m.group(1): i for i, l in enumerate(body) if (m := re.match(r"^(\.L\w+):", l))}


def loop_body(lines, name):
    """The instructions of the double-round loop: within the dround marker region,
    from the loop header label to the backward branch to it."""
    body = function_body(lines, name)
    begin = next((i for i, l in enumerate(body) if "LLVM-MCA-BEGIN" in l and ("dround" in l or "alu1" in l)), None)
    if begin is None:
        sys.exit(f"mca: no LLVM-MCA-BEGIN marker in {name}")
    labels = local_labels(body)
    best = None
    for i, l in enumerate(body):
        m = re.match(JUMP, l)
        if m and m.group(2) in labels and begin < labels[m.group(2)] < i:
            n = sum(is_insn(x) for x in body[labels[m.group(2)]:i + 1])
            if best is None or n > best[0]:
                best = (n, labels[m.group(2)], i)
    if best is None:
        sys.exit(f"mca: no loop after the dround marker in {name}")
    return [l for l in body[best[1]:best[2] + 1] if is_insn(l)]


BRANCH = rf"^\s+(b|b\.?{COND}|cbnz|cbz|tbnz|tbz|bl|br|blr)\s"


def straight_body(lines, name, trips=None):
    """The whole call as straight-line code.  With trips, the function's loop (the
    double-round loop of the routine as shipped) is laid out that many times in a
    row, without its branch; without, the function must have no loop (it was
    compiled with VC_MCA_UNROLL)."""
    body = function_body(lines, name)
    if trips:
        labels = local_labels(body)
        loop = None
        for i, l in enumerate(body):
            m = re.match(JUMP, l)
            if m and m.group(2) in labels and labels[m.group(2)] < i:
                loop = (labels[m.group(2)], i)
        if loop is None:
            sys.exit(f"mca: no loop in {name}")
        inner = [l for l in body[loop[0] + 1:loop[1]] if is_insn(l)]
        # drop the loop's own compare (it only feeds the branch) when it is the last flag setter
        body = body[:loop[0]] + inner * trips + body[loop[1] + 1:]
    insns = [l for l in body if is_insn(l)]
    branches = [l for l in insns if re.match(BRANCH, l)]
    if branches:
        sys.exit(f"mca: {name} is not straight-line code: {branches[:3]}")
    return [l for l in insns if not re.match(r"^\s+ret\b", l)]


def mca_cycles(insns, model, iterations, tmp):
    path = os.path.join(tmp, "region.s")
    with open(path, "w") as f:
        f.write("\n".join(insns) + "\n")
    out = subprocess.run([MCA, "-mtriple=aarch64-linux-gnu", "-mcpu=" + model,
                          f"-iterations={iterations}", path],
                         check=True, capture_output=True, text=True).stdout
    return int(re.search(r"Total Cycles:\s+(\d+)", out).group(1))


def report(cc, flags, tune, unrolled, tmp):
    res_loop, res_call = {}, {}
    for model in MODELS:
        extra = flags + (["-mtune=" + model] if tune else [])
        loop_asm = compile_asm(os.path.join(tmp, f"loop-{cc}-{model}.s"), extra, cc)
        if unrolled:
            straight_asm = compile_asm(os.path.join(tmp, f"straight-{cc}-{model}.s"),
                                       extra + ["-DVC_MCA_UNROLL"], cc)
        for label, fn, drs in LOOPS:
            body = loop_body(loop_asm, fn)
            res_loop[(label, model)] = (mca_cycles(body, model, 100, tmp) / 100 / drs, len(body) / drs)
        for label, fn, nbytes, trips in CALLS:
            body = (straight_body(straight_asm, fn) if unrolled
                    else straight_body(loop_asm, fn, trips))
            res_call[(label, model)] = (mca_cycles(body, model, 1, tmp), len(body))
    tuning = "per-model -mtune" if tune else "generic tuning (as built)"
    tuning += ("; whole call: the compiler's fully unrolled variant" if unrolled
               else "; whole call: the compiled loop body laid out 5 times (10 for the ALU block)")
    compiler = (f"{GCC} {' '.join(product_cflags())}" if cc == "gcc"
                else f"{CLANG} --target=aarch64-linux-gnu {' '.join(product_cflags())}")
    print(f"llvm-mca ({subprocess.run([MCA, '--version'], capture_output=True, text=True).stdout.split('version')[1].split()[0]}), "
          f"{compiler}, {tuning}{' ' + ' '.join(flags) if flags else ''}")
    print(f"{'double-round loop (per double round)':40s} {'A57 cyc':>9s} {'A53 cyc':>9s} {'insns':>6s}")
    for label, fn, drs in LOOPS:
        a57, n = res_loop[(label, 'cortex-a57')]
        a53, _ = res_loop[(label, 'cortex-a53')]
        print(f"{label:40s} {a57:9.2f} {a53:9.2f} {n:6.0f}")
    print(f"{'whole call, straight line, 20 rounds':40s} {'A57 c/b':>9s} {'A53 c/b':>9s} {'cycles57':>9s} {'cycles53':>9s}")
    for label, fn, nbytes, trips in CALLS:
        c57, _ = res_call[(label, 'cortex-a57')]
        c53, _ = res_call[(label, 'cortex-a53')]
        print(f"{label:40s} {c57 / nbytes:9.2f} {c53 / nbytes:9.2f} {c57:9d} {c53:9d}")
    cyc = {k: v[0] for k, v in res_call.items()}

    def combo(parts, model):
        return sum(n * cyc[(CALLS[i][0], model)] for i, n in parts)
    rows = [
        # a 1472-byte packet: four 320-byte calls and one 192-byte call
        ("neon 1472 B packet (4x320 + 192)", [(0, 4), (2, 1)], 1472),
        ("neon 1600 B (5x320), the next multiple", [(0, 5)], 1600),
        # sealing it: key block + 256 B, then 3x320 + 256 (24 blocks, 5 calls)
        ("neon 1472 B seal, stream_otk (key+256, 3x320, 256)", [(6, 1), (0, 3), (1, 1)], 1472),
        # without stream_otk: the 64-byte key call, then the packet
        ("neon 1472 B seal, separate key call", [(3, 1), (0, 4), (2, 1)], 1472),
    ]
    for label, parts, nbytes in rows:
        p57, p53 = combo(parts, "cortex-a57"), combo(parts, "cortex-a53")
        print(f"{label:40s} {p57 / nbytes:9.2f} {p53 / nbytes:9.2f} {p57:9d} {p53:9d}")
    p57, b57 = combo(rows[0][1], "cortex-a57"), combo(rows[1][1], "cortex-a57")
    ok = cyc[(CALLS[0][0], 'cortex-a57')] / 320 <= 3.0 and p57 <= b57
    print(f"targets (A57: 320 B call <= 3.0 c/b; 1472 B packet <= cycles of 1600 B): {'met' if ok else 'NOT met'}")
    return ok


def main(argv):
    tune = "--tune" in argv
    unrolled = "--unrolled" in argv
    keep = None
    ccs = ["gcc"]
    if "--keep" in argv:
        keep = argv[argv.index("--keep") + 1]
        argv = [a for a in argv if a != keep]
    if "--cc" in argv:
        cc = argv[argv.index("--cc") + 1]
        if cc not in ("gcc", "clang", "both"):
            sys.exit("mca: --cc gcc|clang|both")
        ccs = ["gcc", "clang"] if cc == "both" else [cc]
        argv = [a for a in argv if a != cc]
    flags = [a for a in argv if a not in ("--tune", "--keep", "--unrolled", "--cc")]
    tmp = keep or tempfile.mkdtemp(prefix="vc-mca-")
    os.makedirs(tmp, exist_ok=True)
    try:
        for i, cc in enumerate(ccs):
            if i:
                print()
            report(cc, flags, tune, unrolled, tmp)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
