"""The installed package holds the operator's benches only (`vpncrypt
loopback-bench`, `vpncrypt bench crypto`, `vpncrypt bench tunnel` and what
they import); the lab benches only this project's tests and benchmarks need
live in tests/benchlab/, which no wheel installs, under names no other module
of the repository has."""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.benchlab import REPO, lab_module
from tests.installed import script

# The lab benches, by the names they had in the package, and by their names now.
LAB_IN_PACKAGE = ("flood", "storm", "uapi", "metrics", "handshakeload", "rounds", "iobench", "lab")
LAB_COMMANDS = ("handshake_flood", "reconnect_storm", "uapi_load", "scrape_load", "rounds", "iobench")
OPERATOR_BENCH_MODULES = {
    "__init__",
    "ciphers",  # vpncrypt bench crypto
    "tunnel",  # vpncrypt bench tunnel, with its lab, byte check and qdisc
    "nslab",
    "streamcheck",
    "qdisc",
    "proxypair",  # vpncrypt bench tunnel's proxy pairings: the pairing, its SOCKS5 load, the delay relay
    "proxyload",
    "delayrelay",
    "loopback",  # vpncrypt loopback-bench, with its limit
    "limit",
    "machine",
    "report",
}


def _wheel_modules() -> list[tuple[str, str]]:
    """(package, module) of every module a wheel of this tree gets: the
    packages setuptools finds with pyproject.toml's [tool.setuptools.packages.find]
    (setup.py names no packages), each with its .py files."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pip's own copy of the same parser
        from pip._vendor import tomli as tomllib
    from setuptools import find_packages

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
    with open(os.path.join(REPO, "setup.py")) as f:
        assert "packages" not in f.read()  # else setup.py's list would be the one installed
    packages = find_packages(where=REPO, include=find["include"], exclude=find.get("exclude", ()))
    return [
        (pkg, name[:-3])
        for pkg in packages
        for name in os.listdir(os.path.join(REPO, *pkg.split(".")))
        if name.endswith(".py")
    ]


def test_a_wheel_holds_vpncrypt_and_of_the_benches_only_the_operators():
    modules = _wheel_modules()
    assert modules, "setuptools found no module to install"
    packages = {pkg for pkg, _ in modules}
    assert all(p == "vpncrypt" or p.startswith("vpncrypt.") for p in packages), sorted(packages)
    assert "vpncrypt.bench" in packages and "vpncrypt.daemon" in packages
    bench = {mod for pkg, mod in modules if pkg == "vpncrypt.bench"}
    assert bench == OPERATOR_BENCH_MODULES


@pytest.mark.parametrize("name", LAB_IN_PACKAGE)
def test_no_lab_bench_is_importable_from_the_package(name):
    assert importlib.util.find_spec(f"vpncrypt.bench.{name}") is None


def _repo_modules() -> dict[str, list[str]]:
    """Module name (a .py file's, a package directory's) -> where, over the
    repository's Python sources (the venv and caches left out)."""
    found: dict[str, list[str]] = {}
    for top in ("vpncrypt", "tests", "native"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            rel = os.path.relpath(root, REPO)
            if "__init__.py" in files and rel != top:
                found.setdefault(os.path.basename(root), []).append(rel)
            for f in files:
                if f.endswith(".py") and f != "__init__.py":
                    found.setdefault(f[:-3], []).append(os.path.join(rel, f))
    return found


def test_the_bench_and_lab_modules_have_names_no_other_module_has():
    """Each module of vpncrypt/bench/ and tests/benchlab/, and the lab's
    package itself.  (`bench` is three on purpose: the package, its command
    line vpncrypt/cli/bench.py, named for the command as each module of
    vpncrypt/cli/ is, and its tests in tests/bench/, as tests/ mirrors the
    package.)"""
    found = _repo_modules()
    ours = [
        f[:-3]
        for d in ("vpncrypt/bench", "tests/benchlab")
        for f in os.listdir(os.path.join(REPO, d))
        if f.endswith(".py") and f != "__init__.py"
    ] + ["benchlab"]
    clashes = {name: found[name] for name in ours if len(found.get(name, [])) > 1}
    assert not clashes


def test_bench_help_lists_the_operator_benches_only():
    out = subprocess.run([script("vpncrypt"), "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # argparse lists each subcommand as an indented line "    NAME   help"
    listed = [
        line.split()[0]
        for line in out.stdout.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert listed == ["crypto", "tunnel"], out.stdout
    for gone in ("flood", "storm", "uapi"):
        proc = subprocess.run(
            [script("vpncrypt"), "bench", gone, "--help"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.parametrize("name", LAB_COMMANDS)
def test_each_lab_bench_runs_as_a_module_from_any_directory(name, tmp_path):
    """`python3 -m tests.benchlab.NAME --help` from the root, and the same
    module through lab_module (how the benches start their children in a
    namespace) from elsewhere."""
    for cmd, cwd in (
        ([sys.executable, "-m", f"tests.benchlab.{name}", "--help"], REPO),
        (lab_module(f"tests.benchlab.{name}", "--help"), str(tmp_path)),
    ):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.startswith(f"usage: python3 -m tests.benchlab.{name}"), out.stdout[:300]
