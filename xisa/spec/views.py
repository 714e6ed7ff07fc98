"""A tensor argument as a view of a storage: the defaults a spec's `strides`, `offset` and `storage` leave out.

Shared by the stand-ins that answer for a tensor (`xisa.compile.launch.standins`) and by capture, which writes each
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


def view_extent(shape: list[int] | tuple[int, ...], strides: list[int] | tuple[int, ...]) -> tuple[int, int]:
    """The lowest and highest element a view reaches, counted from its first element (index 0 in every dim).
    A negative stride reaches backwards from it: a flip is passed as the address of the view's first element,
    near the end of its storage, with a negative stride (FlagGems' strided buffers do this)."""
    low = sum((size - 1) * stride for size, stride in zip(shape, strides) if stride < 0)
    high = sum((size - 1) * stride for size, stride in zip(shape, strides) if stride > 0)
    return low, high


def default_offset(shape: list[int] | tuple[int, ...], strides: list[int] | tuple[int, ...]) -> int:
    """Where a view sits in its storage when the spec names no offset: at the start, or, where a negative stride
    reaches backwards, just far enough in for its lowest element to be the storage's first."""
    return -view_extent(shape, strides)[0]


def view_end(shape: list[int] | tuple[int, ...], strides: list[int] | tuple[int, ...], offset: int) -> int:
    """The storage elements a view at `offset` needs: up to and including its highest element."""
    return offset + view_extent(shape, strides)[1] + 1
