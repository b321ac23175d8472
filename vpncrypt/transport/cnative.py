"""The built cffi module (vpncrypt._native, made by native/build_native.py)
for the transport layer, typed: it ships no stubs, so its `ffi` and `lib`
are Any here and a cffi object (a pointer, an array, a struct) is `CData`."""

import importlib
from typing import Any, TypeAlias

_native = importlib.import_module("vpncrypt._native")

ffi: Any = _native.ffi
lib: Any = _native.lib
CData: TypeAlias = Any  # a cffi pointer, array or struct
