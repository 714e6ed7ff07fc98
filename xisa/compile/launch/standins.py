"""Stand-in arguments: what a launch would pass, made from a spec's values without a GPU.

A launch specializes on its arguments (divisibility 16, int == 1 as a constexpr, AMD pointer range), so the
stand-ins answer `dtype`, `data_ptr()` and `ptr_range()` like the real tensors would; `plain` writes a launch
value back as a record's plain value.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from xisa.errors import SpecError
from xisa.spec.views import contiguous_strides, default_offset, offset_alignment, view_end

TWO_GIB = 2**31 - 1  # the AMD backend's bound for tt.pointer_range 32

# dtype names accepted in specs -> torch dtype attribute name
DTYPES = {
    "bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i1": "bool",
    "fp8e4nv": "float8_e4m3fn", "fp8e4b8": "float8_e4m3fnuz", "fp8e5": "float8_e5m2", "fp8e5b16": "float8_e5m2fnuz",
}
_TORCH_NAMES = set(DTYPES.values()) | {"half", "float", "double", "int", "long", "short"}
# triton.language dtype names for `{dtype: ...}` constexprs
_TL_DTYPES = {
    "bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "fp8e4nv": "float8e4nv", "fp8e4b8": "float8e4b8", "fp8e5": "float8e5", "fp8e5b16": "float8e5b16",
    "i1": "int1",
}
_TENSOR_KEYS = {"tensor", "shape", "strides", "offset", "storage", "align", "large"}
_DESCRIPTOR_KEYS = {"descriptor", "shape", "strides", "block_shape", "padding"}
_DERIVED_KINDS = ("stride", "size", "numel")


def known_dtypes() -> list[str]:
    return sorted(set(DTYPES) | _TORCH_NAMES)


def torch_dtype(name: str, *, path: str, field: str):
    import torch

    attr = DTYPES.get(name, name)
    dtype = getattr(torch, attr, None) if attr in _TORCH_NAMES or name in DTYPES else None
    if not isinstance(dtype, torch.dtype):
        near = difflib.get_close_matches(name, known_dtypes(), n=1)
        fix = f"did you mean {near[0]!r}?" if near else f"one of {', '.join(known_dtypes())}"
        raise SpecError(f"unknown dtype {name!r}", path=path, field=field, fix=fix)
    return dtype


class StandInTensor:
    """Answers what Triton's specializer asks of a tensor: dtype, data_ptr() and ptr_range(); and its shape and
    strides, for the ints derived from it (`{stride: x_ptr, dim: 0}`) and a tensor descriptor's base."""

    _BASE_ADDRESS = 1 << 32  # any 256-byte aligned address

    def __init__(self, dtype, shape: tuple[int, ...], align: int, nbytes: int, strides: tuple[int, ...] | None = None,
                 offset: int = 0):
        self.dtype = dtype
        self.shape = shape
        self.strides = strides if strides is not None else contiguous_strides(shape)
        self._align = align
        self._nbytes = nbytes
        self._offset = offset

    def data_ptr(self) -> int:
        # The view's address: `offset` elements into a 256-byte aligned storage, else an address that is a
        # multiple of `align` but of no larger power of two up to 16.
        if self._offset:
            return self._BASE_ADDRESS + self._offset * self.dtype.itemsize
        return self._BASE_ADDRESS + (self._align if self._align < 16 else 0)

    def storage_offset(self) -> int:
        return self._offset

    def untyped_storage(self) -> "_Storage":   # what a heuristic (and Triton's AMD backend) asks of the allocation
        return _Storage(self._nbytes)

    def is_contiguous(self) -> bool:
        return tuple(self.strides) == contiguous_strides(self.shape)

    def ptr_range(self) -> int:
        # Triton's AMD backend judges a torch tensor by `untyped_storage().size()`: the whole allocation in bytes.
        return self._nbytes

    def stride(self, dim: int | None = None):
        return self.strides if dim is None else self.strides[dim]

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    # What @triton.heuristics and autotune pre_hooks commonly read of a tensor.
    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def zero_(self) -> "StandInTensor":   # a pre_hook zeroing an output: data, not code
        return self

    def __repr__(self) -> str:
        return (f"StandInTensor({self.dtype}, shape={list(self.shape)}, strides={list(self.strides)}, "
                f"align={self._align}, nbytes={self._nbytes})")


