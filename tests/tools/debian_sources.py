"""Apt sources for another Debian release, read from this machine's own.

    debian_sources.py OUTDIR SUITE

writes OUTDIR/sources.list and OUTDIR/sources.list.d/ for a private apt state
(Dir::Etc::SourceList / SourceParts), with every Debian entry of this machine's
release moved to SUITE: `bookworm` -> SUITE, `bookworm-updates` ->
SUITE-updates, `bookworm-security` -> SUITE-security.  Entries for other
suites (third-party repositories) are left out.  Debian's rolling suites
(`sid`/`unstable`, `experimental`) have no -updates, -security or -backports
suite (a source for one would fail `apt-get update` with "does not have a
Release file"), so for them only the release's own suite is moved and the
others are left out.  The mirrors are read with
tests/arm64/sysroot.py's `sources`, so no host name is written in the repo.
Standard library only (it runs under the system python3).
"""

import glob
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYSROOT = os.path.join(os.path.dirname(HERE), "arm64", "sysroot.py")


def _load_sysroot():
    spec = importlib.util.spec_from_file_location("vc_arm64_sysroot", SYSROOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def machine_codename(os_release: str = "/etc/os-release") -> str:
    with open(os_release) as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    raise SystemExit(f"debian_sources.py: no VERSION_CODENAME in {os_release}")


# suites published without -updates, -security or -backports companions
ROLLING = ("sid", "unstable", "experimental", "rc-buggy")


def _suite(word: str, old: str, new: str):
    """new's suite for one of old's suites (old, old-updates, ...), else None
    (also for a companion suite that new does not have)."""
    if word == old:
        return new
    if word.startswith(old + "-"):
        return None if new in ROLLING else new + word[len(old) :]
    return None


def rewrite_one_line(text: str, old: str, new: str) -> str:
    """`deb [opts] URI SUITE COMPONENTS...` lines: keep old's suites, moved to new."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*(deb)\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)(.*)$", line)
        if not m:
            continue
        suite = _suite(m.group(4), old, new)
        if suite is None:
            continue
        out.append(f"deb {m.group(2) or ''}{m.group(3)} {suite}{m.group(5)}")
    return "\n".join(out) + ("\n" if out else "")


def rewrite_deb822(text: str, old: str, new: str) -> str:
    """deb822 stanzas: keep those with one of old's suites, moved to new."""
    stanzas = re.split(r"\n\s*\n", text)
    out = []
    for stanza in stanzas:
        lines = [ln for ln in stanza.splitlines() if not ln.lstrip().startswith("#")]
        if any(
            ln.lower().startswith("enabled:") and ln.split(":", 1)[1].strip().lower() == "no" for ln in lines
        ):
            continue
        keep, moved = [], []
        for ln in lines:
            if ln.lower().startswith("suites:"):
                moved = [s for s in (_suite(w, old, new) for w in ln.split(":", 1)[1].split()) if s]
                keep.append("Suites: " + " ".join(moved))
            else:
                keep.append(ln)
        if moved:
            out.append("\n".join(keep))
    return "\n\n".join(out) + ("\n" if out else "")


def write_sources(out: str, suite: str) -> int:
    """Fill out/ (sources.list, sources.list.d/); returns the number of entries."""
    old = machine_codename()
    if _load_sysroot().sources(out) != 0:
        return 0
    n = 0
    lst = os.path.join(out, "sources.list")
    with open(lst) as f:
        text = rewrite_one_line(f.read(), old, suite)
    with open(lst, "w") as f:
        f.write(text)
    n += len(text.splitlines())
    for path in sorted(glob.glob(os.path.join(out, "sources.list.d", "*"))):
        with open(path) as f:
            text = f.read()
        text = (rewrite_deb822 if path.endswith(".sources") else rewrite_one_line)(text, old, suite)
        if text:
            with open(path, "w") as f:
                f.write(text)
            n += text.count("Suites:") + sum(1 for ln in text.splitlines() if ln.startswith("deb "))
        else:
            os.unlink(path)
    return n


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: debian_sources.py OUTDIR SUITE")
    if write_sources(sys.argv[1], sys.argv[2]) == 0:
        print(
            f"debian_sources.py: no Debian {machine_codename()} entries in this machine's "
            f"apt sources to move to {sys.argv[2]}",
            file=sys.stderr,
        )
        sys.exit(1)
