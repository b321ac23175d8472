"""Static cycle estimate of the arm64 NH kernels with llvm-mca, in cycles per
byte of the NH loop (the steady state of a 1024-byte NH message, which is where
NHPoly1305 and Adiantum spend their hash time).

Compiles native/mca/nh_entry.c (nh_neon.c and nh_generic.c) with the package's
compiler and flags (aarch64-linux-gnu-gcc -O3 plus build_native.py's CFLAGS, -S),
takes each kernel's main loop (from its loop label to the backward branch), and
runs llvm-mca -iterations=200 on it for each CPU model.  The bytes one loop
iteration covers are counted from its multiplies: a 16-byte NH unit takes 8
32x32->64 products (4 passes x 2), that is 4 umlal/umlal2 or 8 scalar
multiplies (umaddl, umull, madd, mul).

--compare FILE LABEL: also analyse the region between "# LLVM-MCA-BEGIN" and
"# LLVM-MCA-END" in the assembly FILE (e.g. another project's NH loop, laid out
by hand for this comparison; nothing of it is kept here), under LABEL.

Usage: python3 native/mca/nh_mca.py [--models cortex-a53,cortex-a57] [--compare FILE LABEL]
Needs aarch64-linux-gnu-gcc ($CROSS_CC) and llvm-mca ($LLVM_MCA).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mca_report import GCC, JUMP, MCA, function_body, is_insn, local_labels, product_cflags  # noqa: E402

KERNELS = [("vpncrypt neon NH (ld2, umlal/umlal2)", "nh_neon"),
           ("vpncrypt generic NH (scalar C)", "vc_nh_generic")]
VECTOR_MUL = re.compile(r"^\s*umlal2?\s")
SCALAR_MUL = re.compile(r"^\s*(umaddl|umull|madd|mul)\s")


def loop(lines, name):
    """The function's main loop: the longest stretch from a label to a
    conditional branch back to it (an unconditional "b" back is code layout)."""
    body = function_body(lines, name)
    labels = local_labels(body)
    best = None
    for i, l in enumerate(body):
        m = re.match(JUMP, l)
        if m and m.group(1) != "b" and m.group(2) in labels and labels[m.group(2)] < i:
            insns = [x for x in body[labels[m.group(2)]:i + 1] if is_insn(x)]
            if best is None or len(insns) > len(best):
                best = insns
    if best is None:
        sys.exit(f"nh_mca: no loop in {name}")
    return best


def unit_bytes(insns):
    vec = sum(bool(VECTOR_MUL.match(x)) for x in insns)
    sca = sum(bool(SCALAR_MUL.match(x)) for x in insns)
    n = vec / 4 + sca / 8
    if n <= 0 or n != int(n):
        sys.exit(f"nh_mca: {vec} umlal and {sca} scalar multiplies are not whole NH units")
    return 16 * int(n)


def mca_cycles(text, model, iterations=200):
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        out = subprocess.run([MCA, "-mtriple=aarch64-linux-gnu", f"-mcpu={model}",
                              f"-iterations={iterations}", path],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    cycles = [int(m.group(1)) for m in re.finditer(r"Total Cycles:\s+(\d+)", out)]
    if not cycles:
        sys.exit(f"nh_mca: no cycle count from llvm-mca for {model}")
    return sum(cycles) / iterations


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="cortex-a53,cortex-a57")
    ap.add_argument("--compare", nargs=2, action="append", default=[], metavar=("FILE", "LABEL"))
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    with tempfile.TemporaryDirectory() as tmp:
        asm = os.path.join(tmp, "nh.s")
        subprocess.run([GCC] + product_cflags() + ["-S", "-I" + os.path.dirname(HERE),
                                                   os.path.join(HERE, "nh_entry.c"), "-o", asm],
                       check=True)
        lines = open(asm).read().split("\n")
    rows = [(label, loop(lines, fn)) for label, fn in KERNELS]
    for path, label in a.compare:
        text = open(path).read()
        region = text.split("LLVM-MCA-BEGIN", 1)[1].split("LLVM-MCA-END", 1)[0]
        rows.append((label, [x for x in region.split("\n")[1:] if is_insn(x)]))
    print("| NH loop | bytes/iteration | " + " | ".join(f"{m} c/B" for m in models) + " |")
    print("|---|---|" + "---|" * len(models))
    for label, insns in rows:
        nbytes = unit_bytes(insns)
        text = "\n".join(insns) + "\n"
        figs = [mca_cycles(text, m) / nbytes for m in models]
        print(f"| {label} | {nbytes} | " + " | ".join(f"{c:.2f}" for c in figs) + " |")


if __name__ == "__main__":
    main()
