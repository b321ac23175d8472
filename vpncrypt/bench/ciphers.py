"""``vpncrypt bench crypto``: ChaCha20 / ChaCha20-Poly1305 throughput, vpncrypt
against OpenSSL (through ``cryptography``) and libsodium (through pynacl); and
NHPoly1305 and Adiantum against OpenSSL's AES-256-XTS (--wide-block, default on).

Running it
    vpncrypt bench crypto [options]               (or python3 -m vpncrypt bench crypto)
    python3 -m vpncrypt.bench.ciphers [options]    (the same, without the CLI)
    native/bench/build.sh /tmp/cbench && /tmp/cbench [--quick] [--json]
                                                  (the C level on its own)

    --quick                 small run: repeat 3, 2 ms batches, sweep step 64
    --sizes 16,64,...       the fixed sizes, default every power of two 16..8192 and 1472
                            (the C level: 16 64 256 1024 1472 8192 unless given)
    --sweep / --no-sweep    every size 8..1496 step --sweep-step (default 8; on)
    --views stream,seal,open
    --impls NAME,...        e.g. vpncrypt (all kernels), avx2, vpncrypt:generic,
                            cryptography, pynacl
    --repeat N --min-time S repetitions (median taken) and the least time per batch
    --poly1305 NAME         pin the Poly1305 kernel (default: its own default)
    --c-level/--no-c-level  also build and run the C bench (default on), whose
                            tables and C targets are folded into this report
    --json                  machine-readable results on stdout instead of tables
    --plot FILE.png         throughput against size per implementation (matplotlib)
    --progress              progress on stderr even when it is not a terminal

What is measured
    Sizes: the tcrypt sizes; a sweep of every size from 8 to 1496 step 8; and
    "rand", a fixed-seed list of lengths drawn uniformly from [64, 1088), reported
    as total bytes over total time.  Views: "stream" (ChaCha20 keystream XOR),
    "seal" and "open" (ChaCha20-Poly1305, no AAD), one packet per call, as an
    application calls each library:
        vpncrypt:<kernel>  vpncrypt.crypto.chacha20_xor / seal / open (the C-API
                           entry point) with the ChaCha kernel switched by
                           use_implementation(); Poly1305 follows its own
                           default unless --poly1305 is given
        vpncrypt-aead      vpncrypt.crypto.AEAD(key).seal / .open, the key object
                           made once (default kernels; no stream view)
        cryptography       Cipher(algorithms.ChaCha20(key, ctr||nonce), None)
                           .encryptor().update(); ChaCha20Poly1305(key)
                           .encrypt / .decrypt (key object made once, as a session)
        pynacl             crypto_stream_chacha20_ietf_xor (when this pynacl has it);
                           crypto_aead_chacha20poly1305_ietf_encrypt / decrypt
    Batch: vpncrypt.crypto.seal_batch of 64 packets of 1472 bytes in one call
    (GB/s), against 64 per-packet seals for the others.

    Method for a noisy machine: each implementation is first calibrated so that
    one timed batch takes at least --min-time (half of it for sweep points);
    then every repetition runs one batch of each implementation, round-robin
    with a rotating start (so drift and neighbours hit all of them alike); the
    figure is the median over repetitions (time.perf_counter_ns, gc off while
    timing; a batch during which the thread was descheduled, i.e. its wall
    time exceeds its thread CPU time by more than 3%, is run again).  Ratios are
    against the reference, OpenSSL ("cryptography" here,
    "openssl" EVP at the C level), taken per repetition (the batches of one
    round are neighbours in time) and then the median of those.
    Every implementation's output is checked against vpncrypt's generic kernel
    before timing; a mismatch is reported and makes the exit status 3.

    The C level (native/bench/cbench.c, built by native/bench/build.sh with
    native/*.c at -O3 and libcrypto / libsodium from pkg-config) times the same
    views at the tcrypt sizes with no FFI in the way, a stream sweep 64..1536 for
    the size-cliff check, and the packed batch; see that file's header.

    The one-shot table puts the per-call medians of seal and open side by side
    at every fixed size: vpncrypt (default kernel, module function and key
    object), cryptography (its ChaCha20Poly1305 object reused) and pynacl, with
    the paired ratios of their time over ours.

    The "targets" section computes each ratio of the speed goals and marks it
    met / NOT MET; it never fails the run (benchmarks are not tests).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import repeat as _repeat
from pathlib import Path
from typing import Any

from vpncrypt.bench.report import load_pyplot

# The fixed sizes of the Python level: every power of two from 16 to 8192 and
# the 1472-byte packet (the C level keeps the tcrypt sizes 16 64 256 1024 1472
# 8192 unless --sizes is given).
TCRYPT_SIZES = (16, 32, 64, 128, 256, 512, 1024, 1472, 2048, 4096, 8192)
ONESHOT_TARGET_SIZE = 1472
SWEEP_START, SWEEP_STOP, SWEEP_STEP = 8, 1496, 8
RANDOM_RANGE = (64, 1088)
VIEWS = ("stream", "seal", "open")
BATCH_N, BATCH_LEN = 64, 1472
REFERENCE = "cryptography"
C_REFERENCE = "openssl"
RAND_LABEL = "rand"

KEY = bytes(range(0x80, 0xA0))
NONCE = bytes(range(1, 13))

NATIVE_DIR = Path(__file__).resolve().parents[2] / "native"
BUILD_SH = NATIVE_DIR / "bench" / "build.sh"


# --------------------------------------------------------------------------- options


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _sizes(text: str) -> list[int]:
    try:
        out = [int(p) for p in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be integers: {text!r}") from None
    if not out or any(s < 1 or s > 1 << 20 for s in out):
        raise argparse.ArgumentTypeError("sizes must be in 1..1048576")
    return out


def _views(text: str) -> list[str]:
    out = _csv(text)
    bad = [v for v in out if v not in VIEWS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"views are {', '.join(VIEWS)}; got {text!r}")
    return [v for v in VIEWS if v in out]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``vpncrypt bench crypto`` options to parser."""
    g = parser.add_argument_group("what to run")
    switch = argparse.BooleanOptionalAction  # --x (on unless told) and --no-x
    g.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        metavar="N,N,...",
        help="fixed packet sizes (default: powers of two 16..8192 and 1472)",
    )
    g.add_argument("--sweep", action=switch, default=True, help="also every size 8..1496 (default)")
    g.add_argument(
        "--sweep-step",
        type=int,
        default=None,
        metavar="N",
        help="sweep step in bytes (default 8; 64 with --quick)",
    )
    g.add_argument(
        "--random-count",
        type=int,
        default=None,
        metavar="N",
        help="how many random lengths from [64, 1088) (default 256; 64 with --quick; 0: none)",
    )
    g.add_argument(
        "--views", type=_views, default=list(VIEWS), metavar="V,V", help="stream, seal, open (default all)"
    )
    g.add_argument(
        "--impls",
        type=_csv,
        default=None,
        metavar="NAME,...",
        help="implementations: vpncrypt (every kernel), vpncrypt:KERNEL or KERNEL, "
        "cryptography, pynacl (default all)",
    )
    g.add_argument(
        "--poly1305",
        default=None,
        metavar="KERNEL",
        help="pin the Poly1305 kernel (default: its own default)",
    )
    g.add_argument(
        "--batch", action=switch, default=True, help="seal_batch of 64 x 1472 B in one call (default)"
    )
    g.add_argument(
        "--threads",
        default="1,2",
        metavar="N,N",
        help="the data path's sealing (the session table, 64 x 1472 B a call, the "
        "GIL released) on N threads at once, for each N (default 1,2; empty: none)",
    )
    g.add_argument(
        "--wide-block",
        action=switch,
        default=True,
        help="NHPoly1305 and Adiantum at 512 and 4096 B against OpenSSL's AES-256-XTS (default)",
    )
    g.add_argument("--c-level", action=switch, default=True, help="build and run the C bench too (default)")
    g.add_argument(
        "--cbench", default=None, metavar="PATH", help="use this cbench binary instead of building one"
    )
    m = parser.add_argument_group("method")
    m.add_argument(
        "--repeat",
        type=int,
        default=None,
        metavar="N",
        help="repetitions per point; the median is reported (default 7; 3 with --quick)",
    )
    m.add_argument(
        "--min-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="least time per timed batch (default 0.005; 0.002 with --quick; half of it for sweep points)",
    )
    m.add_argument("--quick", action="store_true", help="a short run")
    m.add_argument("--seed", type=int, default=1, help="seed of the random lengths")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="JSON on stdout instead of tables")
    o.add_argument(
        "--plot", default=None, metavar="FILE.png", help="plot throughput against size (needs matplotlib)"
    )
    o.add_argument("--progress", action="store_true", help="show progress on stderr even if not a tty")


