#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then runs them.
#   - Debian packages through apt-get when running as root (only those missing);
#   - Python packages into a venv (.venv, or $VPNCRYPT_VENV), with vpncrypt
#     installed in editable mode so the native core is built from this tree,
#     with -Werror (a C warning fails the run);
#   - the linters, before any test: ruff check, ruff format --check and mypy
#     (their settings are pyproject.toml's; a few seconds);
#   - pytest over tests/ on the host (every kernel this CPU has), the
#     end-to-end scenarios (tests/e2e) against vpncrypt-go and wireguard-go
#     included, on two pytest-xdist workers (tests/conftest.py);
#   - the arm64 run, alongside the host suite: the crypto suite and the daemon
#     end to end, cross-compiled and run under qemu-aarch64 (tests/arm64/run.sh).
# Arguments are passed to the host pytest.  --host-only leaves out the arm64 run
# (for quick local work; CI never passes it).  --lint-only builds the venv and
# runs the linters alone (no Debian packages, no tests).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

host_only=0
lint_only=0
args=()
for a in "$@"; do
    case "$a" in
        --host-only) host_only=1 ;;
        --lint-only) lint_only=1 ;;
        *) args+=("$a") ;;
    esac
done

# Debian packages the tests use: compilers and cross tools, qemu for arm64,
# libsodium/OpenSSL for the C bench, WireGuard peers, network (nft for the full
# tunnel's table), systemd tools, and Prometheus (prometheus, promtool) for the metrics tests.
deb_packages=(
    gcc libc6-dev libsodium-dev libssl-dev pkg-config clang llvm libclang-rt-14-dev
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
    wireguard-go wireguard-tools iproute2 nftables iperf3 iputils-ping procps stress-ng curl
    systemd systemd-container dpkg-dev prometheus
)
if [ "$lint_only" = 1 ]; then
    :
elif [ "$(id -u)" = 0 ]; then
    missing=()
    for p in "${deb_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "tests/run.sh: installing Debian packages: ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
else
    echo "tests/run.sh: not root, so Debian packages are not installed; tests that need them will fail" >&2
fi

venv=${VPNCRYPT_VENV:-$repo/.venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q -e ".[test]"
# The native core again, with -Werror: a warning in native/ fails the run.  A
# second build of vpncrypt alone (--no-deps; about 10 s), so that CFLAGS reaches
# only this tree's C and never a dependency pip may have to build from source.
if ! CFLAGS="${CFLAGS:-} -Werror" "$venv/bin/python" -m pip install -q --no-deps -e .; then
    echo "tests/run.sh: the native core does not build with -Werror (the compiler's messages are above)" >&2
    exit 1
fi

# The linters, from the repo root: every one runs, then the run stops if any failed.
lint_failed=()
"$venv/bin/ruff" check . || lint_failed+=("ruff check")
"$venv/bin/ruff" format --check . || lint_failed+=("ruff format --check (\`ruff format FILE\` fixes the files it names)")
"$venv/bin/mypy" || lint_failed+=("mypy (strict on vpncrypt/protocol and vpncrypt/transport)")
if [ ${#lint_failed[@]} -gt 0 ]; then
    for f in "${lint_failed[@]}"; do echo "tests/run.sh: $f failed" >&2; done
    echo "tests/run.sh: the linters failed (their findings are above), so no test was run" >&2
    exit 1
fi
echo "tests/run.sh: ruff check, ruff format --check and mypy passed" >&2
if [ "$lint_only" = 1 ]; then
    exit 0
fi

# The current wireguard-go (Debian 13's, with TUN offloads) for the interop,
# hostile-path and tunnel-bench tests, and the newest (Debian unstable's) for
# the end-to-end suite (tests/e2e), each fetched once into a cache outside the
# repo that keeps one build per suite (tests/tools/fetch-wireguard-go.sh; the
# system's apt state is untouched).
VPNCRYPT_WIREGUARD_GO_CURRENT=$(bash "$repo/tests/tools/fetch-wireguard-go.sh" trixie)
VPNCRYPT_WIREGUARD_GO_NEWEST=$(bash "$repo/tests/tools/fetch-wireguard-go.sh" sid)
export VPNCRYPT_WIREGUARD_GO_CURRENT VPNCRYPT_WIREGUARD_GO_NEWEST

# The arm64 run goes alongside the host suite: it is CPU-bound under qemu (about
# 3 min of one core), while the host suite spends much of its time waiting on
# daemons, handshakes and timers in network namespaces (the whole serial CI run
# used 42% of the two cores: 20 min 17 s of CPU in 24 min 26 s).  Its output is kept in a file and shown after the
# host suite's, so neither interleaves with the other.  Its own session
# (setsid), so that an interrupted run takes the whole arm64 run down with it.
arm64_pid=
if [ "$host_only" = 0 ]; then
    arm64_log=$(mktemp "${TMPDIR:-/tmp}/vpncrypt-arm64-log.XXXXXX")
    setsid bash "$repo/tests/arm64/run.sh" >"$arm64_log" 2>&1 &
    arm64_pid=$!
    trap '[ -z "$arm64_pid" ] || kill -- -"$arm64_pid" 2>/dev/null; rm -f "$arm64_log"' EXIT
    echo "tests/run.sh: the arm64 run (tests/arm64/run.sh) started alongside the host suite; its output follows the host suite's" >&2
fi

# Two workers (pytest-xdist), a file's tests on one worker; the tests that load
# every core on purpose run alone (tests/conftest.py says which and how).
status=0
"$venv/bin/python" -m pytest -n 2 --dist loadfile --durations=30 "${args[@]}" || status=$?
if [ "$status" = 5 ]; then
    echo "tests/run.sh: pytest collected no tests; that is a failure" >&2
    status=1
fi

if [ -n "$arm64_pid" ]; then
    arm64_status=0
    wait "$arm64_pid" || arm64_status=$?
    arm64_pid=
    cat "$arm64_log"
    if [ "$arm64_status" != 0 ]; then
        echo "tests/run.sh: the arm64 run failed (exit $arm64_status)" >&2
        [ "$status" != 0 ] || status=$arm64_status
    fi
fi
exit "$status"