@dataclass(frozen=True)
class _Storage:
    """A stand-in's allocation, as torch's `untyped_storage()` answers for it: its size in bytes."""

    bytes_: int

    def size(self) -> int:
        return self.bytes_

    def nbytes(self) -> int:
        return self.bytes_


def _int_list(value: Any, *, path: str, field: str, minimum: int | None, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              and (minimum is None or v >= minimum) for v in value):
        raise SpecError(f"{field.rpartition('.')[2]} must be a list of {what}", path=path, field=field)
    return value


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class DerivedInt:
    """An int argument taken from a tensor stand-in of the same case: `{stride: x_ptr, dim: 0}`,
    `{size: x_ptr, dim: 1}`, `{numel: x_ptr}` (resolved in `bind_cell`, once every stand-in is made)."""

    kind: str        # stride, size or numel
    tensor: str      # the argument naming the stand-in
    dim: int | None


def _derived_int(value: dict, *, path: str, field: str) -> DerivedInt:
    kinds = [k for k in _DERIVED_KINDS if k in value]
    unknown = sorted(set(value) - set(_DERIVED_KINDS) - {"dim"})
    if len(kinds) != 1 or unknown:
        raise SpecError(f"an int taken from a tensor is one of {{stride: T, dim: D}}, {{size: T, dim: D}}, "
                        f"{{numel: T}}, got {sorted(value)}", path=path, field=field,
                        fix="e.g. stride_am: {stride: a_ptr, dim: 0}")
    kind = kinds[0]
    tensor = value[kind]
    if not isinstance(tensor, str) or not tensor.isidentifier():
        raise SpecError(f"{kind} must name a tensor argument", path=path, field=f"{field}.{kind}")
    dim = value.get("dim")
    if kind == "numel":
        if dim is not None:
            raise SpecError("numel takes no dim", path=path, field=f"{field}.dim", fix="{numel: T} is every element")
    elif not _whole(dim):
        raise SpecError(f"{kind} needs an int dim", path=path, field=f"{field}.dim", fix=f"{{{kind}: {tensor}, dim: 0}}")
    return DerivedInt(kind, tensor, dim)


def resolve_derived(value: DerivedInt, standins: dict[str, Any], *, path: str, field: str) -> int:
    """The int a launch would pass: `x.stride(dim)`, `x.shape[dim]` or `x.numel()` of the case's stand-in."""
    tensor = standins.get(value.tensor)
    if not isinstance(tensor, StandInTensor):
        tensors = sorted(name for name, v in standins.items() if isinstance(v, StandInTensor))
        near = difflib.get_close_matches(value.tensor, tensors, n=1)
        what = "is not a tensor argument" if value.tensor in standins else "is no argument of the case"
        raise SpecError(f"{value.tensor!r} {what}", path=path, field=f"{field}.{value.kind}",
                        fix=f"did you mean {near[0]!r}?" if near else f"tensor arguments: {', '.join(tensors) or 'none'}")
    if value.kind == "numel":
        return tensor.numel()
    rank = len(tensor.shape)
    if not -rank <= value.dim < rank:
        raise SpecError(f"dim {value.dim} is out of range for {value.tensor!r} of shape {list(tensor.shape)}",
                        path=path, field=f"{field}.dim", fix=f"a dim from {-rank} to {rank - 1}")
    return tensor.stride(value.dim) if value.kind == "stride" else tensor.size(value.dim)