# --------------------------------------------------------------------------- implementations


class Impl:
    """One implementation: a name, and per view a factory of timed runners."""

    def __init__(self, name: str, library: str, version: str = ""):
        self.name = name
        self.library = library
        self.version = version
        self.unavailable: dict[str, str] = {}  # view -> reason
        self.verified = True
        self.errors: list[str] = []

    def prepare(self) -> None:
        """Called before each timed batch (vpncrypt switches its kernel here)."""

    # Each returns fn(payload) -> output, used for the check; runner() and
    # batch_runner() time the same library calls through _loop().
    def op(self, view: str):
        raise NotImplementedError

    def runner(self, view: str, items):
        """run(count) timing `view` over items (each implementation has one)."""
        raise NotImplementedError

    def batch_runner(self, nonces, pts):
        """run(count) timing one batch seal of pts under nonces."""
        raise NotImplementedError


def _loop(f, calls):
    """run(count): f(*args) for every args in calls, count times over.  The one
    timed loop of every implementation and view, so that the figures differ by
    the calls alone."""
    calls = [tuple(args) for args in calls]

    def run(count):
        for _ in _repeat(None, count):
            for args in calls:
                f(*args)

    return run


class VpncryptImpl(Impl):
    def __init__(self, kernel: str):
        super().__init__(f"vpncrypt:{kernel}", "vpncrypt")
        import vpncrypt
        from vpncrypt import crypto

        self.kernel = kernel
        self.crypto = crypto
        self.version = vpncrypt.__version__

    def prepare(self):
        self.crypto.use_implementation(self.kernel)

    def op(self, view):
        c = self.crypto
        if view == "stream":
            return lambda x: c.chacha20_xor(KEY, NONCE, x)
        if view == "seal":
            return lambda x: c.seal(KEY, NONCE, x)
        return lambda x: c.open(KEY, NONCE, x)

    def runner(self, view, items):
        c = self.crypto
        f = {"stream": c.chacha20_xor, "seal": c.seal, "open": c.open}[view]
        return _loop(f, [(KEY, NONCE, x) for x in items])

    def batch_runner(self, nonces, pts):
        return _loop(self.crypto.seal_batch, [(KEY, nonces, pts)])


class VpncryptAeadImpl(Impl):
    """vpncrypt.crypto.AEAD(key): the key object made once, as with cryptography."""

    NAME = "vpncrypt-aead"

    def __init__(self):
        import vpncrypt
        from vpncrypt import crypto

        super().__init__(self.NAME, "vpncrypt", vpncrypt.__version__)
        self.aead = crypto.AEAD(KEY)
        self.unavailable["stream"] = "AEAD objects seal and open only"

    def op(self, view):
        return (
            (lambda x: self.aead.seal(NONCE, x)) if view == "seal" else (lambda x: self.aead.open(NONCE, x))
        )

    def runner(self, view, items):
        f = self.aead.seal if view == "seal" else self.aead.open
        return _loop(f, [(NONCE, x) for x in items])

    def batch_runner(self, nonces, pts):
        return _loop(self.aead.seal, zip(nonces, pts))


class CryptographyImpl(Impl):
    def __init__(self):
        import cryptography
        from cryptography.hazmat.backends.openssl import backend
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

        super().__init__(
            "cryptography", "cryptography", f"{cryptography.__version__} ({backend.openssl_version_text()})"
        )
        self.aead = ChaCha20Poly1305(KEY)
        iv = b"\0\0\0\0" + NONCE  # LE32 block counter 0, then the 12-byte nonce

        def stream(x, _C=Cipher, _A=algorithms.ChaCha20, _k=KEY, _iv=iv):
            return _C(_A(_k, _iv), None).encryptor().update(x)

        self._stream = stream

    def op(self, view):
        if view == "stream":
            return self._stream
        if view == "seal":
            return lambda x: self.aead.encrypt(NONCE, x, None)
        return lambda x: self.aead.decrypt(NONCE, x, None)

    def runner(self, view, items):
        if view == "stream":
            return _loop(self._stream, [(x,) for x in items])
        f = self.aead.encrypt if view == "seal" else self.aead.decrypt
        return _loop(f, [(NONCE, x, None) for x in items])

    def batch_runner(self, nonces, pts):
        return _loop(self.aead.encrypt, [(n, p, None) for n, p in zip(nonces, pts)])


