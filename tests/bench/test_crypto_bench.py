"""Short-mode checks of the crypto benchmark: it runs, and its output has every field
and every implementation.  No timing assertions (benchmarks are not tests)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vpncrypt import crypto
from vpncrypt.bench import ciphers as bench

ROOT = Path(__file__).resolve().parents[2]
BUILD_SH = ROOT / "native" / "bench" / "build.sh"

TINY = [
    "--quick",
    "--json",
    "--sizes",
    "16,1472",
    "--sweep-step",
    "512",
    "--random-count",
    "4",
    "--repeat",
    "1",
    "--min-time",
    "0",
]

RESULT_FIELDS = {
    "level",
    "group",
    "view",
    "size",
    "impl",
    "median_ns",
    "min_ns",
    "max_ns",
    "reps",
    "iters",
    "bytes_per_op",
    "mbps",
    "ratio_vs_ref",
}
TARGET_FIELDS = {"level", "impl", "id", "description", "threshold", "value", "unit", "met", "detail"}
PY_TARGETS = {
    f"py_{view}_{what}"
    for view in ("seal", "open")
    for what in ("1472_vs_cryptography", "1472_vs_pynacl", "min_vs_cryptography")
}
PY_BATCH_TARGET = "py_seal_batch_64x1472_gbps"
C_TARGETS = {
    "c_stream_1472_vs_openssl",
    "c_stream_tcrypt_min_vs_openssl",
    "c_stream_no_size_cliff",
    "c_stream_no_size_cliff_time",
    "c_seal_1472_vs_openssl",
    "c_seal_1472_vs_libsodium",
    "c_open_1472_vs_openssl",
    "c_open_1472_vs_seal",
}


def _have_cc():
    return shutil.which(os.environ.get("CC", "cc")) is not None


def _have(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def _pkg(name):
    return shutil.which("pkg-config") and subprocess.run(["pkg-config", "--exists", name]).returncode == 0


def _run_py(args, capsys):
    rc = bench.main(args)
    out = capsys.readouterr().out
    return rc, out


def _expected_python_impls():
    names = [f"vpncrypt:{k}" for k in crypto.implementations()] + ["vpncrypt-aead"]
    if _have("cryptography"):
        names.append("cryptography")
    if _have("nacl"):
        names.append("pynacl")
    return names


def test_python_json_has_every_field_and_implementation(capsys):
    before = crypto.active_implementation()
    rc, out = _run_py(TINY + ["--no-c-level"], capsys)
    assert rc == 0
    rep = json.loads(out)
    assert crypto.active_implementation() == before  # the bench restores the kernel
    for key in (
        "tool",
        "level",
        "config",
        "platform",
        "default_impl",
        "poly1305",
        "reference",
        "implementations",
        "results",
        "c_level",
        "oneshot",
        "threads",
        "targets",
        "notes",
    ):
        assert key in rep, key
    # the data path sealing on 1 and 2 threads: measured, and the ratio is to one thread
    assert [r["threads"] for r in rep["threads"]] == [1, 2]
    assert all(r["gbps"] > 0 for r in rep["threads"]) and rep["threads"][0]["scaling"] == 1.0
    names = [i["name"] for i in rep["implementations"]]
    assert names == _expected_python_impls()
    assert all(i["verified"] for i in rep["implementations"])
    assert rep["default_impl"] == f"vpncrypt:{before}"
    for r in rep["results"]:
        assert RESULT_FIELDS <= set(r), set(r) ^ RESULT_FIELDS
        assert r["median_ns"] > 0 and r["mbps"] > 0
    groups = {(r["group"], r["view"]) for r in rep["results"]}
    for view in bench.VIEWS:
        for group in ("tcrypt", "random", "sweep"):
            assert (group, view) in groups
    assert ("batch", "seal") in groups
    # every implementation at every point of every view it supports
    impl_unavail = {i["name"]: i["unavailable"] for i in rep["implementations"]}
    points = {(r["group"], r["view"], r["size"]) for r in rep["results"]}
    for g, v, s in points:
        have = {r["impl"] for r in rep["results"] if (r["group"], r["view"], r["size"]) == (g, v, s)}
        want = {n for n in names if v not in impl_unavail[n] or g == "batch"}
        assert have == want, (g, v, s)
    tcrypt = {r["size"] for r in rep["results"] if r["group"] == "tcrypt"}
    assert tcrypt == {16, 1472}
    kernels = {n for n in names if n.startswith("vpncrypt:")}
    for impl in kernels | {"vpncrypt-aead"}:
        ids = {t["id"] for t in rep["targets"] if t["impl"] == impl}
        assert ids == (PY_TARGETS | {PY_BATCH_TARGET} if impl in kernels else PY_TARGETS), impl
    for t in rep["targets"]:
        assert TARGET_FIELDS <= set(t)
        assert t["value"] is not None, t["id"]
        assert t["met"] == (t["value"] >= t["threshold"])
    # the one-shot table: seal and open at every fixed size, with both ratios
    default = rep["default_impl"]
    assert {(r["view"], r["size"]) for r in rep["oneshot"]} == {
        (v, s) for v in ("seal", "open") for s in (16, 1472)
    }
    for row in rep["oneshot"]:
        for col in (
            default,
            "vpncrypt-aead",
            "cryptography",
            "pynacl",
            f"{default} vs cryptography",
            f"{default} vs pynacl",
            "vpncrypt-aead vs cryptography",
        ):
            assert row[col] is not None and row[col] > 0, (row, col)


def test_python_table_output(capsys):
    args = [a for a in TINY if a != "--json"] + ["--no-c-level", "--no-sweep", "--views", "seal"]
    rc, out = _run_py(args, capsys)
    assert rc == 0
    assert "Python AEAD seal" in out and "targets" in out and "Python one-shot calls" in out
    for name in _expected_python_impls():
        assert name in out


def test_impls_selection_and_errors(capsys):
    rc, out = _run_py(TINY + ["--no-c-level", "--no-sweep", "--impls", "generic,cryptography"], capsys)
    if not _have("cryptography"):
        assert rc == 2
        return
    assert rc == 0
    rep = json.loads(out)
    assert [i["name"] for i in rep["implementations"]] == ["vpncrypt:generic", "cryptography"]
    rc = bench.main(TINY + ["--no-c-level", "--impls", "no-such-kernel"])
    assert rc == 2
    assert "unknown implementation" in capsys.readouterr().err


def test_plot_without_matplotlib_errors_clearly(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc = bench.main(TINY + ["--no-c-level", "--plot", str(tmp_path / "p.png")])
    assert rc == 2
    assert "matplotlib" in capsys.readouterr().err


def test_plot_writes_png(capsys, tmp_path):
    png = tmp_path / "p.png"
    rc, _ = _run_py(TINY + ["--no-c-level", "--plot", str(png)], capsys)
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_module_entry_point():
    p = subprocess.run(
        [sys.executable, "-m", "vpncrypt.bench.ciphers", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert p.returncode == 0 and "--c-level" in p.stdout


# ---------------------------------------------------------------- the C bench


@pytest.fixture(scope="module")
def cbench(tmp_path_factory):
    assert _have_cc(), "the C bench needs a C compiler (tests/run.sh installs gcc)"
    exe = tmp_path_factory.mktemp("cbench") / "cbench"
    subprocess.run(["sh", str(BUILD_SH), str(exe)], check=True, capture_output=True)
    return exe


def _expected_c_impls():
    names = [f"vpncrypt:{k}" for k in crypto.implementations()]
    if _pkg("libcrypto"):
        names.append("openssl")
    if _pkg("libsodium"):
        names.append("libsodium")
    return names


C_QUICK = ["--quick", "--repeat", "1", "--min-time", "0"]


def test_cbench_json_every_implementation(cbench):
    p = subprocess.run([str(cbench), *C_QUICK, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    names = [i["name"] for i in rep["implementations"]]
    assert names == _expected_c_impls()
    assert all(i["verified"] for i in rep["implementations"])
    assert rep["op_failures"] == 0
    for view in ("stream", "seal", "open"):
        for size in (16, 64, 256, 1024, 1472, 8192):
            have = {
                r["impl"]
                for r in rep["results"]
                if r["group"] == "tcrypt" and r["view"] == view and r["size"] == size
            }
            assert have == set(names), (view, size)
    sweep = {r["size"] for r in rep["results"] if r["group"] == "sweep"}
    assert sweep == set(range(64, 1537, 8))
    assert {r["impl"] for r in rep["results"] if r["group"] == "batch"} == set(names)
    for r in rep["results"]:
        assert {
            "group",
            "view",
            "size",
            "bytes",
            "impl",
            "median_ns",
            "min_ns",
            "max_ns",
            "iters",
            "gbps",
            "ratio_vs_ref",
        } <= set(r)
        assert r["median_ns"] > 0
    vpn = [n for n in names if n.startswith("vpncrypt:")]
    for impl in vpn:
        ids = {t["id"] for t in rep["targets"] if t["impl"] == impl}
        assert ids == C_TARGETS
    # every vpncrypt open point carries its paired open-against-seal ratio
    for r in rep["results"]:
        if r["view"] == "open":
            assert (r.get("open_vs_seal_ratio", 0) > 0) == (r["impl"] in vpn), r
    if "openssl" in names and "libsodium" in names:
        assert all(t["value"] is not None for t in rep["targets"])


def test_cbench_table_every_implementation(cbench):
    p = subprocess.run([str(cbench), *C_QUICK, "--no-sweep"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for name in _expected_c_impls():
        assert name in p.stdout
    assert "C-level targets" in p.stdout


def test_python_c_level_view(cbench, capsys):
    rc, out = _run_py(TINY + ["--no-sweep", "--cbench", str(cbench), "--views", "stream,seal"], capsys)
    assert rc == 0
    rep = json.loads(out)
    c = rep["c_level"]
    assert c and "error" not in c, c
    assert [i["name"] for i in c["implementations"]] == _expected_c_impls()
    assert all(r["impl"] != "vpncrypt-aead" for r in c["results"])
    assert {r["size"] for r in c["results"] if r["group"] == "tcrypt"} == {16, 1472}
    assert {r["view"] for r in c["results"]} == {"stream", "seal", "batch"}
    assert {t["id"] for t in rep["targets"] if t["level"] == "c"} == C_TARGETS
