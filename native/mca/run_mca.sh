#!/bin/sh
# Cycle estimate of the arm64 ChaCha routines under llvm-mca (Cortex-A57 and
# Cortex-A53 models).  Needs aarch64-linux-gnu-gcc (the default; clang for --cc clang) and llvm-mca (LLVM 14 or newer); no arm64
# machine or sysroot.  Arguments go to mca_report.py (--cc gcc|clang|both, --tune, --unrolled, --keep DIR, compiler flags).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
case " $* " in
    *" --cc clang "*|*" --cc both "*) need_clang=1 ;;
    *) need_clang= ;;
esac
case " $* " in
    *" --cc clang "*) ;;
    *) command -v "${CROSS_CC:-aarch64-linux-gnu-gcc}" >/dev/null \
           || { echo "run_mca.sh: ${CROSS_CC:-aarch64-linux-gnu-gcc} not found" >&2; exit 1; } ;;
esac
if [ -n "$need_clang" ]; then
    command -v "${CLANG:-clang}" >/dev/null || { echo "run_mca.sh: clang not found" >&2; exit 1; }
fi
command -v "${LLVM_MCA:-llvm-mca}" >/dev/null || { echo "run_mca.sh: llvm-mca not found" >&2; exit 1; }
exec python3 "$here/mca_report.py" "$@"