class PynaclImpl(Impl):
    def __init__(self):
        import nacl
        from nacl import bindings as nb

        super().__init__("pynacl", "pynacl", f"{nacl.__version__} (libsodium)")
        self.nb = nb
        self.xor = getattr(nb, "crypto_stream_chacha20_ietf_xor", None)
        if self.xor is None:
            self.unavailable["stream"] = f"pynacl {nacl.__version__} has no crypto_stream_chacha20_ietf_xor"

    def op(self, view):
        nb = self.nb
        if view == "stream":
            return lambda x: self.xor(x, NONCE, KEY)
        if view == "seal":
            return lambda x: nb.crypto_aead_chacha20poly1305_ietf_encrypt(x, None, NONCE, KEY)
        return lambda x: nb.crypto_aead_chacha20poly1305_ietf_decrypt(x, None, NONCE, KEY)

    def runner(self, view, items):
        nb = self.nb
        if view == "stream":
            return _loop(self.xor, [(x, NONCE, KEY) for x in items])
        f = (
            nb.crypto_aead_chacha20poly1305_ietf_encrypt
            if view == "seal"
            else nb.crypto_aead_chacha20poly1305_ietf_decrypt
        )
        return _loop(f, [(x, None, NONCE, KEY) for x in items])

    def batch_runner(self, nonces, pts):
        enc = self.nb.crypto_aead_chacha20poly1305_ietf_encrypt
        return _loop(enc, [(p, None, n, KEY) for n, p in zip(nonces, pts)])


def discover(wanted: list[str] | None) -> tuple[list[Impl], list[str]]:
    """The implementations to run (and notes on the ones that cannot)."""
    from vpncrypt import crypto

    notes = []
    kernels = crypto.implementations()
    every = [f"vpncrypt:{k}" for k in kernels] + [VpncryptAeadImpl.NAME, "cryptography", "pynacl"]
    if wanted:
        chosen = []
        for w in wanted:
            if w == "vpncrypt":
                hits = every[: len(kernels)]
            elif w in ("openssl",):
                hits = ["cryptography"]
            elif w in ("libsodium", "sodium", "nacl"):
                hits = ["pynacl"]
            else:
                hits = [e for e in every if e == w or e == f"vpncrypt:{w}"]
            if not hits:
                raise ValueError(f"unknown implementation {w!r}; available: {', '.join(every)}")
            chosen += [h for h in hits if h not in chosen]
    else:
        chosen = every
    impls: list[Impl] = []
    for name in every:
        if name not in chosen:
            continue
        try:
            if name.startswith("vpncrypt:"):
                impls.append(VpncryptImpl(name.split(":", 1)[1]))
            elif name == VpncryptAeadImpl.NAME:
                impls.append(VpncryptAeadImpl())
            elif name == "cryptography":
                impls.append(CryptographyImpl())
            else:
                impls.append(PynaclImpl())
        except ImportError as e:
            notes.append(f"{name}: not installed ({e})")
    return impls, notes


# --------------------------------------------------------------------------- measuring


class Progress:
    def __init__(self, total: int, enabled: bool):
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        now = time.monotonic()
        el = now - self.start
        eta = el / self.done * (self.total - self.done)
        msg = (
            f"[bench {100 * self.done // self.total:3d}%  {self.done}/{self.total}  eta {eta:4.0f}s] {label}"
        )
        if self.tty:
            sys.stderr.write("\r" + msg[:100].ljust(100))
            if self.done >= self.total:
                sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()
        elif now - self.last >= 2.0 or self.done >= self.total:
            sys.stderr.write(msg + "\n")
            sys.stderr.flush()
            self.last = now

    def note(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(("\r" + " " * 100 + "\r" if self.tty else "") + text + "\n")
            sys.stderr.flush()


def _time_once(impl: Impl, run, count: int) -> float:
    impl.prepare()
    t0 = time.perf_counter_ns()
    run(count)
    return time.perf_counter_ns() - t0


PREEMPTED = [0]


def _timed_sample(impl: Impl, run, count: int) -> float:
    """A timed batch (perf_counter); one during which this thread was off the CPU
    for more than 3% (wall minus thread CPU time) is run again, up to 8 times,
    keeping the fastest if every try was."""
    best = float("inf")
    for _ in range(8):
        impl.prepare()
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        run(count)
        t = time.perf_counter_ns() - t0
        c = time.thread_time_ns() - c0
        if t - c <= 0.03 * t + 20000:
            return t
        PREEMPTED[0] += 1
        best = min(best, t)
    return best


def _calibrate(impl: Impl, run, min_ns: float) -> int:
    count = 1
    for _ in range(40):
        t = _time_once(impl, run, count)
        if t >= min_ns:
            return count
        nxt = int(count * min_ns / t * 1.1) + 1 if t > 0 else count * 16
        count = max(count * 2, min(nxt, count * 64))
    return count


def measure_point(entries, repeat: int, min_time: float) -> list[dict]:
    """entries: [(impl, run, ops_per_count, bytes_per_op)].  Round-robin, median."""
    min_ns = min_time * 1e9
    counts = [_calibrate(impl, run, min_ns) for impl, run, _, _ in entries]
    samples: list[list[float]] = [[] for _ in entries]
    n = len(entries)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeat):
            for k in range(n):
                j = (k + r) % n
                impl, run, ops, _ = entries[j]
                samples[j].append(_timed_sample(impl, run, counts[j]) / (counts[j] * ops))
    finally:
        if gc_was:
            gc.enable()
    out = []
    for (impl, _, ops, nbytes), s, c in zip(entries, samples, counts):
        med = statistics.median(s)
        out.append(
            {
                "impl": impl.name,
                "median_ns": round(med, 2),
                "min_ns": round(min(s), 2),
                "max_ns": round(max(s), 2),
                "reps": len(s),
                "iters": c * ops,
                "bytes_per_op": nbytes,
                "mbps": round(nbytes / med * 1e3, 3),
                "samples_ns": [round(x, 2) for x in s],
            }
        )
    return out


def paired_ratio(a: dict | None, b: dict | None) -> float | None:
    """Throughput of a over throughput of b: the median over repetitions of
    b's time / a's time in the same round (neighbours in time, so a burst of
    load on the machine hits both)."""
    if not a or not b:
        return None
    pairs = [y / x for x, y in zip(a["samples_ns"], b["samples_ns"]) if x > 0]
    return round(statistics.median(pairs), 4) if pairs else None


