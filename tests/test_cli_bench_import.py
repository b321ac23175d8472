"""`vpncrypt show` (and every other command but the benches) does not
import the bench modules: 0.3 s of every `vpncrypt show`, which issue 31
compares with `wg show`.  The benches' commands and their --help still work,
and `vpncrypt --help` still lists them."""

import subprocess
import sys

import pytest

from tests.installed import script

BENCH_MODULES = ("vpncrypt.bench.loopback", "vpncrypt.bench.ciphers", "vpncrypt.bench.tunnel")


def _imported_after(argv: list) -> list:
    """The bench modules imported once build_parser(argv) has parsed argv."""
    code = (
        "import sys\n"
        "from vpncrypt.cli import build_parser\n"
        f"build_parser({argv!r}).parse_args({argv!r})\n"
        f"print(sorted(m for m in {BENCH_MODULES!r} if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout)


@pytest.mark.parametrize("argv", [["show"], ["show", "wg0", "--json"], ["genkey"], ["pubkey"]])
def test_other_commands_do_not_import_the_benches(argv):
    assert _imported_after(argv) == []


def test_a_bench_command_imports_its_modules():
    assert _imported_after(["bench", "crypto"]) == sorted(BENCH_MODULES)


@pytest.mark.parametrize(
    "args, words",
    [
        (["bench", "--help"], ["crypto", "tunnel"]),
        (["loopback-bench", "--help"], ["--json"]),
        (["bench", "crypto", "--help"], ["usage: vpncrypt bench crypto"]),
        (["--help"], ["loopback-bench", "bench", "show"]),
    ],
)
def test_bench_help_still_works(args, words):
    r = subprocess.run([script("vpncrypt"), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for w in words:
        assert w in r.stdout


def test_a_typo_is_answered_with_every_command():
    r = subprocess.run([script("vpncrypt"), "shwo"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "invalid choice: 'shwo'" in r.stderr and "loopback-bench" in r.stderr
