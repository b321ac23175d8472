#!/usr/bin/env bash
# The arm64 run: the crypto suite on the NEON kernels, under qemu-aarch64.
#
#  1. An arm64 Python sysroot from Debian's arm64 packages (python3, cffi, pynacl,
#     cryptography, pytest, hypothesis and their dependencies), fetched with a
#     private apt state from this machine's own apt sources, unpacked with dpkg -x
#     and byte-compiled once.  Cached outside the repo, keyed by the package list
#     and this script: ${VPNCRYPT_ARM64_CACHE:-${XDG_CACHE_HOME:-/var/cache}/vpncrypt-arm64-sysroot}/<key>.
#  2. Both extensions cross-compiled with aarch64-linux-gnu-gcc, with -Werror, into a staging
#     copy of the package (the host build in vpncrypt/ is left alone): the cffi
#     module (the C core) and the C-API module vpncrypt._oneshot (the one-message
#     calls, native/pyext/oneshot.c), so the suite runs on the same entry points
#     as on the host, on every arm64 kernel.
#  3. QEMU_CPU=cortex-a57 qemu-aarch64-static ... python3 -m pytest tests/crypto tests/arm64 tests/dataplane/test_checksum.py
#     (ARMv8.0: nothing newer may slip in).
#  4. The daemon end to end (tests/arm64/daemon_e2e.py, driven by the host venv's
#     Python, as root): `vpncrypt up` of the arm64 build under qemu in a network
#     namespace against Debian's x86 wireguard-go, with 1 and 2 data-plane
#     threads: handshake, ping both ways, 1472-byte UDP round trips through
#     asyncio-dgram with every byte checked, `wg show` through its UAPI, and the
#     kernels it reports (`vpncrypt show`, loopback-bench --json); once as a
#     cortex-a57 (NEON kernel "neon") and once as a cortex-a53 ("neon4").
#  3b. The Adiantum / NHPoly1305 tests once more as a cortex-a53 (the in-order
#     core the NEON NH kernel is scheduled for; ARMv8.0 too).
# Anything missing is an error; nothing is skipped.  Extra arguments go to pytest;
# a first argument --crypto-only stops after step 3b (a developer's quick run:
# the daemon end to end of step 4 is left out, which CI never does).
set -euo pipefail
crypto_only=
if [ "${1:-}" = --crypto-only ]; then crypto_only=1; shift; fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/arm64"
. "$repo/tests/tools/private_apt.sh"  # private_apt: the apt state of the sysroot's download

packages=(python3 python3-cffi python3-nacl python3-cryptography python3-pytest
          python3-hypothesis libpython3.11-dev)
cross_cc=${CROSS_CC:-aarch64-linux-gnu-gcc}
qemu=${QEMU_AARCH64:-qemu-aarch64-static}
for tool in "$cross_cc" "$qemu" apt-get dpkg python3 ip wg wireguard-go ping; do
    command -v "$tool" >/dev/null || { echo "tests/arm64/run.sh: $tool not found" >&2; exit 1; }
done