def _payload(n: int) -> bytes:
    return bytes((i * 131 + 7) & 0xFF for i in range(n))


def verify(impls: list[Impl], views: list[str]) -> list[str]:
    """Check every implementation against vpncrypt's generic kernel."""
    from vpncrypt import crypto

    problems = []
    saved = crypto.active_implementation()
    for size in (1, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 1472, 1500, 8192):
        pt = _payload(size)
        crypto.use_implementation("generic")
        want = {
            "stream": crypto.chacha20_xor(KEY, NONCE, pt),
            "seal": crypto.seal(KEY, NONCE, pt),
            "open": pt,
        }
        sealed = want["seal"]
        crypto.use_implementation(saved)
        for impl in impls:
            for view in views:
                if view in impl.unavailable:
                    continue
                impl.prepare()
                try:
                    got = impl.op(view)(sealed if view == "open" else pt)
                except Exception as e:  # noqa: BLE001 - any failure is a wrong result
                    got = f"{type(e).__name__}: {e}"
                if isinstance(got, str) or bytes(got) != want[view]:
                    if impl.verified:
                        problems.append(f"{impl.name}: WRONG {view} output at {size} bytes")
                    impl.verified = False
    crypto.use_implementation(saved)
    return problems


# --------------------------------------------------------------------------- C level


def run_c_level(args, impl_names: list[str], progress_on: bool, note) -> dict:
    """Build (unless --cbench) and run the C bench; its parsed JSON or {"error": ...}."""
    tmp = None
    build_warnings: list[str] = []
    try:
        if args.cbench:
            exe = args.cbench
        else:
            if not BUILD_SH.exists():
                return {"error": f"{BUILD_SH} not found (the C bench needs a source checkout)"}
            if not (shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")):
                return {"error": "no C compiler (cc) found"}
            tmp = tempfile.mkdtemp(prefix="vpncrypt-cbench-")
            exe = os.path.join(tmp, "cbench")
            note("building the C bench ...")
            b = subprocess.run(["sh", str(BUILD_SH), exe], capture_output=True, text=True)
            if b.returncode != 0:
                return {"error": "build failed:\n" + (b.stderr or b.stdout)[-2000:]}
            build_warnings = [
                ln.split("WARNING: ", 1)[1] for ln in b.stderr.splitlines() if "WARNING: left out" in ln
            ]
        cmd = [exe, "--json"]
        if args.quick:
            cmd.append("--quick")
        if args.repeat_given:
            cmd += ["--repeat", str(args.repeat)]
        c_sizes = [str(s) for s in args.sizes if s <= 8192][:64]
        if args.sizes_given and c_sizes:
            cmd += ["--sizes", ",".join(c_sizes)]
        cmd += ["--views", ",".join(args.views)]
        if not args.sweep:
            cmd.append("--no-sweep")
        if not args.batch:
            cmd.append("--no-batch")
        if args.poly1305:
            cmd += ["--poly", args.poly1305]
        c_names = []
        for n in impl_names:
            if n == VpncryptAeadImpl.NAME:
                continue  # the C level has no key-object form
            c_names.append({"cryptography": "openssl", "pynacl": "libsodium"}.get(n, n))
        cmd += ["--impls", ",".join(c_names)]
        if progress_on:
            cmd.append("--progress")
        note("running the C bench: " + " ".join(cmd[1:]))
        p = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=None if progress_on else subprocess.PIPE, text=True
        )
        try:
            data = json.loads(p.stdout)
        except json.JSONDecodeError:
            return {"error": f"cbench exit {p.returncode}: {(p.stderr or '')[-2000:]}"}
        data["exit_status"] = p.returncode
        data["command"] = cmd
        data["build_warnings"] = build_warnings
        return data
    except OSError as e:
        return {"error": f"could not run the C bench: {e}"}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- targets


def _find(results, group, view, size, impl):
    for r in results:
        if r["group"] == group and r["view"] == view and r["size"] == size and r["impl"] == impl:
            return r
    return None


def _target(impl, tid, desc, thr, val, unit="x", detail=""):
    return {
        "level": "python",
        "impl": impl,
        "id": tid,
        "threshold": thr,
        "value": val,
        "unit": unit,
        "met": None if val is None else val >= thr,
        "detail": detail,
        "description": desc,
    }


def python_targets(results: list[dict], vpn_impls: list[str]) -> list[dict]:
    """Issue 13's goals for each vpncrypt implementation: seal and open of one
    1472-byte packet >= 1.5x cryptography and >= 4x pynacl; never slower than
    cryptography at any measured size from 16 to 8192 bytes; and the batch."""
    out = []
    size = ONESHOT_TARGET_SIZE
    for impl in vpn_impls:
        for view in ("seal", "open"):
            for other, thr in (("cryptography", 1.5), ("pynacl", 4.0)):
                val = paired_ratio(
                    _find(results, "tcrypt", view, size, impl), _find(results, "tcrypt", view, size, other)
                )
                out.append(
                    _target(
                        impl,
                        f"py_{view}_{size}_vs_{other}",
                        f"Python one {view} {size} >= {thr:g}x {other}",
                        thr,
                        val,
                    )
                )
            worst = None
            for r in results:
                if (
                    r["impl"] != impl
                    or r["view"] != view
                    or r["size"] is None
                    or r["group"] not in ("tcrypt", "sweep")
                    or not 16 <= r["size"] <= 8192
                ):
                    continue
                q = paired_ratio(r, _find(results, r["group"], view, r["size"], "cryptography"))
                if q is not None and (worst is None or q < worst[0]):
                    worst = (q, r["size"])
            out.append(
                _target(
                    impl,
                    f"py_{view}_min_vs_cryptography",
                    f"Python one {view}, every size 16..8192: >= 1x cryptography",
                    1.0,
                    worst[0] if worst else None,
                    detail=f"worst at {worst[1]} B" if worst else "",
                )
            )
        if not impl.startswith("vpncrypt:"):
            continue  # the key object has no batch form
        a = _find(results, "batch", "seal", BATCH_LEN, impl)
        val = round(a["bytes_per_op"] / a["median_ns"], 4) if a else None
        out.append(
            _target(
                impl,
                "py_seal_batch_64x1472_gbps",
                "Python seal_batch 64 x 1472 in one call >= 1.5 GB/s",
                1.5,
                val,
                unit="GB/s",
            )
        )
    return out


