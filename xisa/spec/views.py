"""A tensor argument as a view of a storage: the defaults a spec's `strides`, `offset` and `storage` leave out.

Shared by the stand-ins that answer for a tensor (`xisa.compile.standins`) and by capture, which writes each
of them only where a launch's tensor differs from the default.
"""

from __future__ import annotations


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The strides, in elements, torch gives a contiguous tensor of `shape` (a size-1 dim's stride included)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def offset_alignment(offset_bytes: int) -> int:
    """The largest of 1, 2, 4, 8, 16 dividing a view's byte offset from its (256-byte aligned) storage."""
    align = 16
    while offset_bytes % align:
        align //= 2
    return align


def span_elements(shape: list[int] | tuple[int, ...], strides: list[int] | tuple[int, ...]) -> int:
    """How many elements of its storage a view reaches, from its first to its last."""
    return 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))
