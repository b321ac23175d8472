#!/bin/sh
# Build the C-level benchmarks: native/bench/build.sh [OUTPUT]
#
# OUTPUT (default native/bench/cbench): the AEAD bench; next to it,
# offload_bench (the TUN offloads' split, coalesce and checksum, no syscalls).
# Compiles native/bench/cbench.c, offload_bench.c and every vpncrypt core source (native/*.c) with
# the extension's flags (-O3, no -m flags: the SIMD kernels carry their own target
# attributes), and links OpenSSL's libcrypto and libsodium when pkg-config finds
# them (the comparison is compiled out otherwise).
#
# A native/*.c file that does not compile is left out with a warning (the kernels
# are weak references in dispatch.c, so the bench still links without them, and
# the warning says which ones are missing); the build fails if cbench.c itself
# does not compile or the link fails.
#
# Environment: CC (default cc), NO_OPENSSL=1 / NO_SODIUM=1 to leave one out.
# Output default: native/bench/cbench.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
native=$(dirname "$here")
out=${1:-$here/cbench}
cc=${CC:-cc}
cflags="-O3 -std=gnu11 -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -I$native"

defs=""
libs=""
have=""
if [ -z "${NO_OPENSSL:-}" ] && pkg-config --exists libcrypto 2>/dev/null; then
    defs="$defs -DHAVE_OPENSSL $(pkg-config --cflags libcrypto)"
    libs="$libs $(pkg-config --libs libcrypto)"
    have="$have openssl"
fi
if [ -z "${NO_SODIUM:-}" ] && pkg-config --exists libsodium 2>/dev/null; then
    defs="$defs -DHAVE_SODIUM $(pkg-config --cflags libsodium)"
    libs="$libs $(pkg-config --libs libsodium)"
    have="$have libsodium"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cbench-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# Compile every source in parallel, one object each.
pids=""
for src in "$native"/*.c "$here/cbench.c" "$here/offload_bench.c"; do
    base=$(basename "$src" .c)
    extra=""
    [ "$base" = cbench ] && extra=$defs
    # shellcheck disable=SC2086  # word splitting of the flag lists is intended
    ( "$cc" $cflags $extra -c "$src" -o "$tmp/$base.o" 2>"$tmp/$base.err" || rm -f "$tmp/$base.o" ) &
    pids="$pids $!"
done
for p in $pids; do wait "$p" || true; done

objs=""
left_out=""
for src in "$native"/*.c "$here/cbench.c"; do
    base=$(basename "$src" .c)
    if [ -f "$tmp/$base.o" ]; then
        objs="$objs $tmp/$base.o"
        # compiler warnings are worth seeing
        [ -s "$tmp/$base.err" ] && cat "$tmp/$base.err" >&2
    elif [ "$base" = cbench ]; then
        cat "$tmp/$base.err" >&2
        echo "build.sh: cbench.c does not compile" >&2
        exit 1
    else
        sed -n '1,8p' "$tmp/$base.err" >&2
        echo "build.sh: WARNING: left out native/$base.c (it does not compile)" >&2
        left_out="$left_out $base.c"
    fi
done

# shellcheck disable=SC2086
"$cc" -o "$out" $objs $libs
echo "built $out (comparisons:${have:- none}${left_out:+; left out:$left_out})" >&2
[ -f "$tmp/offload_bench.o" ] || { cat "$tmp/offload_bench.err" >&2; echo "build.sh: offload_bench.c does not compile" >&2; exit 1; }
core=$(echo "$objs" | tr ' ' '\n' | grep -v '/cbench\.o$' | tr '\n' ' ')
# shellcheck disable=SC2086
"$cc" -o "$(dirname "$out")/offload_bench" "$tmp/offload_bench.o" $core $libs
echo "built $(dirname "$out")/offload_bench" >&2
