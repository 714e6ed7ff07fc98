"""Bind a cell's stand-in arguments through Triton's own runtime binder.

A launch specializes on its arguments (divisibility 16, int == 1 as a constexpr, AMD pointer range);
an ahead-of-time compile is only faithful when it sees the same signature, constexprs and attrs.
So we build stand-ins that answer `dtype`, `data_ptr()` and `ptr_range()` like the real tensors
would, and hand them to the binder that `JITFunction.run` uses.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import importlib.util
import json
import math
import os
import sys
import types
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.errors import BindError, SpecError
from xisa.spec.cases import Cell, KernelSpec
from xisa.compile.toolchain import HARMLESS_KNOB_ATTRIBUTES, changes_compilation, toolchain_variable

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

    def __init__(self, dtype, shape: tuple[int, ...], align: int, nbytes: int, strides: tuple[int, ...] | None = None):
        self.dtype = dtype
        self.shape = shape
        self.strides = strides if strides is not None else contiguous_strides(shape)
        self._align = align
        self._nbytes = nbytes

    def data_ptr(self) -> int:
        # An address that is a multiple of `align` but of no larger power of two up to 16.
        return self._BASE_ADDRESS + (self._align if self._align < 16 else 0)

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


def contiguous_strides(shape: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The strides, in elements, torch gives a contiguous tensor of `shape` (a size-1 dim's stride included)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _int_list(value: Any, *, path: str, field: str, minimum: int, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum
                                              for v in value):
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


def _offset_alignment(offset_bytes: int) -> int:
    """The largest of 1, 2, 4, 8, 16 dividing a view's byte offset from its (256-byte aligned) storage."""
    align = 16
    while offset_bytes % align:
        align //= 2
    return align


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
        strides = _int_list(value["strides"], path=path, field=f"{field}.strides", minimum=0, what="ints >= 0")
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
        derived = _offset_alignment(offset * itemsize)
        if align is not None and align != derived:
            raise SpecError(f"align {align} contradicts offset {offset} ({offset * itemsize} bytes: aligned to "
                            f"{derived})", path=path, field=f"{field}.align", fix="drop align: the offset decides it")
        align = derived
    align = 16 if align is None else align
    view_strides = tuple(strides) if strides is not None else contiguous_strides(shape)
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, view_strides))
    needed = (offset + span) * itemsize
    nbytes = needed
    if "storage" in value:
        nbytes = _storage_bytes(value["storage"], itemsize, path=path, field=f"{field}.storage")
        if nbytes < needed:
            raise SpecError(f"storage of {nbytes} bytes is smaller than the view's end ({needed} bytes: offset "
                            f"{offset} + {span} elements of {itemsize} bytes)", path=path, field=f"{field}.storage",
                            fix="give the whole allocation's size")
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
    return StandInTensor(dtype, tuple(shape), align, nbytes, view_strides)


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


def load_kernel_object(spec: KernelSpec, *, roots: list[Path], target=None):
    """Import the spec's module and return what `function:` names: a JITFunction, or an @triton.autotune /
    @triton.heuristics object around one (`unwrap_kernel` takes it apart); `target` (a Target) is the one
    the load is for.

    The module is loaded once per process in a namespace of its own (`_load_isolated`), once per target
    when its load asked the driver for the current target, and the files the load imported are recorded
    for the result cache (`kernel_dependencies`).
    """
    loaded = _LOADED.get(_load_key(spec, target))
    if loaded is None:
        loaded = _load_isolated(spec, roots, target)
        if loaded.asked_target:
            _PER_TARGET.add(_load_key(spec))
        _LOADED[_load_key(spec, target)] = loaded
    module = loaded.module
    fn = getattr(module, spec.function, None)
    if fn is None:
        names = [n for n in dir(module) if _is_kernel_object(getattr(module, n))]
        near = difflib.get_close_matches(spec.function, names, n=1)
        fix = f"did you mean {near[0]!r}?" if near else f"kernels in the module: {', '.join(names) or 'none'}"
        raise SpecError(f"no function {spec.function!r} in the module", path=spec.spec_path, field="function", fix=fix)
    unwrap_kernel(fn, spec)   # refuse anything else now
    return fn


def load_kernel_function(spec: KernelSpec, *, roots: list[Path], target=None):
    """The @triton.jit function the spec names, itself or inside its autotune/heuristics wrappers."""
    return unwrap_kernel(load_kernel_object(spec, roots=roots, target=target), spec)[0]


def _is_kernel_object(value: Any) -> bool:
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    return isinstance(value, (JITFunction, Autotuner, Heuristics))