def oneshot_summary(results: list[dict], default_impl: str) -> list[dict]:
    """Per-call medians of seal and open at every fixed size: vpncrypt (default
    kernel; the key object), cryptography and pynacl, with the paired ratios of
    their time over vpncrypt's (same rounds)."""
    rows = []
    for view in ("seal", "open"):
        sizes = sorted({r["size"] for r in results if r["group"] == "tcrypt" and r["view"] == view})
        for size in sizes:
            row = {"view": view, "size": size}
            for impl in (default_impl, VpncryptAeadImpl.NAME, "cryptography", "pynacl"):
                r = _find(results, "tcrypt", view, size, impl)
                row[impl] = r["median_ns"] if r else None
            for mine in (default_impl, VpncryptAeadImpl.NAME):
                for other in ("cryptography", "pynacl"):
                    row[f"{mine} vs {other}"] = paired_ratio(
                        _find(results, "tcrypt", view, size, mine),
                        _find(results, "tcrypt", view, size, other),
                    )
            rows.append(row)
    return rows


def format_oneshot(rows: list[dict], default_impl: str) -> list[str]:
    if not rows:
        return []
    aead = VpncryptAeadImpl.NAME
    lines = [
        "",
        f"Python one-shot calls (ns per call, median; ratio = their time / ours, paired; "
        f"vpncrypt = {default_impl}, aead = {aead})",
        f"{'':5} {'size':>6} {'vpncrypt':>9} {'aead':>9} {'crypto':>9} {'pynacl':>9}"
        f" {'x crypto':>9} {'x pynacl':>9} {'aead x crypto':>14}",
    ]

    def ns(v):
        return f"{v:9.0f}" if v is not None else f"{'-':>9}"

    def ratio(v, w=9):
        return f"{v:{w}.2f}" if v is not None else f"{'-':>{w}}"

    for row in rows:
        lines.append(
            f"{row['view']:5} {row['size']:6d} {ns(row[default_impl])} {ns(row[aead])}"
            f" {ns(row['cryptography'])} {ns(row['pynacl'])}"
            f" {ratio(row[f'{default_impl} vs cryptography'])} {ratio(row[f'{default_impl} vs pynacl'])}"
            f" {ratio(row[f'{aead} vs cryptography'], 14)}"
        )
    return lines


def c_targets(c: dict | None) -> list[dict]:
    if not c or "targets" not in c:
        return []
    out = []
    for t in c["targets"]:
        out.append(
            {
                "level": "c",
                "impl": t["impl"],
                "id": t["id"],
                "threshold": t["threshold"],
                "value": t["value"],
                "unit": "x",
                "met": t["met"],
                "detail": t.get("detail", ""),
                "description": t["description"],
            }
        )
    return out


# --------------------------------------------------------------------------- output


def _fmt_size(s):
    return RAND_LABEL if s is None else str(s)


def format_table(results, group, view, impls, ref, title, unit="MB/s") -> list[str]:
    rows = [r for r in results if r["group"] == group and r["view"] == view]
    if not rows:
        return []
    scale = 1.0 if unit == "MB/s" else 1e-3
    sizes = []
    for r in rows:
        if r["size"] not in sizes:
            sizes.append(r["size"])
    present = [i for i in impls if any(r["impl"] == i for r in rows)]
    w = max(20, max(len(i) for i in present) + 2)
    lines = [
        "",
        f"{title} ({unit}, median{'; ratio vs ' + ref if ref in present else ''})",
        f"{'size':>7}" + "".join(f"{i:>{w}}" for i in present),
    ]
    for s in sizes:
        line = f"{_fmt_size(s):>7}"
        for i in present:
            r = _find(rows, group, view, s, i)
            if r is None:
                line += f"{'-':>{w}}"
                continue
            v = r["mbps"] * scale
            cell = f"{v:.3f}" if v < 100 else f"{v:.1f}"
            if i != ref and r.get("ratio_vs_ref") is not None:
                cell += f" ({r['ratio_vs_ref']:5.2f}x)"
            line += f"{cell:>{w}}"
        lines.append(line)
    return lines


def format_sweep(results, view, impls, ref, title, unit="MB/s") -> list[str]:
    rows = [r for r in results if r["group"] == "sweep" and r["view"] == view]
    if not rows:
        return []
    scale = 1.0 if unit == "MB/s" else 1e-3
    lo, hi = min(r["size"] for r in rows), max(r["size"] for r in rows)
    lines = ["", f"{title} sizes {lo}..{hi} ({unit} min / median / max; ratio vs {ref} min / median)"]
    for i in impls:
        mine = [r for r in rows if r["impl"] == i]
        if not mine:
            continue
        t = sorted(r["mbps"] * scale for r in mine)
        line = f"  {i:<22} {t[0]:9.3f} / {statistics.median(t):9.3f} / {t[-1]:9.3f}"
        if i != ref:
            ratios = [(r["ratio_vs_ref"], r["size"]) for r in mine if r.get("ratio_vs_ref") is not None]
            if ratios:
                mn = min(ratios)
                line += f"   {mn[0]:5.2f}x (at {mn[1]} B) / {statistics.median(q for q, _ in ratios):5.2f}x"
        lines.append(line)
    return lines


def format_targets(targets: list[dict], default_impl: str) -> list[str]:
    if not targets:
        return []
    impls = []
    for t in targets:
        if t["impl"] not in impls:
            impls.append(t["impl"])
    impls.sort(key=lambda i: i != default_impl)  # the default kernel first
    heads = [i.split(":", 1)[-1] + ("*" if i == default_impl else "") for i in impls]
    lines = [
        "",
        "targets (report only; * = the default kernel)",
        f"  {'':<56}" + "".join(f"{h:>17}" for h in heads),
    ]
    order = []
    for t in targets:
        if t["id"] not in order:
            order.append(t["id"])
    for tid in order:
        row = [t for t in targets if t["id"] == tid]
        desc = row[0]["description"]
        line = f"  {desc[:56]:<56}"
        for i in impls:
            hit = next((x for x in row if x["impl"] == i), None)
            if hit is None or hit["value"] is None:
                cell = "n/a"
            else:
                u = "x" if hit["unit"] == "x" else " GB/s"
                cell = f"{hit['value']:.2f}{u} {'met' if hit['met'] else 'NOT'}"
            line += f"{cell:>17}"
        lines.append(line)
        d = next((x for x in row if x["impl"] == default_impl and x.get("detail")), None)
        if d:
            lines.append(f"    ({default_impl.split(':', 1)[-1]}: {d['detail']})")
    return lines


