"""Shared pieces of the fuzz suite.

The C harnesses take ~15 s to build with sanitizers; the build starts in the
background as soon as the first fuzz test runs (the atheris runs use one core
meanwhile), and the native tests wait for it.

Times: each fuzzer runs for a few seconds in CI (see FUZZ_SECONDS in the test
modules); VPNCRYPT_FUZZ_SECONDS=N runs every one for N seconds instead (the
soak mode, e.g. 600).
"""

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
ARTIFACT_PREFIXES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


def fuzz_seconds(default: int) -> int:
    v = os.environ.get("VPNCRYPT_FUZZ_SECONDS")
    return int(v) if v else default


def artifacts(target: str) -> set:
    d = os.path.join(CORPUS, target)
    return {f for f in os.listdir(d) if f.startswith(ARTIFACT_PREFIXES)} if os.path.isdir(d) else set()


def run_fuzzer(prefix: list, target: str, seconds: int, max_len: int, env=None) -> tuple:
    """Run a libFuzzer-style fuzzer (`prefix`: its command line before the corpus
    directories) over `target`'s corpus for `seconds`: new inputs go to a scratch
    directory, failing ones into the corpus.  (exit status, output, the corpus's
    artifacts before the run)."""
    seed_dir = os.path.join(CORPUS, target)
    before = artifacts(target)
    with tempfile.TemporaryDirectory(prefix=f"vc-fuzz-{target}-") as work:
        cmd = [
            *prefix,
            work,
            seed_dir,
            f"-max_total_time={seconds}",
            f"-max_len={max_len}",
            "-timeout=20",
            "-rss_limit_mb=4096",
            "-report_slow_units=100000",
            "-print_final_stats=1",
            f"-artifact_prefix={seed_dir}{os.sep}",
        ]
        p = subprocess.run(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=seconds + 120
        )
    return p.returncode, p.stdout.decode(errors="replace"), before


def tail(text: str, n: int = 60) -> str:
    lines = [ln for ln in text.splitlines() if "# Uses:" not in ln]
    return "\n".join(lines[-n:])


class NativeBuild:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="vc-fuzz-")
        self.log = os.path.join(self.dir, "build.log")
        self.proc = None
        self.rc = None

    def start(self):
        script = os.path.join(REPO, "native", "fuzz", "build.sh")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["sh", script, os.path.join(self.dir, "bin"), "all"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )

    def wait(self) -> str:
        """The directory of the built harnesses; fails the test if the build failed."""
        if self.rc is None:
            self.rc = self.proc.wait(timeout=300)
        if self.rc != 0:
            with open(self.log, errors="replace") as f:
                pytest.fail(
                    "native/fuzz/build.sh failed (clang with libFuzzer/ASan/UBSan and gcc "
                    "with ASan/UBSan are needed: Debian packages clang, libclang-rt-14-dev, "
                    "gcc):\n" + tail(f.read()),
                    pytrace=False,
                )
        return os.path.join(self.dir, "bin")

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the build's own process group
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def native_build():
    b = NativeBuild()
    b.start()
    yield b
    b.cleanup()