def unwrap_kernel(fn, spec: KernelSpec) -> tuple[Any, tuple[Any, ...]]:
    """A kernel object -> its JITFunction and the Autotuner/Heuristics wrappers around it, outermost first (the
    order a launch runs them in)."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    wrappers = []
    inner = fn
    while isinstance(inner, (Autotuner, Heuristics)) and len(wrappers) < 16:
        wrappers.append(inner)
        inner = inner.fn
    if not isinstance(inner, JITFunction):
        what = type(inner).__name__ if inner is fn else f"{type(fn).__name__} around a {type(inner).__name__}"
        raise SpecError(f"{spec.function!r} is a {what}, not a @triton.jit kernel", path=spec.spec_path,
                        field="function", fix="name a @triton.jit function, or an @triton.autotune or "
                                              "@triton.heuristics object decorating one")
    return inner, tuple(wrappers)


def _autotuner_of(wrappers: tuple[Any, ...], spec: KernelSpec, field: str):
    from triton.runtime.autotuner import Autotuner

    tuners = [w for w in wrappers if isinstance(w, Autotuner)]
    if len(tuners) > 1:
        raise SpecError(f"{spec.function!r} stacks {len(tuners)} @triton.autotune decorators; xisa picks a config of "
                        "one", path=spec.spec_path, field=field, fix="autotune the kernel once")
    return tuners[0] if tuners else None


def count_configs(spec: KernelSpec, field: str, *, roots: list[Path]) -> int:
    """How many configs the autotuner `spec` names has, for `config: all` (this imports the kernel module)."""
    tuner = _autotuner_of(unwrap_kernel(load_kernel_object(spec, roots=roots), spec)[1], spec, field)
    if tuner is None:
        raise _not_autotuned(spec, field)
    return len(tuner.configs)


def _not_autotuned(spec: KernelSpec, field: str) -> SpecError:
    return SpecError(f"{spec.function!r} is not an @triton.autotune object, so `config` has nothing to pick",
                     path=spec.spec_path, field=field,
                     fix="drop `config`, or name the @triton.autotune object in `function:`")


def _plain_config(config) -> dict[str, Any]:
    """A Triton Config as the values a launch passes (Config.all_kwargs: its kwargs, then the options it sets)."""
    return {name: _plain(value) for name, value in config.all_kwargs().items()}


def describe_config(index: int, config) -> str:
    values = ", ".join(f"{name}: {value}" for name, value in _plain_config(config).items())
    return f"config {index} {{{values}}}"


def _same_value(given: Any, value: Any) -> bool:
    """A spec value (a {dtype: NAME} already made the dtype) equals a launch value; a bool never equals an int."""
    if isinstance(given, bool) or isinstance(value, bool):
        return isinstance(given, bool) and isinstance(value, bool) and given == value
    return given == value


def select_config(tuner, chosen: Any, spec: KernelSpec, field: str) -> tuple[int, Any]:
    """The autotuner config a case's `config:` picks: an index, or a mapping matching exactly one config's values
    on the keys it gives."""
    configs = list(tuner.configs)
    listing = "; ".join(describe_config(i, c) for i, c in enumerate(configs))
    if chosen is None:
        raise SpecError(f"{spec.function!r} is autotuned ({len(configs)} configs) and the case picks none",
                        path=spec.spec_path, field=field, fix="config: 0 (an index), a mapping of a config's values "
                        f"such as {{{', '.join(f'{k}: {v}' for k, v in _plain_config(configs[0]).items())}}}, or all "
                        "(one case per config)")
    if isinstance(chosen, int) and not isinstance(chosen, bool):
        if chosen >= len(configs):
            raise SpecError(f"config {chosen} is out of range: the autotuner has {len(configs)} configs",
                            path=spec.spec_path, field=field, fix=f"an index 0..{len(configs) - 1}: {listing}")
        return chosen, configs[chosen]
    if not isinstance(chosen, dict):
        raise BindError(f"config {chosen!r} was not expanded", path=spec.spec_path, field=field)
    wanted = {name: constexpr_value(value, path=spec.spec_path, field=f"{field}.{name}")
              for name, value in chosen.items()}
    missing = object()
    matches = [i for i, config in enumerate(configs)
               if all(_same_value(value, config.all_kwargs().get(name, missing if value is not None else None))
                      for name, value in wanted.items())]
    if len(matches) != 1:
        how = "matches none" if not matches else f"matches {len(matches)} ({', '.join(map(str, matches))})"
        raise SpecError(f"config {{{', '.join(f'{k}: {v}' for k, v in chosen.items())}}} {how} of the autotuner's "
                        f"{len(configs)} configs", path=spec.spec_path, field=field,
                        fix=f"give values that match exactly one, or an index: {listing}")
    return matches[0], configs[matches[0]]


def kernel_dependencies(spec: KernelSpec, target=None) -> dict[str, str | None] | None:
    """What compiling `spec`'s kernel used -> SHA-256 (None: must stay absent), or None if not loaded: the files
    and environment variables (`$NAME`) its module's load read, and the project files its compiles read."""
    loaded = _LOADED.get(_load_key(spec, target))
    return {**loaded.dependencies, **loaded.compile_reads} if loaded is not None else None


@dataclass
class _LoadedModule:
    module: Any
    dependencies: dict[str, str | None]     # what the load read: files, and `$NAME` for a variable
    compile_reads: dict[str, str | None] = field(default_factory=dict)   # files its compiles read, so far
    package_folders: tuple[str, ...] = ()   # the kernel's own package: its files count wherever it is installed
    asked_target: bool = False              # the load asked the driver for the current target: one per target


# Per process: a forked compile worker loads each spec's module once, however many cells it compiles
# (once per target for the specs in _PER_TARGET, whose module asked which target it runs on).
_LOADED: dict[tuple, _LoadedModule] = {}
_PER_TARGET: set[tuple] = set()

# Kernel files never live here, and reading some of these never ends.
_SYSTEM_FOLDERS = ("/proc/", "/sys/", "/dev/")
# Always the environment, wherever they are installed from (an editable Triton is still the toolchain).
_ENVIRONMENT_PACKAGES = {"triton", "torch", "xisa", "__main__"}
_XISA_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
# A depfile entry `$NAME` stands for the environment variable NAME (a path is always absolute).
ENVIRONMENT_ENTRY = "$"


def dependency_digest(name: str) -> str | None:
    """A depfile entry's SHA-256 now: a file's bytes, or a `$NAME` variable's value; None when absent."""
    if name.startswith(ENVIRONMENT_ENTRY):
        return _value_digest(os.environ.get(name[len(ENVIRONMENT_ENTRY):]))
    return file_sha256(name)


