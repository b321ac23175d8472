#!/bin/sh
# Build the C fuzz harnesses: native/fuzz/build.sh [OUTDIR] [libfuzzer|replay|all]
#
#   OUTDIR/fuzz_aead, OUTDIR/fuzz_wg
#       clang -fsanitize=fuzzer,address,undefined (libFuzzer; the vpncrypt core
#       sources get coverage instrumentation with -fsanitize=fuzzer-no-link).
#   OUTDIR/fuzz_aead_replay, OUTDIR/fuzz_wg_replay
#       gcc -fsanitize=address,undefined with replay_main.c: replays corpus
#       files/directories and runs seeded random mutations (no libFuzzer needed).
#
# Every native/*.c core source is compiled (files for another architecture
# compile to nothing); UBSan does not recover (-fno-sanitize-recover=all), so
# any finding aborts.  Fails with a clear message if a compiler or libFuzzer is
# missing.  Environment: CLANG (default clang), GCC (default gcc).
# Output default: native/fuzz/out.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
native=$(dirname "$here")
out=${1:-$here/out}
what=${2:-all}
clang=${CLANG:-clang}
gcc=${GCC:-gcc}
mkdir -p "$out"
out=$(cd "$out" && pwd)

common="-std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-strict-aliasing -fno-sanitize-recover=all -I$native"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vc-fuzz-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# compile_all CC FLAGS DIR: every core source to DIR/*.o, in parallel.
compile_all() {
    cc=$1 flags=$2 dir=$3
    mkdir -p "$dir"
    pids=""
    for src in "$native"/*.c; do
        base=$(basename "$src" .c)
        # shellcheck disable=SC2086
        ( $cc $flags -c "$src" -o "$dir/$base.o" 2>"$dir/$base.err" || { cat "$dir/$base.err" >&2; exit 1; } ) &
        pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait "$p" || rc=1; done
    if [ $rc != 0 ]; then
        echo "build.sh: compiling the core with $cc failed" >&2
        exit 1
    fi
}

need() {
    if ! command -v "$1" >/dev/null 2>&1; then
        echo "build.sh: $1 not found (install Debian package $2)" >&2
        exit 1
    fi
}

build_libfuzzer() {
    need "$clang" clang
    # is libFuzzer in clang's runtime?
    printf 'int LLVMFuzzerTestOneInput(const unsigned char*d,unsigned long n){return 0;}\n' >"$tmp/probe.c"
    if ! "$clang" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" 2>"$tmp/probe.err"; then
        cat "$tmp/probe.err" >&2
        echo "build.sh: $clang cannot link -fsanitize=fuzzer (libFuzzer missing: install Debian package" \
             "libclang-rt-14-dev, or libclang-common-14-dev on Debian 12)" >&2
        exit 1
    fi
    flags="$common -fsanitize=fuzzer-no-link,address,undefined"
    compile_all "$clang" "$flags" "$tmp/clang"
    for h in fuzz_aead fuzz_wg fuzz_offload; do
        # shellcheck disable=SC2086
        "$clang" $common -fsanitize=fuzzer,address,undefined "$here/$h.c" "$tmp"/clang/*.o -o "$out/$h"
    done
    echo "build.sh: built $out/fuzz_aead $out/fuzz_wg $out/fuzz_offload (libFuzzer, ASan, UBSan)" >&2
}

build_replay() {
    need "$gcc" gcc
    flags="$common -fsanitize=address,undefined"
    compile_all "$gcc" "$flags" "$tmp/gcc"
    # shellcheck disable=SC2086
    "$gcc" $flags -c "$here/replay_main.c" -o "$tmp/replay_main.o"
    for h in fuzz_aead fuzz_wg fuzz_offload; do
        # shellcheck disable=SC2086
        "$gcc" $flags "$here/$h.c" "$tmp/replay_main.o" "$tmp"/gcc/*.o -o "$out/${h}_replay"
    done
    echo "build.sh: built $out/fuzz_aead_replay $out/fuzz_wg_replay $out/fuzz_offload_replay (gcc, ASan, UBSan)" >&2
}

case $what in
    libfuzzer) build_libfuzzer ;;
    replay) build_replay ;;
    all) build_libfuzzer; build_replay ;;
    *) echo "usage: build.sh [OUTDIR] [libfuzzer|replay|all]" >&2; exit 2 ;;
esac
