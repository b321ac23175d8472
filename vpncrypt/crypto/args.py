"""Argument checks shared by the backends: clear messages naming the argument.

The native one-shot calls (native/pyext/oneshot.c) make the same checks in C,
with the same exceptions and messages, in the same order.

A byte-string argument may be any object with the buffer protocol: bytes,
bytearray, memoryview (of any item size and shape: its length is counted in
bytes), mmap, array.array.  It must be contiguous; a strided memoryview is
refused with BufferError rather than silently copied.
"""

from collections.abc import Sequence
from typing import Any, Union

# What buf() gives back: the bytes themselves, or a flat byte view of the buffer
BytesLike = Union[bytes, memoryview]


def buf(name: str, value: Any, size: int | None = None) -> BytesLike:
    """Return value as bytes or as a flat byte view (of `size` bytes, when given)."""
    if type(value) is not bytes:
        try:
            view = memoryview(value)
        except TypeError:
            raise TypeError(
                f"{name} must be bytes, bytearray, memoryview or another bytes-like "
                f"object, not {type(value).__name__}"
            ) from None
        if not view.c_contiguous:
            raise BufferError(f"{name} must be a contiguous buffer (a strided memoryview is not)")
        value = view.cast("B") if view.ndim != 1 or view.format != "B" else view
    if size is not None and len(value) != size:
        raise ValueError(f"{name} must be {size} bytes long, got {len(value)}")
    return value


def sealed(name: str, value: Any) -> BytesLike:
    value = buf(name, value)
    if len(value) < 16:
        raise ValueError(f"{name} must be at least 16 bytes (the tag), got {len(value)}")
    return value


def integer(name: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value < high:
        raise ValueError(f"{name} must be in [{low}, {high}), got {value}")
    return value


def rounds(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"rounds must be an int, not {type(value).__name__}")
    if value not in (8, 12, 20):
        raise ValueError(f"rounds must be 8, 12 or 20, got {value}")
    return value


def _byte_lengths(name: str, seq: Sequence[Any]) -> list[int]:
    """Each item's length in bytes (not len(): a memoryview of 4-byte items
    has a quarter as many items as bytes, and the batch is joined byte-wise)."""
    return [len(v) if type(v) is bytes else len(buf(f"{name}[{i}]", v)) for i, v in enumerate(seq)]


def batch(nonces: Any, messages: Any, nonce_size: int, sealed_in: bool) -> list[int]:
    """Check a batch; return the message lengths in bytes."""
    for name, seq in (("nonces", nonces), ("messages", messages)):
        if not isinstance(seq, Sequence) or isinstance(seq, (bytes, bytearray, memoryview, str)):
            raise TypeError(f"{name} must be a sequence (list or tuple) of bytes-like objects")
    if len(nonces) != len(messages):
        raise ValueError(
            f"nonces and messages must have the same length, got {len(nonces)} and {len(messages)}"
        )
    nlens = _byte_lengths("nonces", nonces)
    mlens = _byte_lengths("messages", messages)
    for i, n in enumerate(nlens):
        if n != nonce_size:
            raise ValueError(f"nonces[{i}] must be {nonce_size} bytes long, got {n}")
    if sealed_in:
        for i, n in enumerate(mlens):
            if n < 16:
                raise ValueError(f"messages[{i}] must be at least 16 bytes (the tag), got {n}")
    return mlens