def _value_digest(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


def _load_key(spec: KernelSpec, target=None) -> tuple:
    key = (str(spec.spec_file), str(spec.source_file), spec.module)
    return key + (getattr(target, "name", None),) if key in _PER_TARGET else key


class LoadTargetDriver:
    """Triton's active driver while a kernel module loads: it answers `get_current_target()` with the target the
    load is for (a module sizing a kernel from it then gets that target's value, and the module is loaded once
    per target) and `get_active_torch_device()` with the device a launch would use. Any other query goes to the
    machine's own driver where there is one, else is an error naming it (an invented answer would compile
    something else)."""

    def __init__(self, target, real):
        self._target = target
        self._real = real
        self.asked_target = False

    def get_current_target(self):
        if self._target is None:
            if self._real is not None:
                return self._real.get_current_target()
            raise RuntimeError("xisa loads this kernel for no particular target, so it has no current target")
        self.asked_target = True
        return self._target.gpu_target()

    def get_active_torch_device(self):
        import torch

        return torch.device("cuda")   # what a launch on either vendor's GPU uses (ROCm's torch says cuda too)

    def is_active(self) -> bool:
        return True

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._real is not None:
            return getattr(self._real, name)
        raise RuntimeError(f"the kernel module asked the GPU driver for {name!r} at import; xisa compiles without a "
                           "GPU: compute it in the launch function, or stub it (docs/spec-format.md, import hooks)")


@contextlib.contextmanager
def _target_driver(target) -> Iterator[LoadTargetDriver]:
    from triton.runtime.driver import driver

    saved = driver._active
    try:
        real = driver.active     # the machine's GPU driver; none on a machine without a GPU
    except RuntimeError:
        real = None
    stand_in = LoadTargetDriver(target, real)
    driver.set_active(stand_in)
    try:
        yield stand_in
    finally:
        driver._active = saved


def _load_isolated(spec: KernelSpec, roots: list[Path], target=None) -> _LoadedModule:
    """Import the kernel module with no project module of an earlier load in sight, record what it read, and
    undo what it changed in the process.

    A long-lived worker would otherwise keep the first `common` it imported and hand it to every later
    kernel doing `from common import f`, whatever folder that kernel is in. So the project's modules
    (everything outside the standard library and installed packages) are set aside during the load,
    the ones the load added are dropped after it (the kernel keeps references to what it uses), and
    sys.path is restored. So are the environment and Triton's knobs: a module that set one would change
    how every later kernel in the worker compiles; one that changes compilation is refused. Project
    modules are compiled from their source, never from a __pycache__ entry (trusted by mtime and size,
    so an edit that keeps both would run the old code). A source inside a package folder imports as that
    package's submodule: every module under the package's top name is set aside too (another project's
    `kernels`, or the user's own in a pytest process, installed or not) and none of the load's stays, the
    kernel module included (callers reach it through `_LOADED` and the function's globals).
    """
    global _READS, _ENV_READS
    if not _READS_HOOKED:
        _hook_reads()
    saved_path = list(sys.path)
    saved_environ, saved_knobs = dict(os.environ), _knob_settings()
    package = _package_of(spec.source_file, roots) if spec.source_file is not None else None
    if package:
        top = package[0].partition(".")[0]
    elif spec.module is not None and spec.module.partition(".")[0] not in _ENVIRONMENT_PACKAGES:
        top = spec.module.partition(".")[0]   # an installed package's files count too: it is the kernel
    else:
        top = None

    def isolated(name: str, module: Any) -> bool:
        return _is_project_module(name, module) or (top is not None and name.partition(".")[0] == top)

    set_aside = {name: module for name, module in list(sys.modules.items()) if isolated(name, module)}
    for name in set_aside:
        del sys.modules[name]
    before = set(sys.modules)
    _READS, _ENV_READS = reads, variables = [], set()
    try:
        with _watched_environment(), _from_source(), _target_driver(target) as driver, \
                contextlib.ExitStack() as hooks:
            sys.path[:0] = [str(folder) for folder in spec.pythonpath]   # [tool.xisa] pythonpath, ahead of the rest
            for hook in spec.import_hooks:
                hooks.enter_context(_import_hook(hook, target, driver))
            module = _import_kernel_module(spec, roots, package)
        _READS, _ENV_READS = None, None  # hashing the files below reads them too
        added = {name: sys.modules[name] for name in set(sys.modules) - before}
        package_folders = _package_folders(added, top)
        dependencies = _dependency_files(added, reads, kernel_package=top, package_folders=package_folders)
        dependencies.update({str(hook): file_sha256(str(hook)) for hook in spec.import_hooks})
        # A variable's value as the load found it: one the load sets itself (torch's inductor sets
        # TORCHINDUCTOR_CACHE_DIR when imported) is absent again when the next process starts its load.
        dependencies.update({ENVIRONMENT_ENTRY + name: _value_digest(saved_environ.get(name))
                             for name in sorted(variables) if not toolchain_variable(name)})
    finally:
        _READS, _ENV_READS = None, None
        for name in set(sys.modules) - before:
            added = sys.modules[name]   # an object put there in a module's place (`sys.modules[__name__] = ...`) too
            if isolated(name, added) or not isinstance(added, types.ModuleType):
                del sys.modules[name]
        sys.modules.update(set_aside)
        sys.path[:] = saved_path
        changed = _restore_process(saved_environ, saved_knobs)
    if changed:
        raise SpecError(f"loading {spec.source_file.name if spec.source_file else spec.module} set {changed}: it "
                        "changes how Triton compiles this kernel and every later one in the process, so a result "
                        "would depend on which kernel loaded first", path=spec.spec_path,
                        field="source" if spec.source_file else "module",
                        fix="remove the setting from the module (xisa compiles every kernel as a default launch)")
    return _LoadedModule(module=module, dependencies=dict(sorted(dependencies.items())),
                         package_folders=package_folders, asked_target=driver.asked_target)


IMPORT_HOOK = "xisa_import_hook"


def _import_hook(hook: Path, target, driver: LoadTargetDriver):
    """A `[tool.xisa] import_hooks` file's `xisa_import_hook(target)` context manager, entered around the kernel
    module's import (it stubs what the module asks the GPU at import, and undoes it on exit). It is given the
    load's GPUTarget, so a load with hooks is one per target."""
    where = {"path": "pyproject.toml", "field": "tool.xisa.import_hooks"}
    loader_spec = importlib.util.spec_from_file_location(f"xisa_import_hook_{hook.stem}", hook)
    module = importlib.util.module_from_spec(loader_spec)
    try:
        loader_spec.loader.exec_module(module)
        factory = getattr(module, IMPORT_HOOK, None)
        if not callable(factory):
            raise SpecError(f"{hook.name} defines no {IMPORT_HOOK}(target)", **where,
                            fix=f"define @contextlib.contextmanager def {IMPORT_HOOK}(target): ... yield")
        if target is not None:
            driver.asked_target = True
        manager = factory(target.gpu_target() if target is not None else None)
        if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
            raise SpecError(f"{hook.name}: {IMPORT_HOOK}(target) returned no context manager", **where,
                            fix="decorate it with @contextlib.contextmanager and yield once")
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"the import hook {hook.name} failed: {type(exc).__name__}: {_first_line(exc)}",
                        **where) from None
    return _entered_hook(hook, manager, where)