def _storage_bytes(value: Any, itemsize: int, *, path: str, field: str) -> int:
    """`storage:` as bytes: an int of bytes, or `{elements: N}` of the stand-in's dtype."""
    if isinstance(value, dict) and set(value) == {"elements"} and _whole(value["elements"]) and value["elements"] > 0:
        return value["elements"] * itemsize
    if _whole(value) and value > 0:
        return value
    raise SpecError("storage must be a positive number of bytes or {elements: N}", path=path, field=field,
                    fix="e.g. storage: 4294967296, or storage: {elements: 2147483648}")


def make_tensor(value: dict, *, path: str, field: str) -> StandInTensor:
    """A `{tensor: ...}` spec value -> its stand-in: a view (`shape`, `strides`, `offset` in elements) of a storage
    (`storage`, default: just what the view spans) that Triton judges for `large`."""
    unknown = set(value) - _TENSOR_KEYS
    if unknown or "tensor" not in value:
        bad = sorted(unknown)[0] if unknown else "tensor"
        raise SpecError(f"a tensor stand-in takes {sorted(_TENSOR_KEYS)}, got {bad!r}", path=path,
                        field=f"{field}.{bad}", fix="e.g. {tensor: bf16, shape: [128, 64]}")
    dtype = torch_dtype(str(value["tensor"]), path=path, field=f"{field}.tensor")
    shape = value.get("shape", [1])
    if not isinstance(shape, list) or not all(_whole(s) and s > 0 for s in shape):
        raise SpecError("shape must be a list of positive ints", path=path, field=f"{field}.shape")
    strides = None
    if "strides" in value:
        strides = _int_list(value["strides"], path=path, field=f"{field}.strides", minimum=None, what="ints")
        if len(strides) != len(shape):
            raise SpecError(f"strides has {len(strides)} entries for a shape of {len(shape)}", path=path,
                            field=f"{field}.strides", fix="give one stride (in elements) per dim")
    offset = value.get("offset", 0)
    if not _whole(offset) or offset < 0:
        raise SpecError("offset must be an int >= 0 (elements from the storage's start)", path=path,
                        field=f"{field}.offset")
    itemsize = dtype.itemsize
    align = value.get("align")
    if align is not None and align not in (1, 2, 4, 8, 16):
        raise SpecError(f"align {align!r} must be 1, 2, 4, 8 or 16", path=path, field=f"{field}.align")
    if "offset" in value:
        derived = offset_alignment(offset * itemsize)
        if align is not None and align != derived:
            raise SpecError(f"align {align} contradicts offset {offset} ({offset * itemsize} bytes: aligned to "
                            f"{derived})", path=path, field=f"{field}.align", fix="drop align: the offset decides it")
        align = derived
    align = 16 if align is None else align
    view_strides = tuple(strides) if strides is not None else contiguous_strides(shape)
    back = default_offset(shape, view_strides)   # how far negative strides reach back from the first element
    placed = offset if "offset" in value else back
    if placed < back:
        raise SpecError(f"offset {offset} puts the view's lowest element before its storage (its negative strides "
                        f"reach {back} elements back)", path=path,
                        field=f"{field}.offset", fix="give the offset of the view's first element in its storage")
    needed = view_end(shape, view_strides, placed) * itemsize
    nbytes = needed
    if "storage" in value:
        nbytes = _storage_bytes(value["storage"], itemsize, path=path, field=f"{field}.storage")
        if nbytes < needed:
            raise SpecError(f"storage of {nbytes} bytes is smaller than the view's end ({needed} bytes: offset "
                            f"{placed} + {needed // itemsize - placed} elements of {itemsize} bytes)", path=path,
                            field=f"{field}.storage", fix="give the whole allocation's size")
    large = value.get("large")
    if large not in (None, True, False):
        raise SpecError("large must be true or false", path=path, field=f"{field}.large")
    if "storage" in value and large is not None and large != (nbytes > TWO_GIB):
        raise SpecError(f"large: {str(large).lower()} contradicts storage of {nbytes} bytes (large means over "
                        f"{TWO_GIB} bytes)", path=path, field=f"{field}.large", fix="drop large: storage decides it")
    if large is False and nbytes > TWO_GIB:
        raise SpecError(f"shape {shape} is {nbytes} bytes, over 2 GiB, but large is false", path=path,
                        field=f"{field}.large", fix="drop `large: false` or shrink the shape")
    if large:
        nbytes = max(nbytes, TWO_GIB + 1)
    return StandInTensor(dtype, tuple(shape), align, nbytes, view_strides, offset)


