"""Coverage-guided fuzzing of the Python targets with atheris, each for a
bounded time in its own process.  A crash (any exception escaping a target,
see targets.py) fails the test, and libFuzzer writes the input to
tests/fuzz/corpus/<target>/crash-<sha1>: commit it, and test_corpus_replay
runs it on every run from then on.

New coverage found during a run goes to a temporary directory, not to the
repository (libFuzzer writes to the first corpus directory only)."""

import importlib.util
import re
import sys

import pytest

from tests.fuzz.conftest import artifacts, fuzz_seconds, run_fuzzer, tail

# seconds, and libFuzzer -max_len, per target (CI: the whole suite ~90 s on 2 cores)
FUZZERS = {
    "datagram": (14, 2048),
    "uapi": (10, 4096),
    "config": (8, 4096),
}


@pytest.mark.parametrize("target", sorted(FUZZERS))
def test_atheris(target):
    if importlib.util.find_spec("atheris") is None:
        pytest.fail(
            "atheris is not installed: `pip install atheris` (it is in pyproject's "
            "[test] extra, which tests/run.sh installs)",
            pytrace=False,
        )
    seconds, max_len = FUZZERS[target]
    seconds = fuzz_seconds(seconds)
    rc, out, before = run_fuzzer(
        [sys.executable, "-m", "tests.fuzz.run_atheris", target], target, seconds, max_len
    )
    new = sorted(artifacts(target) - before)
    if rc != 0 or new:
        saved = ", ".join(f"tests/fuzz/corpus/{target}/{f}" for f in new) or "none written"
        pytest.fail(
            f"atheris found a failure in target {target!r} (exit {rc}); "
            f"input saved: {saved} (commit it: it is replayed on every run)\n{tail(out)}",
            pytrace=False,
        )
    m = re.search(r"Done (\d+) runs in", out)
    assert m, f"atheris did not finish normally:\n{tail(out)}"
    runs = int(m.group(1))
    print(f"atheris {target}: {runs} runs in {seconds} s")
    assert runs >= 100, f"only {runs} inputs ran in {seconds} s:\n{tail(out)}"