@contextlib.contextmanager
def _entered_hook(hook: Path, manager, where: dict) -> Iterator[None]:
    try:
        manager.__enter__()
    except Exception as exc:
        raise SpecError(f"the import hook {hook.name} failed: {type(exc).__name__}: {_first_line(exc)}",
                        **where) from None
    with contextlib.ExitStack() as stack:
        stack.push(manager)
        yield


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _package_folders(added: dict[str, Any], top: str | None) -> tuple[str, ...]:
    """The folders of the kernel's top package as the load imported it (a namespace package has several)."""
    module = added.get(top) if top else None
    if module is None:
        return ()
    return tuple(sorted({os.path.join(os.path.abspath(f), "") for f in list(vars(module).get("__path__") or [])}))


def _shadowing_files(name: str, module: Any) -> dict[str, None]:
    """The files that, appearing, would make `name` import from somewhere else: the module or package of that name
    in each search folder before the one that served it (sys.path for a top-level name, the parent's `__path__`
    for a submodule: a namespace package has several). A depfile records them as absent."""
    import importlib.machinery

    namespace = vars(module)
    origin = namespace.get("__file__")
    if not origin and not namespace.get("__path__"):
        return {}
    parent, _, leaf = name.rpartition(".")
    if parent:
        folders = list(vars(sys.modules[parent]).get("__path__") or []) if parent in sys.modules else []
    else:
        folders = [entry or os.getcwd() for entry in sys.path]
    # A namespace package is served only while no folder at all holds a regular module of its name.
    serving = None if not origin else \
        os.path.dirname(os.path.dirname(origin)) if origin.endswith("__init__.py") else os.path.dirname(origin)
    absent: dict[str, None] = {}
    for folder in folders:
        folder = os.path.abspath(folder)
        if serving is not None and folder == os.path.abspath(serving):
            break
        absent[os.path.join(folder, leaf, "__init__.py")] = None
        absent.update((os.path.join(folder, leaf + suffix), None) for suffix in importlib.machinery.all_suffixes())
    return absent


@contextlib.contextmanager
def _from_source() -> Iterator[None]:
    """Compile the modules a load imports from source and write no bytecode: no __pycache__ is found under a
    prefix below os.devnull, which is never a folder."""
    saved = sys.dont_write_bytecode, sys.pycache_prefix
    sys.dont_write_bytecode, sys.pycache_prefix = True, os.path.join(os.devnull, "xisa")
    try:
        yield
    finally:
        sys.dont_write_bytecode, sys.pycache_prefix = saved


# Variables read through os.environ while a kernel module loads (None: no load under way).
_ENV_READS: set[str] | None = None


class _WatchedEnvironment(MutableMapping):
    """os.environ while a kernel module loads: the same variables, each name read noted (a module sizing a kernel
    from `os.environ.get("BLOCK")` depends on it). A module that kept it keeps a working os.environ."""

    def __init__(self, environ):
        self._environ = environ

    def __getitem__(self, name):
        if _ENV_READS is not None and isinstance(name, str):
            _ENV_READS.add(name)
        return self._environ[name]

    def __setitem__(self, name, value):
        self._environ[name] = value

    def __delitem__(self, name):
        del self._environ[name]

    def __iter__(self):
        return iter(self._environ)

    def __len__(self):
        return len(self._environ)

    def copy(self) -> dict[str, str]:
        return self._environ.copy()

    def __or__(self, other):
        return self._environ | other


@contextlib.contextmanager
def _watched_environment() -> Iterator[None]:
    real = os.environ
    os.environ = _WatchedEnvironment(real)   # os.getenv reads the module's `environ` too
    try:
        yield
    finally:
        os.environ = real


def _knob_settings() -> dict[str, dict[str, Any]]:
    """Triton's knobs as code has set them: each group's own attributes (an unset knob reads the environment)."""
    from triton import knobs

    return {name: dict(vars(group)) for name, group in vars(knobs).items() if isinstance(group, knobs.base_knobs)}


