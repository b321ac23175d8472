"""cffi build script (API mode, out of line) for the vpncrypt native core.

setuptools runs it through ``cffi_modules`` in setup.py; ``emit_c_code`` is used by
the arm64 cross build (tests/arm64/run.sh), which compiles the same sources with
aarch64-linux-gnu-gcc.
"""

import os
import re
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

# Kernel and core sources: every .c file directly in native/ (bench/ and fuzz/
# hold stand-alone programs).  Files for another architecture compile to nothing.
SOURCES = sorted(os.path.join("native", f) for f in os.listdir(HERE) if f.endswith(".c"))

# -O3 only: SIMD kernels carry their own target attributes, so the module runs on
# any CPU of the architecture.
CFLAGS = [
    "-O3",
    "-std=gnu11",
    "-fno-strict-aliasing",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fvisibility=hidden",
]


# The public headers, in order: the crypto core, the batch socket/TUN I/O, the TUN
# offloads (vnet header split and coalesce), the WireGuard transport fast path, and
# the loopback bench's packet source and sink (`vpncrypt loopback-bench`).
# Their declarations are the cffi cdef.
PUBLIC_HEADERS = ["vpncrypt.h", "vc_io.h", "vc_offload.h", "vc_wg.h", "vc_loopback.h"]


def cdef_source() -> str:
    """The public headers with preprocessor lines removed (except integer #defines)."""
    out = []
    for name in PUBLIC_HEADERS:
        path = os.path.join(HERE, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f.read().splitlines():
                if re.match(r"\s*#\s*(if|ifndef|ifdef|endif|else|include|define\s+\w+_H\b)", line):
                    continue
                out.append(line)
    return "\n".join(out)


ffibuilder = FFI()
ffibuilder.cdef(cdef_source())
ffibuilder.set_source(
    "vpncrypt._native",
    "".join(f'#include "{h}"\n' for h in PUBLIC_HEADERS if os.path.exists(os.path.join(HERE, h))),
    sources=SOURCES,
    include_dirs=["native"],
    extra_compile_args=CFLAGS,
)

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--emit-c":
        ffibuilder.emit_c_code(sys.argv[2])
    else:
        ffibuilder.compile(verbose=True)
