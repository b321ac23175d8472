"""Helpers for tests/arm64/run.sh (host Python, standard library only).

sysroot.py sources OUTDIR     copy this machine's active apt sources into
                              OUTDIR/sources.list and OUTDIR/sources.list.d/,
                              so a private apt state fetches from the same
                              mirrors (no host name is written in the repo)
sysroot.py fix-links SYSROOT  make absolute symlinks in SYSROOT relative to it
                              (qemu -L and the sysroot's own loader then stay inside)
"""

import glob
import os
import shutil
import sys


def sources(out: str) -> int:
    parts = os.path.join(out, "sources.list.d")
    os.makedirs(parts, exist_ok=True)
    n = 0
    lst = "/etc/apt/sources.list"
    with open(os.path.join(out, "sources.list"), "w") as dst:
        if os.path.exists(lst):
            with open(lst) as f:
                for line in f:
                    if line.strip().startswith("deb ") or line.strip().startswith("deb["):
                        dst.write(line)
                        n += 1
    for path in sorted(
        glob.glob("/etc/apt/sources.list.d/*.sources") + glob.glob("/etc/apt/sources.list.d/*.list")
    ):
        with open(path) as f:
            text = f.read()
        # deb822 stanzas limited to other architectures are useless here but harmless
        shutil.copy(path, parts)
        n += sum(1 for ln in text.splitlines() if ln.strip().startswith(("Types:", "deb ")))
    if n == 0:
        print("sysroot.py: no apt sources found on this machine", file=sys.stderr)
        return 1
    return 0


def fix_links(root: str) -> int:
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                target = os.readlink(p)
                if target.startswith("/"):
                    new = os.path.relpath(root + target, dirpath)
                    os.unlink(p)
                    os.symlink(new, p)
    return 0


if __name__ == "__main__":
    cmd, arg = sys.argv[1], sys.argv[2]
    sys.exit({"sources": sources, "fix-links": fix_links}[cmd](arg))