def _restore_process(environ: dict[str, str], knob_settings: dict[str, dict[str, Any]]) -> str | None:
    """Put the environment and Triton's knobs back as they were; the first change that alters compilation, named."""
    from triton import knobs

    changed: list[str] = []
    for name in sorted(set(os.environ) | set(environ)):
        if os.environ.get(name) != environ.get(name):
            if changes_compilation(name):
                changed.append(name)
            if name in environ:
                os.environ[name] = environ[name]
            else:
                del os.environ[name]
    for group_name, saved in knob_settings.items():
        group = getattr(knobs, group_name)
        settings = vars(group)
        for attribute in sorted(set(settings) | set(saved)):
            now, before = settings.get(attribute, saved), saved.get(attribute, saved)
            if now is before or (now is not saved and before is not saved and now == before):
                continue
            descriptor = group.knob_descriptors.get(attribute)
            variable = getattr(descriptor, "key", None)
            if changes_compilation(variable) if variable else attribute not in HARMLESS_KNOB_ATTRIBUTES:
                changed.append(f"triton.knobs.{group_name}.{attribute}" + (f" ({variable})" if variable else ""))
        settings.clear()
        settings.update(saved)
    return changed[0] if changed else None


# Files opened for reading while a kernel module loads (None: no load under way). An audit hook sees
# every read, so a helper loaded by path (never in sys.modules) or a data file counts too.
_READS: list[str] | None = None
_READS_HOOKED = False


def _hook_reads() -> None:
    global _READS_HOOKED

    def note_read(event: str, args: tuple) -> None:
        if event == "open" and _READS is not None:
            path, _, flags = args
            if isinstance(path, (str, bytes, os.PathLike)) and isinstance(flags, int) \
                    and flags & os.O_ACCMODE == os.O_RDONLY:
                _READS.append(os.fsdecode(os.fspath(path)))

    sys.addaudithook(note_read)  # a hook cannot be removed: it does nothing outside a load or a compile
    _READS_HOOKED = True


@dataclass
class _Compile:
    loaded: _LoadedModule
    reads: list[str]                  # every file opened for reading so far
    reused: dict[str, str | None]     # what the compiles behind a Triton cache entry it reused read


# The compile under way in this process (None: none), and the folders whose files it reads as its own
# output (Triton's cache), never a dependency.
_COMPILING: _Compile | None = None
_OUTPUT_FOLDERS: tuple[str, ...] = ()


def ignore_reads_under(*folders: str) -> None:
    global _OUTPUT_FOLDERS
    _OUTPUT_FOLDERS = tuple(os.path.join(os.path.abspath(folder), "") for folder in folders if folder)


@contextlib.contextmanager
def compiling(spec: KernelSpec, target=None) -> Iterator[None]:
    """Record the project files a compile of `spec`'s loaded kernel reads (a table that a constexpr function
    opens when it runs, not when its module loads) into the module's dependencies."""
    global _READS, _COMPILING
    if not _READS_HOOKED:
        _hook_reads()
    loaded = _LOADED[_load_key(spec, target)]
    _COMPILING = _Compile(loaded, [], {})
    _READS = _COMPILING.reads
    try:
        with _target_driver(target) if target is not None else contextlib.nullcontext():
            yield   # a heuristic or constexpr function asking the current target gets the cell's
    finally:
        loaded.compile_reads.update(compile_reads())
        _READS, _COMPILING = None, None


def compile_reads() -> dict[str, str | None]:
    """The project files the compile under way has read so far -> SHA-256, with those of a cache entry it reused."""
    global _READS
    if _COMPILING is None:
        return {}
    recording, _READS = _READS, None  # hashing reads the files too
    try:
        paths = [path for path in _COMPILING.reads
                 if not os.path.abspath(path).startswith((*_OUTPUT_FOLDERS, _XISA_FOLDER))]
        return {**_dependency_files({}, paths, package_folders=_COMPILING.loaded.package_folders),
                **_COMPILING.reused}
    finally:
        _READS = recording


def note_compile_reads(paths: list[str]) -> None:
    """Files the compile under way reads outside Python (the assembler's `.include`), from the working folder."""
    if _COMPILING is not None:
        _COMPILING.reads.extend(os.path.abspath(path) for path in paths)


def reused_compile_reads(reads: dict[str, str | None]) -> None:
    """A Triton cache entry the compile under way reused: what its own compile read counts as read now."""
    if _COMPILING is not None:
        _COMPILING.reused.update(reads)


def load_digest() -> str:
    """One digest of what the load of the kernel now compiling read (files, variables); '' outside a compile."""
    if _COMPILING is None:
        return ""
    return hashlib.sha256(json.dumps(_COMPILING.loaded.dependencies, sort_keys=True).encode()).hexdigest()


def _package_of(source: Path, roots: list[Path]) -> tuple[str, Path] | None:
    """A source in a package folder (one with __init__.py, nested ones too) -> its dotted module name and the
    folder holding the top package; None for a file in a plain folder. The walk up stops at a folder whose name
    is no identifier and at the project's edge, so a load never puts a folder outside the project on sys.path."""
    parts = [] if source.name == "__init__.py" else [source.stem]
    folder = source.parent
    while ((folder / "__init__.py").is_file() and folder.name.isidentifier()
           and any(_within(folder.parent, root) for root in roots)):
        parts.insert(0, folder.name)
        folder = folder.parent
    if folder == source.parent or not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts), folder