build_sysroot() {
    local t0=$SECONDS work
    work=$(mktemp -d "$cache_root/build.XXXXXX")
    trap 'rm -rf "$work"' RETURN
    local apt_opts
    private_apt "$work" arm64
    apt_opts+=(-o APT::Install-Recommends=0)
    mkdir -p "$work/root"
    python3 "$here/sysroot.py" sources "$work/apt/etc"
    echo "tests/arm64/run.sh: building the arm64 sysroot in $sysroot" >&2
    apt-get "${apt_opts[@]}" -qq update
    # empty dpkg status: the whole dependency closure is downloaded
    apt-get "${apt_opts[@]}" -qq -y --download-only install "${packages[@]}" >/dev/null
    local debs=("$work"/apt/cache/archives/*.deb)
    [ -e "${debs[0]}" ] || { echo "tests/arm64/run.sh: apt downloaded nothing" >&2; return 1; }
    for deb in "${debs[@]}"; do dpkg -x "$deb" "$work/root"; done
    python3 "$here/sysroot.py" fix-links "$work/root"
    local py="$work/root/usr/bin/python3"
    [ -e "$py" ] || { echo "tests/arm64/run.sh: no python3 in the sysroot" >&2; return 1; }
    # byte-compile once (PYTHONDONTWRITEBYTECODE is set in CI): the arm64 Python
    # itself, so the .pyc files are exactly the ones it looks for
    QEMU_CPU=cortex-a57 "$qemu" -L "$work/root" "$py" -m compileall -q -j 0 \
        -s "$work/root" -p / "$work/root/usr/lib/python3.11" "$work/root/usr/lib/python3/dist-packages" \
        >/dev/null 2>&1 || true   # a few test files in the stdlib are meant not to compile
    [ -n "$(ls "$work/root/usr/lib/python3/dist-packages/_pytest/__pycache__/"*.cpython-311.pyc 2>/dev/null)" ] \
        || { echo "tests/arm64/run.sh: byte-compiling the sysroot failed" >&2; return 1; }
    printf '%s\n' "${packages[@]}" > "$work/root/.vpncrypt-packages"
    rm -rf "$sysroot"
    mv "$work/root" "$sysroot"
    # sysroots for other package lists or script versions are stale now
    find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name 'build.*' -exec rm -rf {} +
    echo "tests/arm64/run.sh: sysroot built in $((SECONDS - t0)) s ($(ls "$work"/apt/cache/archives/*.deb | wc -l) packages)" >&2
}

# The cache key: the package list and the code that builds the sysroot (not the
# rest of this script, so that changing how the tests run keeps the sysroot).
key=$( { printf '%s\n' "${packages[@]}"; declare -f build_sysroot private_apt; cat "$here/sysroot.py"; } \
       | sha256sum | cut -c1-16)
cache_root=${VPNCRYPT_ARM64_CACHE:-${XDG_CACHE_HOME:-/var/cache}/vpncrypt-arm64-sysroot}
sysroot="$cache_root/$key"
mkdir -p "$cache_root"
if [ ! -f "$sysroot/.vpncrypt-packages" ]; then
    build_sysroot
fi
for mod in cffi nacl cryptography pytest hypothesis; do
    [ -d "$sysroot/usr/lib/python3/dist-packages/$mod" ] \
        || { echo "tests/arm64/run.sh: $mod missing from the sysroot" >&2; exit 1; }
done
pyinc="$sysroot/usr/include/python3.11"
pyconf="$sysroot/usr/include/aarch64-linux-gnu/python3.11"
[ -f "$pyinc/Python.h" ] && [ -f "$pyconf/pyconfig.h" ] \
    || { echo "tests/arm64/run.sh: Python headers missing from the sysroot" >&2; exit 1; }

# Staging copy: the package (without the host build) and the tests it runs.
stage=$(mktemp -d "${TMPDIR:-/tmp}/vpncrypt-arm64.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tests"
( cd "$repo" && tar cf - --exclude=__pycache__ --exclude='*.so' vpncrypt tests/__init__.py tests/crypto \
      tests/arm64 tests/vectors tests/dataplane/__init__.py tests/dataplane/offload_ref.py \
      tests/dataplane/test_checksum.py pyproject.toml ) | ( cd "$stage" && tar xf - )

# Host Python with cffi (the test venv's, else python3) emits the module's C;
# failing that the arm64 one does it under qemu.
host_py=python3
for cand in "${VPNCRYPT_VENV:-$repo/.venv}/bin/python" python3; do
    if "$cand" -c "import cffi" 2>/dev/null; then host_py=$cand; break; fi
done
# The arm64 python behind a host wrapper: without binfmt_misc, a test that starts
# sys.executable in a subprocess needs the wrapper (qemu's -0 makes it argv[0],
# hence sys.executable, in every nested interpreter too).
export QEMU_CPU=cortex-a57
mkdir -p "$stage/bin"
qemu_path=$(command -v "$qemu")
cat > "$stage/bin/python3" <<WRAP
#!/bin/sh
QEMU_CPU=\${QEMU_CPU:-cortex-a57} exec "$qemu_path" -L "$sysroot" -0 "\$0" "$sysroot/usr/bin/python3" "\$@"
WRAP
# and the arm64 `vpncrypt` command (-P: the package from the stage, never from
# the current directory)
cat > "$stage/bin/vpncrypt" <<WRAP
#!/bin/sh
PYTHONPATH="$stage" exec "$stage/bin/python3" -P -m vpncrypt "\$@"
WRAP
chmod +x "$stage/bin/python3" "$stage/bin/vpncrypt"
run_arm() { "$stage/bin/python3" "$@"; }
if "$host_py" -c "import cffi" 2>/dev/null; then
    (cd "$repo" && "$host_py" native/build_native.py --emit-c "$stage/_native.c")
else
    (cd "$repo" && run_arm native/build_native.py --emit-c "$stage/_native.c")
fi
# read_list FILE NAME: the string list assigned to NAME at the top level of FILE
read_list() {
    python3 -c 'import ast, sys
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == sys.argv[2]:
        print("\n".join(ast.literal_eval(node.value)))' "$1" "$2"
}
mapfile -t cflags < <(read_list "$repo/native/build_native.py" CFLAGS)
[ ${#cflags[@]} -gt 0 ] || { echo "tests/arm64/run.sh: could not read CFLAGS from build_native.py" >&2; exit 1; }
mapfile -t oneshot_cflags < <(read_list "$repo/setup.py" ONESHOT_CFLAGS)
[ ${#oneshot_cflags[@]} -gt 0 ] || { echo "tests/arm64/run.sh: could not read ONESHOT_CFLAGS from setup.py" >&2; exit 1; }
# -Werror, as the host build in tests/run.sh: a warning in native/ on arm64 fails the run.
cflags+=(-Werror)
oneshot_cflags+=(-Werror)
so="$stage/vpncrypt/_native.cpython-311-aarch64-linux-gnu.so"
"$cross_cc" -shared -fPIC "${cflags[@]}" -I "$repo/native" -I "$pyinc" -idirafter "$sysroot/usr/include" \
    "$stage/_native.c" "$repo"/native/*.c -o "$so"
"$cross_cc" -shared -fPIC "${oneshot_cflags[@]}" -I "$repo/native" -I "$pyinc" -idirafter "$sysroot/usr/include" \
    "$repo/native/pyext/oneshot.c" -o "$stage/vpncrypt/_oneshot.cpython-311-aarch64-linux-gnu.so"

# The arm64 tests' own C helper (core classification from cpuinfo / MIDR), run
# under qemu by tests/arm64.
"$cross_cc" -static -O2 -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Werror -I "$repo/native" \
    "$here/midr_test.c" "$repo/native/cpu.c" -o "$stage/midr_test"

cd "$stage"
export PYTHONPATH="$stage" VPNCRYPT_GUARD_MAX="${VPNCRYPT_GUARD_MAX:-700}"
export VPNCRYPT_ARM64_MIDR_TEST="$stage/midr_test" VPNCRYPT_ARM64_QEMU="$qemu"
unset VPNCRYPT_CHACHA_IMPL VPNCRYPT_POLY1305_IMPL
run_arm -c 'import vpncrypt.crypto as c, platform
print("arm64:", platform.machine(), "chacha", c.implementations(), "default", c.active_implementation(),
      "| poly1305", c.poly1305_implementations(), "default", c.active_poly1305_implementation(),
      "| nh", c.nh_implementations(), "default", c.active_nh_implementation())'
status=0
run_arm -m pytest -p no:cacheprovider -q tests/crypto tests/arm64 tests/dataplane/test_checksum.py "$@" || status=$?
if [ "$status" = 5 ]; then echo "tests/arm64/run.sh: no tests collected" >&2; exit 1; fi
a53=0
QEMU_CPU=cortex-a53 run_arm -m pytest -p no:cacheprovider -q tests/crypto/test_adiantum.py "$@" || a53=$?
if [ "$a53" != 0 ]; then
    echo "tests/arm64/run.sh: the Adiantum tests as a cortex-a53 failed ($a53)" >&2
    status=1
fi
if [ -n "$crypto_only" ]; then exit "$status"; fi

# The daemon end to end: the host venv's Python (asyncio-dgram, the interop lab)
# drives it from the repo; the daemon is the stage's arm64 vpncrypt.
host_venv_py="${VPNCRYPT_VENV:-$repo/.venv}/bin/python"
if [ "$(id -u)" != 0 ]; then
    echo "tests/arm64/run.sh: the daemon end to end needs root (network namespaces)" >&2
    exit 1
fi
"$host_venv_py" -c "import asyncio_dgram, vpncrypt._native" 2>/dev/null || {
    echo "tests/arm64/run.sh: $host_venv_py lacks asyncio_dgram or vpncrypt (tests/run.sh builds the venv)" >&2
    exit 1; }
for model in cortex-a57:neon cortex-a53:neon4; do
    t0=$SECONDS
    (cd "$repo" && env -u PYTHONPATH "$host_venv_py" -m tests.arm64.daemon_e2e \
        --cpu "${model%%:*}" --chacha "${model#*:}" --vpncrypt "$stage/bin/vpncrypt") || status=1
    echo "tests/arm64/run.sh: the daemon end to end as a ${model%%:*}: $((SECONDS - t0)) s" >&2
done
exit "$status"
