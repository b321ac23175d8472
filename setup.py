from setuptools import Extension, setup

# The cffi module (vpncrypt._native): the C core, batch calls, the data path.
# The C-API module (vpncrypt._oneshot): the Python API's one-message calls; it
# links no crypto code and calls the cffi module's kernels through the table
# vpncrypt.crypto hands it at import (native/vc_oneshot.h).
# tests/arm64/run.sh cross-compiles it with these flags too (read from here).
ONESHOT_CFLAGS = [
    "-O2",
    "-std=gnu11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-Wno-cast-function-type",
]
oneshot = Extension(
    "vpncrypt._oneshot",
    sources=["native/pyext/oneshot.c"],
    depends=["native/vc_oneshot.h"],
    include_dirs=["native"],
    extra_compile_args=ONESHOT_CFLAGS,
)

setup(cffi_modules=["native/build_native.py:ffibuilder"], ext_modules=[oneshot])