def _import_package_module(spec: KernelSpec, module_name: str, folder: Path):
    """Import `module_name` from `folder` the normal way, each parent package first, so relative imports work;
    a failing package `__init__.py` is named, and so is a package served from anywhere else."""
    parts = module_name.split(".")
    module = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        expected = spec.source_file if depth == len(parts) else folder.joinpath(*parts[:depth], "__init__.py")
        shown = expected.relative_to(folder).as_posix()
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            where = "" if expected == spec.source_file else f" in {shown}"
            raise SpecError(f"importing {spec.source_file.name} failed{where}: {type(exc).__name__}: {exc}",
                            path=spec.spec_path, field="source",
                            fix=None if not where else "make the package's __init__.py import cleanly (it runs "
                                "before every kernel in the package)") from None
        origin = vars(module).get("__file__")
        if not origin or Path(origin).resolve() != expected.resolve():
            raise SpecError(f"{spec.source_file.name} imports as {module_name!r}, but {name!r} comes from "
                            f"{origin or 'no file'}, not {shown}", path=spec.spec_path, field="source",
                            fix=f"rename the package folder {parts[0]!r} (another importer serves that name)")
    return module


def _import_kernel_module(spec: KernelSpec, roots: list[Path], package: tuple[str, Path] | None = None):
    if spec.source_file is not None:
        source = spec.source_file
        if not any(_within(source, root) for root in roots):
            raise SpecError(f"{source} is outside the project's kernel roots", path=spec.spec_path, field="source",
                            fix="keep kernel sources inside the project")
        sys.path.insert(0, str(source.parent))  # `from common import f` beside the kernel
        if package is not None:
            module_name, folder = package
            sys.path.insert(0, str(folder))     # its top package, imported the normal way
            return _import_package_module(spec, module_name, folder)
        module_name = f"xisa_kernels.{spec.name}.{source.stem}"
        loader_spec = importlib.util.spec_from_file_location(module_name, source)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise SpecError(f"importing {source.name} failed: {type(exc).__name__}: {exc}",
                            path=spec.spec_path, field="source") from None
        return module
    return _import_dotted_module(spec)


def _import_dotted_module(spec: KernelSpec):
    """`module: pkg.sub.mod` from sys.path, wherever it is installed, each parent package first: a parent whose
    `__init__.py` fails is named, one line (it runs before the kernel, and often imports a whole framework)."""
    parts = spec.module.split(".")
    module = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name and depth < len(parts):
                raise SpecError(f"cannot import module {spec.module!r}: its parent package {name!r} was not found",
                                path=spec.spec_path, field="module",
                                fix=f"add {name.replace('.', '/')}/__init__.py inside a [tool.xisa] pythonpath "
                                    "folder, or install the package") from None
            if exc.name == name:
                raise SpecError(f"cannot import module {spec.module!r}: ModuleNotFoundError: {_first_line(exc)}",
                                path=spec.spec_path, field="module",
                                fix="add its folder to [tool.xisa] pythonpath, or install the package") from None
            raise _import_failure(spec, name, depth == len(parts), exc) from None
        except Exception as exc:
            raise _import_failure(spec, name, depth == len(parts), exc) from None
    return module


def _import_failure(spec: KernelSpec, name: str, is_kernel: bool, exc: Exception) -> SpecError:
    if is_kernel:
        return SpecError(f"cannot import module {spec.module!r}: {type(exc).__name__}: {_first_line(exc)}",
                         path=spec.spec_path, field="module")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    where = f" ({found.origin})" if found is not None and found.origin else ""
    return SpecError(f"cannot import module {spec.module!r}: its parent package {name!r}{where} failed: "
                     f"{type(exc).__name__}: {_first_line(exc)}", path=spec.spec_path, field="module",
                     fix="its __init__.py runs before the kernel: make it import without a GPU, or stub what it asks "
                         "in a [tool.xisa] import_hooks file")


def _is_project_module(name: str, module: Any) -> bool:
    """A module of the project: not built in, not in the standard library or an installed package."""
    if name.partition(".")[0] in _ENVIRONMENT_PACKAGES:
        return False
    try:
        namespace = vars(module)  # never getattr: a lazy module would import on attribute access
    except TypeError:
        return False
    file = namespace.get("__file__")
    if file:
        return not _in_environment(file)
    paths = namespace.get("__path__")  # a namespace package: its folders
    try:
        folders = list(paths or ())
    except KeyError:   # a namespace path recomputes from its parent, which a finished load took out of sys.modules
        folders = list(getattr(paths, "_path", ()))
    except TypeError:
        return False
    return any(not _in_environment(p) for p in folders)


def _dependency_files(added: dict[str, Any], reads: list[str], *, kernel_package: str | None = None,
                      package_folders: tuple[str, ...] = ()) -> dict[str, str | None]:
    """The project files a load read and the files of the project modules it added, with their SHA-256
    (a namespace package's missing __init__.py as None: one appearing would change what the import runs).
    The kernel's own package (`kernel_package`, in `package_folders`) counts wholly, even when installed:
    its modules, the files read in its folders, and the files that would shadow its modules (as None).
    Bytecode caches are left out: they follow their sources (a load never reads them, see _from_source)."""
    files: dict[str, str | None] = {}
    for path in reads:
        if path.endswith(".pyc") or path.startswith(_SYSTEM_FOLDERS):
            continue
        if _in_environment(path) and not (package_folders and os.path.abspath(path).startswith(package_folders)):
            continue
        if os.path.isfile(path):
            files[os.path.abspath(path)] = file_sha256(path)
    for name, module in added.items():
        in_kernel_package = kernel_package is not None and name.partition(".")[0] == kernel_package
        if not (_is_project_module(name, module) or in_kernel_package):
            continue
        if in_kernel_package and isinstance(module, types.ModuleType):
            for path, digest in _shadowing_files(name, module).items():
                files.setdefault(path, digest)
        namespace = vars(module)
        file = namespace.get("__file__")
        if file:
            files[os.path.abspath(file)] = file_sha256(file)
        else:
            for folder in list(namespace.get("__path__") or []):
                files[os.path.join(os.path.abspath(folder), "__init__.py")] = None
    return dict(sorted(files.items()))


