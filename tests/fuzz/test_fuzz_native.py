"""The C fuzz harnesses (native/fuzz/): built with ASan and UBSan
(native/fuzz/build.sh), then
  - libFuzzer (clang -fsanitize=fuzzer) runs each for a bounded time from the
    seed corpus tests/fuzz/corpus/{aead,wg_open}/; a crashing input is written
    there as crash-<sha1>;
  - the gcc-built replay driver (no libFuzzer) runs every saved input, then a
    fixed number of seeded random mutations of them.
Any sanitizer report or failed check fails the test."""

import os
import re
import subprocess

import pytest

from tests.fuzz.conftest import CORPUS, REPO, artifacts, fuzz_seconds, run_fuzzer, tail

# harness -> (corpus target, libFuzzer seconds, -max_len, replay-driver mutations)
HARNESSES = {
    "fuzz_aead": ("aead", 12, 4200, 3000),
    "fuzz_wg": ("wg_open", 8, 8192, 20000),
    "fuzz_offload": ("offload", 8, 70000, 20000),
}
ENV = dict(
    os.environ,
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1",
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
)


def _fail(what, target, rc, before, out):
    new = sorted(artifacts(target) - before)
    saved = ", ".join(f"tests/fuzz/corpus/{target}/{f}" for f in new) or "none written"
    pytest.fail(
        f"{what} found a failure (exit {rc}); input saved: {saved} "
        f"(commit it: it is replayed on every run)\n{tail(out)}",
        pytrace=False,
    )


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_libfuzzer(native_build, harness):
    bindir = native_build.wait()
    target, seconds, max_len, _ = HARNESSES[harness]
    seconds = fuzz_seconds(seconds)
    rc, out, before = run_fuzzer([os.path.join(bindir, harness)], target, seconds, max_len, env=ENV)
    if rc != 0 or artifacts(target) - before:
        _fail(f"libFuzzer {harness}", target, rc, before, out)
    m = re.search(r"Done (\d+) runs in", out)
    assert m and int(m.group(1)) >= 100, f"libFuzzer did not run normally:\n{tail(out)}"
    print(f"libFuzzer {harness}: {m.group(1)} runs in {seconds} s")


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_replay_driver(native_build, harness):
    """The gcc ASan/UBSan build: replays every saved input (seeds and crash-*),
    then runs seeded mutations of them."""
    bindir = native_build.wait()
    target, _, max_len, mutations = HARNESSES[harness]
    seed_dir = os.path.join(CORPUS, target)
    before = artifacts(target)
    cmd = [
        os.path.join(bindir, harness + "_replay"),
        f"-mutate={mutations}",
        "-seed=1",
        f"-max_len={max_len}",
        f"-artifact_prefix={seed_dir}{os.sep}",
        seed_dir,
    ]
    p = subprocess.run(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0 or artifacts(target) - before:
        _fail(f"replay driver {harness}_replay", target, p.returncode, before, out)
    n = len(os.listdir(seed_dir))
    assert f"replayed {n} inputs" in out and f"ran {mutations} mutations" in out, tail(out)
