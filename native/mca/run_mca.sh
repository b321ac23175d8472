#!/bin/sh
# Cycle estimate of the arm64 ChaCha routines under llvm-mca (Cortex-A57 and
# Cortex-A53 models).  Needs clang and llvm-mca (LLVM 14 or newer); no arm64
# machine or sysroot.  Arguments go to mca_report.py (--tune, --keep DIR, clang flags).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
command -v "${CLANG:-clang}" >/dev/null || { echo "run_mca.sh: clang not found" >&2; exit 1; }
command -v "${LLVM_MCA:-llvm-mca}" >/dev/null || { echo "run_mca.sh: llvm-mca not found" >&2; exit 1; }
exec python3 "$here/mca_report.py" "$@"