def file_sha256(path: str) -> str | None:
    """SHA-256 of a file's bytes; None when it does not exist (or cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=4096)
def _in_environment(path: str) -> bool:
    path = os.path.abspath(path)
    real = os.path.realpath(path)
    return any(p.startswith(root) for root in _environment_roots() for p in (path, real))


@functools.lru_cache(maxsize=1)
def _environment_roots() -> tuple[str, ...]:
    """The standard library's and the installed packages' folders (the toolchain identity covers them)."""
    import site
    import sysconfig

    folders: set[str] = set()
    for variables in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=variables) if variables else sysconfig.get_paths()
        folders.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    try:
        folders.update(site.getsitepackages())
        folders.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    roots = set()
    for folder in folders:
        for variant in (os.path.abspath(folder), os.path.realpath(folder)):
            roots.add(os.path.join(variant, ""))
    return tuple(sorted(roots))


def _within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


@dataclass
class BoundCell:
    """What a launch with the case's arguments would hand to the compiler."""

    fn: Any
    signature: dict[str, str]        # param -> Triton type ("*bf16", "i32", "constexpr", ...)
    constexprs: dict[tuple, Any]     # Triton's path-keyed constexprs
    attrs: dict[tuple, list]         # Triton's path-keyed attrs
    options: Any                     # the backend's options dataclass
    target: Any                      # GPUTarget
    config: str = ""                 # the autotuner config applied, described ('' when none)

    def signature_record(self) -> dict[str, Any]:
        names = list(self.signature)
        constexprs = {}
        for path, value in self.constexprs.items():
            constexprs[_path_name(names, path)] = _plain(value)
        attrs = {}
        for path, values in self.attrs.items():
            if values:
                attrs[_path_name(names, path)] = [f"{k}={v}" for k, v in values]
        return {"signature": dict(self.signature), "constexprs": constexprs, "attrs": attrs}

    def options_record(self) -> dict[str, Any]:
        return {k: _plain(v) for k, v in sorted(vars(self.options).items()) if k not in ("extern_libs", "arch")}


def _path_name(names: list[str], path: tuple) -> str:
    return ".".join([names[path[0]], *map(str, path[1:])])


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    inner = getattr(value, "value", None)
    if inner is not None and type(value).__name__ == "constexpr":
        return _plain(inner)
    return str(value)


def bind_cell(cell: Cell, fn) -> BoundCell:
    """Run Triton's runtime binder on the cell's stand-ins, exactly as `JITFunction.run` does: after the kernel's
    @triton.autotune config (the one the case picks) and @triton.heuristics have set their values, as at a launch.
    `fn` is the JITFunction or the object the spec names around it."""
    spec = cell.kernel
    path = spec.spec_path
    where = cell.field_path or "case"
    fn, wrappers = unwrap_kernel(_named_object(spec, fn, cell.target), spec)
    params = {p.name: p for p in fn.params}
    kwargs: dict[str, Any] = {}
    for name, value in cell.args.items():
        param = params.get(name)
        if param is None:
            raise _unknown_param(name, params, path, f"{where}.args.{name}")
        if param.is_constexpr:
            raise BindError(f"{name!r} is a tl.constexpr parameter", path=path, field=f"{where}.args.{name}",
                            fix="move it under `constexprs`")
        kwargs[name] = make_standin(value, path=path, field=f"{where}.args.{name}")
    for name, value in list(kwargs.items()):
        if isinstance(value, DerivedInt):
            kwargs[name] = resolve_derived(value, kwargs, path=path, field=f"{where}.args.{name}")
    for name, value in cell.constexprs.items():
        param = params.get(name)
        if param is None:
            raise _unknown_param(name, params, path, f"{where}.constexprs.{name}")
        if not param.is_constexpr:
            raise BindError(f"{name!r} is a runtime parameter, not a tl.constexpr", path=path,
                            field=f"{where}.constexprs.{name}", fix="move it under `args`")
        kwargs[name] = constexpr_value(value, path=path, field=f"{where}.constexprs.{name}")
    options = dict(cell.options)
    config_name = ""
    if wrappers or cell.config is not None:
        kwargs, options, config_name = _run_wrappers(cell, wrappers, kwargs, options, params)
    missing = [n for n, p in params.items() if n not in kwargs and not p.has_default]
    if missing:
        section = "constexprs" if params[missing[0]].is_constexpr else "args"
        raise BindError(f"parameter {missing[0]!r} has no value for target {cell.target.name}", path=path,
                        field=f"{where}.{section}", fix=f"add {section}: {{{missing[0]}: ...}}")
    try:
        bound = bind_values(fn, cell.target.gpu_target(), kwargs, options, path=path, where=where,
                            target_name=cell.target.name)
    except BindError as exc:
        if not config_name:
            raise
        raise BindError(f"{config_name}: {exc.detail}", path=path, field=exc.field, fix=exc.fix) from None
    bound.config = config_name
    return bound