def make_standin(value: Any, *, path: str, field: str) -> Any:
    """A spec argument value -> the object a launch would pass (a DerivedInt is resolved by `bind_cell`)."""
    if isinstance(value, str) and value.startswith("*"):
        value = {"tensor": value[1:]}
    if isinstance(value, dict):
        if "tensor" in value:
            return make_tensor(value, path=path, field=field)
        if "descriptor" in value:
            return make_descriptor(value, path=path, field=field)
        if any(kind in value for kind in _DERIVED_KINDS):
            return _derived_int(value, path=path, field=field)
        return make_tensor(value, path=path, field=field)   # names the missing `tensor`
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise SpecError(f"unsupported argument value {value!r}", path=path, field=field,
                    fix="use a tensor ({tensor: bf16}), a descriptor, an int, a float, a bool or null")


def make_descriptor(value: dict, *, path: str, field: str):
    """`{descriptor: bf16, shape: [M, K], strides: [K, 1], block_shape: [BM, BK]}` -> the host-side
    `triton.tools.tensor_descriptor.TensorDescriptor` a TMA launch passes, over a stand-in of its base tensor."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    unknown = sorted(set(value) - _DESCRIPTOR_KEYS)
    missing = sorted({"descriptor", "shape", "block_shape"} - set(value))
    if unknown or missing:
        bad = (unknown or missing)[0]
        raise SpecError(f"a descriptor takes {sorted(_DESCRIPTOR_KEYS)} ({'unknown' if unknown else 'missing'}: "
                        f"{bad!r})", path=path, field=f"{field}.{bad}",
                        fix="e.g. {descriptor: bf16, shape: [512, 256], block_shape: [64, 64]}")
    shape = _int_list(value["shape"], path=path, field=f"{field}.shape", minimum=1, what="positive ints")
    block_shape = _int_list(value["block_shape"], path=path, field=f"{field}.block_shape", minimum=1,
                            what="positive ints")
    strides = value.get("strides")
    base_value = {"tensor": value["descriptor"], "shape": shape, **({"strides": strides} if strides is not None else {})}
    base = make_tensor(base_value, path=path, field=field)
    try:
        return TensorDescriptor(base, list(shape), list(base.strides), list(block_shape),
                                padding=value.get("padding", "zero"))
    except (AssertionError, ValueError, TypeError) as exc:
        raise SpecError(f"Triton refuses this descriptor: {exc or type(exc).__name__}", path=path, field=field,
                        fix="block_shape: powers of two; strides: last 1, others a multiple of 16 bytes") from None


def constexpr_value(value: Any, *, path: str, field: str) -> Any:
    if isinstance(value, dict):
        if set(value) != {"dtype"}:
            raise SpecError("a constexpr mapping must be {dtype: NAME}", path=path, field=field)
        import triton.language as tl

        name = str(value["dtype"])
        attr = _TL_DTYPES.get(name, name)
        dtype = getattr(tl, attr, None)
        if not isinstance(dtype, tl.dtype):
            raise SpecError(f"unknown dtype {name!r}", path=path, field=field, fix=f"one of {sorted(_TL_DTYPES)}")
        return dtype
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise SpecError(f"constexpr value {value!r} of type {type(value).__name__} is not allowed", path=path,
                    field=field, fix="use an int, float, bool, string or {dtype: NAME}")


def plain(value: Any) -> Any:
    """A launch value (a constexpr, a dtype, a list of them) as a record holds it: bools, numbers, strings, lists."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    inner = getattr(value, "value", None)
    if inner is not None and type(value).__name__ == "constexpr":
        return plain(inner)
    return str(value)