def plot(path: str, report: dict, plt) -> None:
    levels: list[tuple[str, Any, str, float | None]] = [("Python", report["results"], "MB/s", 1.0)]
    c = report.get("c_level") or {}
    if c.get("results"):
        levels.append(("C", c["results"], "GB/s", None))
    views = report["config"]["views"]
    fig, axes = plt.subplots(
        len(levels), len(views), figsize=(6 * len(views), 4.5 * len(levels)), squeeze=False
    )
    for row, (lname, results, unit, _) in enumerate(levels):
        for col, view in enumerate(views):
            ax = axes[row][col]
            pts = [
                r
                for r in results
                if r["view"] == view and r["group"] in ("tcrypt", "sweep") and r["size"] is not None
            ]
            names = []
            for r in pts:
                if r["impl"] not in names:
                    names.append(r["impl"])
            for name in names:
                mine = sorted(
                    (r["size"], r.get("mbps", r.get("gbps", 0) * 1e3)) for r in pts if r["impl"] == name
                )
                xs = [s for s, _ in mine]
                ys = [v if unit == "MB/s" else v / 1e3 for _, v in mine]
                ax.plot(xs, ys, marker=".", markersize=3, linewidth=1, label=name)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bytes per packet")
            ax.set_ylabel(unit)
            ax.set_title(f"{lname}: {view}")
            ax.grid(True, alpha=0.3)
            if names:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def thread_scaling(counts, seconds: float, repeat: int) -> list:
    """Seal 64 x 1472 B batches for one peer in the native session table on
    each of N threads at once (as the daemon's data threads do); GB/s of
    plaintext, the median of `repeat` runs, and the ratio to one thread."""
    import threading
    from vpncrypt._native import ffi
    from vpncrypt.transport import Session, new_table

    table = new_table("native")
    pid = table.add_peer()
    table.route_add(pid, "10.0.0.0/8")
    table.set_endpoint(pid, ("192.0.2.1", 51820))
    table.reserve_index(1, pid)
    table.install(pid, Session(1, 2, bytes(range(32)), bytes(range(32, 64)), True), 0.0)
    pkt = bytes.fromhex("450005c000000000401100000a0000010a000002") + bytes(1452)
    out = []
    for n in counts:
        runs = []
        for _ in range(repeat):
            done, stop = [0] * n, threading.Event()

            def work(k):
                b = table.batch(BATCH_N, 1536)
                slab = ffi.new("uint8_t[]", BATCH_N * 1536)
                off = ffi.new("uint32_t[]", [i * 1536 for i in range(BATCH_N)])
                lens = ffi.new("uint32_t[]", [len(pkt)] * BATCH_N)
                for i in range(BATCH_N):
                    ffi.memmove(slab + i * 1536, pkt, len(pkt))
                while not stop.is_set():
                    done[k] += b.seal(slab, off, lens, BATCH_N, 1.0)

            ts = [threading.Thread(target=work, args=(k,)) for k in range(n)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            time.sleep(seconds)
            stop.set()
            for t in ts:
                t.join()
            runs.append(sum(done) * len(pkt) / (time.perf_counter() - t0) / 1e9)
        out.append({"threads": n, "gbps": statistics.median(runs), "runs": runs})
    for r in out:
        r["scaling"] = r["gbps"] / out[0]["gbps"] if out[0]["gbps"] else None
    return out


WIDE_SIZES = (512, 4096)
XTS_REF = "openssl-aes-256-xts"


class _Wide(Impl):
    """A wide-block row: prepare() pins the NH kernel (and ChaCha's default)."""

    def __init__(self, name, library, nh=None):
        super().__init__(name, library)
        self.nh = nh

    def prepare(self):
        if self.nh:
            from vpncrypt import crypto

            crypto.use_nh_implementation(self.nh)


def wide_block(repeat: int, min_time: float) -> tuple[list[dict], list[str]]:
    """NHPoly1305 (each NH kernel) and Adiantum encrypt / decrypt (XChaCha12 and
    XChaCha20, the default NH kernel and the generic one; the Adiantum(key)
    object made once, as a disk's key is), one message per call, against
    OpenSSL's AES-256-XTS through cryptography (a Cipher per message, since XTS
    takes its tweak there; one sector a call).  Returns (rows, problems)."""
    from vpncrypt import crypto

    problems: list[str] = []
    saved = crypto.active_nh_implementation()
    key, tweak = bytes(range(32)), bytes(range(100, 132))
    nh_key = bytes((7 * i + 3) & 0xFF for i in range(1088))
    rows: list[dict] = []
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        have_xts = True
    except ImportError:
        have_xts = False
        problems.append("wide block: cryptography is not installed, so no AES-256-XTS reference")
    try:
        for size in WIDE_SIZES:
            data = _payload(size)
            entries = []
            for kern in crypto.nh_implementations():
                im = _Wide(f"vpncrypt nhpoly1305 nh:{kern}", "vpncrypt", kern)
                entries.append((im, _loop(crypto.nhpoly1305, [(nh_key, data)]), 1, size, "nhpoly1305"))
            kerns = [saved] + (["generic"] if saved != "generic" else [])
            for rounds in (12, 20):
                a = crypto.Adiantum(key, rounds)
                crypto.use_nh_implementation("generic")
                want = a.encrypt(tweak, data)
                crypto.use_nh_implementation(saved)
                if a.encrypt(tweak, data) != want or a.decrypt(tweak, want) != data:
                    problems.append(f"wide block: Adiantum-{rounds} kernels disagree at {size} B")
                for kern in kerns:
                    for view, fn, arg in (("encrypt", a.encrypt, data), ("decrypt", a.decrypt, want)):
                        im = _Wide(f"vpncrypt adiantum{rounds} nh:{kern}", "vpncrypt", kern)
                        entries.append(
                            (
                                im,
                                _loop(fn, [(tweak, arg)]),
                                1,
                                size,
                                f"adiantum-xchacha{rounds}-aes {view}",
                            )
                        )
            if have_xts:
                xkey = bytes(range(64))
                xtweak = bytes(16)

                def xts_enc(d):
                    e = Cipher(algorithms.AES(xkey), modes.XTS(xtweak)).encryptor()
                    return e.update(d) + e.finalize()

                def xts_dec(d):
                    e = Cipher(algorithms.AES(xkey), modes.XTS(xtweak)).decryptor()
                    return e.update(d) + e.finalize()

                xct = xts_enc(data)
                for view, xfn, arg in (("encrypt", xts_enc, data), ("decrypt", xts_dec, xct)):
                    entries.append(
                        (_Wide(XTS_REF, "cryptography"), _loop(xfn, [(arg,)]), 1, size, f"aes-256-xts {view}")
                    )
            timed = measure_point([e[:4] for e in entries], repeat, min_time)
            for e, r in zip(entries, timed):
                r.update(level="python", group="wide-block", view=e[4], size=size)
                rows.append(r)
    finally:
        crypto.use_nh_implementation(saved)
    for r in rows:
        view = r["view"].rsplit(" ", 1)[-1]
        ref = next(
            (
                x
                for x in rows
                if x["impl"] == XTS_REF and x["size"] == r["size"] and x["view"] == f"aes-256-xts {view}"
            ),
            None,
        )
        r["ratio_vs_xts"] = paired_ratio(r, ref) if view in ("encrypt", "decrypt") else None
    return rows, problems


def format_wide_block(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    out = [
        "",
        "Wide-block: NHPoly1305 and Adiantum, one message per call (MB/s; x: speed over "
        "OpenSSL AES-256-XTS in the same round)",
    ]
    out.append(f"  {'what':<34} {'implementation':<30}" + "".join(f"{s:>16}" for s in WIDE_SIZES))
    seen = []
    for r in rows:
        k = (r["view"], r["impl"])
        if k not in seen:
            seen.append(k)
    for view, impl in seen:
        cells = []
        for s in WIDE_SIZES:
            hit = next((x for x in rows if x["view"] == view and x["impl"] == impl and x["size"] == s), None)
            if hit is None:
                cells.append(f"{'-':>16}")
            else:
                ratio = hit.get("ratio_vs_xts")
                cells.append(f"{hit['mbps']:>9.0f}" + (f" x{ratio:<5.2f}" if ratio else " " * 7))
        out.append(f"  {view:<34} {impl:<30}" + "".join(cells))
    return out


def _c_level_notes(c: dict | None) -> list[str]:
    """What the C level's run tells the reader beside its figures."""
    notes = []
    if c is not None and "error" in c:
        notes.append("C level: " + c["error"])
    if c is not None and c.get("build_warnings"):
        notes += ["C bench built with " + w for w in c["build_warnings"]]
    if c is not None and c.get("exit_status"):
        notes.append(
            f"C level: cbench exited with status {c['exit_status']} "
            "(3: an implementation gave wrong output; 4: an operation failed)"
        )
    return notes


def _points(args, nrand: int, step: int) -> tuple[list[int], list[int], list]:
    """The random lengths, the sweep's sizes, and the points to measure:
    (group, view, size or None, lengths or None)."""
    rng = random.Random(args.seed)
    rand_lens = [rng.randrange(*RANDOM_RANGE) for _ in range(nrand)]
    sweep_sizes = list(range(SWEEP_START, SWEEP_STOP + 1, step)) if args.sweep else []
    points: list[tuple[str, str, int | None, list[int] | None]] = []
    for view in args.views:
        for s in args.sizes:
            points.append(("tcrypt", view, s, None))
        if rand_lens:
            points.append(("random", view, None, rand_lens))
        for s in sweep_sizes:
            points.append(("sweep", view, s, None))
    if args.batch and "seal" in args.views:
        points.append(("batch", "seal", BATCH_LEN, None))
    return rand_lens, sweep_sizes, points


def _measure_python(
    points: list, impls: list, repeat: int, min_time: float, prog, saved: tuple
) -> list[dict]:
    """Every point at the Python level, each implementation in turn; the
    kernels selected before (saved: ChaCha20, Poly1305) selected again after."""
    from vpncrypt import crypto

    results: list[dict] = []
    sealed_cache: dict[int, bytes] = {}

    def sealed(n):
        if n not in sealed_cache:
            crypto.use_implementation("generic")
            sealed_cache[n] = crypto.seal(KEY, NONCE, _payload(n))
        return sealed_cache[n]

    try:
        for group, view, size, lens in points:
            if group == "batch":
                pts = [_payload(BATCH_LEN) for _ in range(BATCH_N)]
                nonces = [i.to_bytes(4, "little") + NONCE[4:] for i in range(BATCH_N)]
                entries: list[tuple[Impl, Any, int, float]] = [
                    (im, im.batch_runner(nonces, pts), 1, BATCH_N * BATCH_LEN) for im in impls
                ]
            else:
                ls: list[int] = lens if lens is not None else [size or 0]  # size is set when lens is not
                items = [sealed(n) if view == "open" else _payload(n) for n in ls]
                nbytes = sum(ls) / len(ls)
                entries = [
                    (im, im.runner(view, items), len(items), nbytes)
                    for im in impls
                    if view not in im.unavailable
                ]
            for r in measure_point(entries, repeat, min_time / 2 if group == "sweep" else min_time):
                r.update(level="python", group=group, view=view, size=size)
                results.append(r)
            prog.step(f"{view} {RAND_LABEL if size is None else size} ({group})")
    finally:
        crypto.use_implementation(saved[0])
        crypto.use_poly1305_implementation(saved[1])
    return results


def _report(args, impls: list, min_time: float, lengths: tuple, kernels: tuple) -> dict:
    """The run's record without its figures (run() adds them): the settings,
    the platform, the implementations.  lengths: the sweep's sizes and the
    random lengths; kernels: the ChaCha20 and Poly1305 kernels selected."""
    sweep_sizes, rand_lens = lengths
    default_impl = f"vpncrypt:{kernels[0]}"
    return {
        "tool": "vpncrypt bench crypto",
        "level": "python",
        "config": {
            "sizes": args.sizes,
            "sweep": sweep_sizes,
            "random_lengths": {
                "range": list(RANDOM_RANGE),
                "count": len(rand_lens),
                "seed": args.seed,
                "mean": round(sum(rand_lens) / len(rand_lens), 2) if rand_lens else None,
            },
            "views": list(args.views),
            "repeat": args.repeat,
            "min_time": min_time,
            "quick": bool(args.quick),
            "batch": {"packets": BATCH_N, "len": BATCH_LEN} if args.batch else None,
            "c_level": bool(args.c_level),
        },
        "platform": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "system": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "poly1305": args.poly1305 or kernels[1],
        "reference": REFERENCE,
        "implementations": [
            {
                "name": i.name,
                "library": i.library,
                "version": i.version,
                "verified": i.verified,
                "unavailable": i.unavailable,
                "default": i.name == default_impl,
            }
            for i in impls
        ],
        "preempted_batches_rerun": PREEMPTED[0],
    }


def _text(report: dict) -> list[str]:
    """The report as the tables printed without --json."""
    names = [i["name"] for i in report["implementations"]]
    vpn = [i["name"] for i in report["implementations"] if i["library"] == "vpncrypt"]
    default_impl = report["default_impl"]
    saved_chacha = default_impl.split(":", 1)[1]
    results, c, oneshot = report["results"], report["c_level"], report["oneshot"]
    wide, threads, targets = report["wide_block"], report["threads"], report["targets"]
    repeat, min_time = report["config"]["repeat"], report["config"]["min_time"]
    views = report["config"]["views"]
    out = [
        "vpncrypt bench crypto: ChaCha kernels "
        f"{', '.join(k.split(':')[1] for k in vpn if ':' in k) or '-'} "
        f"(default {saved_chacha}), Poly1305 {report['poly1305']}; "
        f"median of {repeat}, >= {min_time * 1e3:g} ms per batch"
    ]
    for i in report["implementations"]:
        out.append(f"  {i['name']:<20} {i['version']}" + ("" if i["verified"] else "   WRONG OUTPUT"))
    titles = {"stream": "ChaCha20 stream", "seal": "AEAD seal", "open": "AEAD open"}
    for view in views:
        out += format_table(results, "tcrypt", view, names, REFERENCE, f"Python {titles[view]}")
        out += format_table(
            results,
            "random",
            view,
            names,
            REFERENCE,
            f"Python {titles[view]}, random lengths [{RANDOM_RANGE[0]}, {RANDOM_RANGE[1]})",
        )
        out += format_sweep(results, view, names, REFERENCE, f"Python {titles[view]} sweep")
    out += format_table(
        results,
        "batch",
        "seal",
        names,
        REFERENCE,
        f"Python seal batch {BATCH_N} x {BATCH_LEN} B (vpncrypt: seal_batch, one call)",
        "GB/s",
    )
    if c and c.get("results"):
        cn = [i["name"] for i in c["implementations"]]
        cres = [dict(r, mbps=r["gbps"] * 1e3) for r in c["results"]]
        for view in views:
            out += format_table(cres, "tcrypt", view, cn, C_REFERENCE, f"C {titles[view]}", "GB/s")
        out += format_sweep(cres, "stream", cn, C_REFERENCE, "C ChaCha20 stream sweep", "GB/s")
        out += format_table(
            cres,
            "batch",
            "batch",
            cn,
            C_REFERENCE,
            f"C seal batch {BATCH_N} x {BATCH_LEN} B (vpncrypt: one packed call)",
            "GB/s",
        )
    out += format_oneshot(oneshot, default_impl)
    out += format_wide_block(wide)
    if threads:
        out.append("")
        out.append(
            f"Data path sealing on N threads at once (session table, {BATCH_N} x 1472 B "
            f"a call, GIL released), median of 3"
        )
        for r in threads:
            out.append(f"  {r['threads']} thread(s): {r['gbps']:6.2f} GB/s   x{r['scaling']:.2f}")
    out += format_targets(targets, default_impl)
    for n in report["notes"]:
        out.append(f"note: {n}")
    return out


def run(args) -> int:
    """Run the benchmark for parsed args; returns the exit status."""
    plt: Any = load_pyplot("vpncrypt bench crypto") if args.plot else None
    if args.plot and plt is None:
        return 2

    from vpncrypt import crypto

    args.repeat_given = args.repeat is not None
    args.sizes_given = args.sizes is not None
    repeat = args.repeat if args.repeat is not None else (3 if args.quick else 7)
    min_time = args.min_time if args.min_time is not None else (0.002 if args.quick else 0.005)
    step = args.sweep_step or (64 if args.quick else SWEEP_STEP)
    nrand = args.random_count if args.random_count is not None else (64 if args.quick else 256)
    sizes = args.sizes or list(TCRYPT_SIZES)
    args.repeat, args.sizes = max(1, repeat), sizes
    if step < 1 or nrand < 0 or min_time < 0:
        print(
            "vpncrypt bench crypto: --sweep-step, --random-count, --min-time must be positive",
            file=sys.stderr,
        )
        return 2

    saved_chacha = crypto.active_implementation()
    saved_poly = crypto.active_poly1305_implementation()
    try:
        if args.poly1305:
            crypto.use_poly1305_implementation(args.poly1305)
        impls, notes = discover(args.impls)
    except ValueError as e:
        print(f"vpncrypt bench crypto: {e}", file=sys.stderr)
        return 2
    if not impls:
        print("vpncrypt bench crypto: no implementation to run", file=sys.stderr)
        return 2
    for i in impls:
        notes += [f"{i.name} {v}: left out, {why}" for v, why in i.unavailable.items() if v in args.views]
    names = [i.name for i in impls]
    vpn = [i.name for i in impls if i.library == "vpncrypt"]
    default_impl = f"vpncrypt:{saved_chacha}"
    progress_on = args.progress or sys.stderr.isatty()

    rand_lens, sweep_sizes, points = _points(args, nrand, step)

    prog = Progress(len(points), progress_on)
    problems = verify(impls, list(args.views))
    for p in problems:
        prog.note("WARNING: " + p)

    results = _measure_python(points, impls, args.repeat, min_time, prog, (saved_chacha, saved_poly))

    for r in results:
        ref = _find(results, r["group"], r["view"], r["size"], REFERENCE)
        r["ratio_vs_ref"] = paired_ratio(r, ref)

    c = run_c_level(args, names, progress_on, prog.note) if args.c_level else None
    notes += _c_level_notes(c)

    try:
        thread_counts = [int(x) for x in _csv(args.threads)] if args.threads else []
    except ValueError:
        thread_counts = []
    threads = thread_scaling(thread_counts, 0.2 if args.quick else 0.5, 3) if thread_counts else []

    wide, wide_problems = wide_block(args.repeat, min_time) if args.wide_block else ([], [])
    problems += wide_problems

    targets = python_targets(results, vpn) + c_targets(c)
    oneshot = oneshot_summary(results, default_impl)
    report = _report(args, impls, min_time, (sweep_sizes, rand_lens), (saved_chacha, saved_poly))
    report.update(
        default_impl=default_impl,
        results=results,
        c_level=c,
        oneshot=oneshot,
        threads=threads,
        wide_block=wide,
        targets=targets,
        notes=notes + problems,
    )

    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n".join(_text(report)))

    if args.plot:
        plot(args.plot, report, plt)
        if not args.json:
            print(f"plot written to {args.plot}")
    if problems or (c and c.get("exit_status") == 3):
        return 3
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="vpncrypt bench crypto",
        description="Benchmark vpncrypt's ChaCha20-Poly1305 against "
        "OpenSSL (cryptography) and libsodium (pynacl).",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