def _named_object(spec: KernelSpec, fn, target=None):
    """The object `function:` names when `fn` is the JITFunction inside it (callers holding the plain function)."""
    loaded = _LOADED.get(_load_key(spec, target))
    named = getattr(loaded.module, spec.function, None) if loaded is not None else None
    if named is not None and named is not fn and _is_kernel_object(named) and unwrap_kernel(named, spec)[0] is fn:
        return named
    return fn


def _run_wrappers(cell: Cell, wrappers: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any],
                  params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """What the kernel's wrappers do to a launch's keyword arguments, outermost first: an Autotuner adds its config's
    values (`Config.all_kwargs`) and runs its pre_hook; a Heuristics sets each of its keys from a dict of every
    argument (`Heuristics.run`). A value the case gives that a wrapper would replace with another is refused, naming
    both (the same value is accepted: a captured case repeats them).
    Returns the kernel's kwargs, the launch options and the config's description ('' when none)."""
    from triton.compiler import make_backend
    from triton.runtime.autotuner import Autotuner

    spec = cell.kernel
    path = spec.spec_path
    where = cell.field_path or "case"
    option_fields = _option_fields(make_backend(cell.target.gpu_target()), cell.target)
    launch = {**kwargs, **options}   # a launch's kwargs: parameters and options alike
    given = {name: f"{where}.constexprs.{name}" for name in cell.constexprs}   # the case's own values
    given.update({name: f"{where}.args.{name}" for name in cell.args})
    given.update({name: f"{where}.options.{name}" for name in cell.options})
    config_name = ""
    tuner = _autotuner_of(wrappers, spec, f"{where}.config")
    if tuner is None and cell.config is not None:
        raise _not_autotuned(spec, f"{where}.config")
    for wrapper in wrappers:
        if isinstance(wrapper, Autotuner):
            index, config = select_config(wrapper, cell.config, spec, f"{where}.config")
            config_name = describe_config(index, config)
            for name, value in config.all_kwargs().items():
                if name in given and not _same_value(launch[name], value):
                    raise BindError(f"the case sets {name} to {_plain(launch[name])!r} but {config_name} sets it to "
                                    f"{_plain(value)!r}", path=path, field=given[name],
                                    fix="drop it from the case (the config sets it), or pick another config")
                if name in params or name in option_fields:   # the rest go to options the backend ignores (maxnreg on AMD)
                    launch[name] = value
            if config.pre_hook is not None:
                try:
                    config.pre_hook({**launch, **config.all_kwargs()})   # Autotuner.run's full_nargs
                except Exception as exc:
                    raise BindError(f"{config_name}'s pre_hook raised {type(exc).__name__}: {exc}".splitlines()[0],
                                    path=path, field=f"{where}.config",
                                    fix="make the pre_hook work on stand-in tensors (shape, dtype, stride())") from None
        else:
            for name, heuristic in wrapper.values.items():
                try:
                    value = heuristic(dict(launch))
                except Exception as exc:
                    raise BindError(f"heuristic {name!r} raised {type(exc).__name__}: {exc}".splitlines()[0],
                                    path=path, field=where, fix="give the case the arguments the heuristic reads") \
                        from None
                if name in given and not _same_value(launch[name], value):
                    raise BindError(f"the case sets {name} to {_plain(launch[name])!r} but the kernel's heuristic "
                                    f"{name!r} computes {_plain(value)!r}, which a launch applies over it", path=path,
                                    field=given[name], fix=f"drop {name} from the case: the heuristic computes it")
                if name in params or name in option_fields:
                    launch[name] = value
    kernel_kwargs = {name: value for name, value in launch.items() if name in params}
    launch_options = {name: value for name, value in launch.items() if name not in params}
    return kernel_kwargs, launch_options, config_name


def bind_values(fn, target, kwargs: dict[str, Any], launch_options: dict[str, Any], *, path: str = "",
                where: str = "case", target_name: str = "") -> BoundCell:
    """Triton's runtime binder on argument values (stand-ins or real tensors), as `JITFunction.run` calls it."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    params = {p.name: p for p in fn.params}
    backend = make_backend(target)
    option_fields = _option_fields(backend, target)
    for name, value in launch_options.items():
        if name not in option_fields:
            near = difflib.get_close_matches(name, sorted(option_fields), n=1)
            fix = f"did you mean {near[0]!r}?" if near else "see the backend's options"
            raise BindError(f"unknown launch option {name!r} for {target_name or target.backend}", path=path,
                            field=f"{where}.options.{name}", fix=fix)
        if name in params:
            raise BindError(f"option {name!r} shadows a kernel parameter", path=path, field=f"{where}.options.{name}")
    # The launch adds these two to its kwargs before binding (JITFunction.run).
    launch_kwargs = {**kwargs, **launch_options, "debug": False}
    if "instrumentation_mode" in option_fields:  # Triton 3.7+
        launch_kwargs["instrumentation_mode"] = ""
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    try:
        bound_args, specialization, options = binder(**launch_kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, launch_kwargs, bound_args, specialization,
                                                               options)
    except (TypeError, KeyError, ValueError, AssertionError) as exc:
        raise BindError(f"Triton's binder refused the case: {type(exc).__name__}: {exc}", path=path,
                        field=where) from None
    return BoundCell(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs, options=options, target=target)


def _option_fields(backend, target) -> set[str]:
    import dataclasses

    options_cls = type(backend.parse_options({}))
    return {f.name for f in dataclasses.fields(options_cls)}


def _unknown_param(name: str, params: dict, path: str, field: str) -> BindError:
    near = difflib.get_close_matches(name, list(params), n=1)
    fix = f"did you mean {near[0]!r}?" if near else f"the kernel's parameters: {', '.join(params)}"
    return BindError(f"the kernel has no parameter {name!r}", path=path, field=field, fix=fix)
