"""Bind a cell's stand-in arguments through Triton's own runtime binder.

A launch specializes on its arguments (divisibility 16, int == 1 as a constexpr, AMD pointer range);
an ahead-of-time compile is only faithful when it sees the same signature, constexprs and attrs.
So we build stand-ins that answer `dtype`, `data_ptr()` and `ptr_range()` like the real tensors
would, and hand them to the binder that `JITFunction.run` uses.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xisa.errors import BindError, SpecError
from xisa.spec import Cell, KernelSpec

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
_TENSOR_KEYS = {"tensor", "shape", "align", "large"}


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
    """Answers what Triton's specializer asks of a tensor: dtype, data_ptr() and ptr_range()."""

    _BASE_ADDRESS = 1 << 32  # any 256-byte aligned address

    def __init__(self, dtype, shape: tuple[int, ...], align: int, nbytes: int):
        self.dtype = dtype
        self.shape = shape
        self._align = align
        self._nbytes = nbytes

    def data_ptr(self) -> int:
        # An address that is a multiple of `align` but of no larger power of two up to 16.
        return self._BASE_ADDRESS + (self._align if self._align < 16 else 0)

    def ptr_range(self) -> int:
        return self._nbytes

    def __repr__(self) -> str:
        return f"StandInTensor({self.dtype}, shape={list(self.shape)}, align={self._align}, nbytes={self._nbytes})"


def make_standin(value: Any, *, path: str, field: str) -> Any:
    """A spec argument value -> the object a launch would pass."""
    if isinstance(value, str) and value.startswith("*"):
        value = {"tensor": value[1:]}
    if isinstance(value, dict):
        unknown = set(value) - _TENSOR_KEYS
        if unknown or "tensor" not in value:
            bad = sorted(unknown)[0] if unknown else "tensor"
            raise SpecError(f"a tensor stand-in takes {sorted(_TENSOR_KEYS)}, got {bad!r}", path=path,
                            field=f"{field}.{bad}", fix="e.g. {tensor: bf16, shape: [128, 64]}")
        dtype = torch_dtype(str(value["tensor"]), path=path, field=f"{field}.tensor")
        shape = value.get("shape", [1])
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
            raise SpecError("shape must be a list of positive ints", path=path, field=f"{field}.shape")
        align = value.get("align", 16)
        if align not in (1, 2, 4, 8, 16):
            raise SpecError(f"align {align!r} must be 1, 2, 4, 8 or 16", path=path, field=f"{field}.align")
        numel = 1
        for size in shape:
            numel *= size
        nbytes = numel * dtype.itemsize
        large = value.get("large")
        if large not in (None, True, False):
            raise SpecError("large must be true or false", path=path, field=f"{field}.large")
        if large is False and nbytes > TWO_GIB:
            raise SpecError(f"shape {shape} is {nbytes} bytes, over 2 GiB, but large is false", path=path,
                            field=f"{field}.large", fix="drop `large: false` or shrink the shape")
        if large:
            nbytes = max(nbytes, TWO_GIB + 1)
        return StandInTensor(dtype, tuple(shape), align, nbytes)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise SpecError(f"unsupported argument value {value!r}", path=path, field=field,
                    fix="use a tensor ({tensor: bf16}), an int, a float, a bool or null")


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


def load_kernel_function(spec: KernelSpec, *, roots: list[Path]):
    """Import the spec's module (only from the configured roots) and return its JITFunction.

    The module is loaded once per process in a namespace of its own (`_load_isolated`), and the
    project files the load imported are recorded for the result cache (`kernel_dependencies`).
    """
    from triton.runtime.jit import JITFunction

    loaded = _LOADED.get(_load_key(spec))
    if loaded is None:
        loaded = _load_isolated(spec, roots)
        _LOADED[_load_key(spec)] = loaded
    module = loaded.module
    fn = getattr(module, spec.function, None)
    if fn is None:
        names = [n for n in dir(module) if isinstance(getattr(module, n), JITFunction)]
        near = difflib.get_close_matches(spec.function, names, n=1)
        fix = f"did you mean {near[0]!r}?" if near else f"kernels in the module: {', '.join(names) or 'none'}"
        raise SpecError(f"no function {spec.function!r} in the module", path=spec.spec_path, field="function", fix=fix)
    if not isinstance(fn, JITFunction):
        raise SpecError(f"{spec.function!r} is a {type(fn).__name__}, not a @triton.jit kernel", path=spec.spec_path,
                        field="function", fix="decorate it with @triton.jit (autotuned kernels: name the inner jit fn)")
    return fn


def kernel_dependencies(spec: KernelSpec) -> dict[str, str | None] | None:
    """The files the load of `spec`'s module imported -> SHA-256 (None: must stay absent); None if not loaded."""
    loaded = _LOADED.get(_load_key(spec))
    return dict(loaded.dependencies) if loaded is not None else None


@dataclass
class _LoadedModule:
    module: Any
    dependencies: dict[str, str | None]


# Per process: a forked compile worker loads each spec's module once, however many cells it compiles.
_LOADED: dict[tuple, _LoadedModule] = {}

# Kernel files never live here, and reading some of these never ends.
_SYSTEM_FOLDERS = ("/proc/", "/sys/", "/dev/")
# Always the environment, wherever they are installed from (an editable Triton is still the toolchain).
_ENVIRONMENT_PACKAGES = {"triton", "torch", "xisa", "__main__"}


def _load_key(spec: KernelSpec) -> tuple:
    return (str(spec.spec_file), str(spec.source_file), spec.module)


def _load_isolated(spec: KernelSpec, roots: list[Path]) -> _LoadedModule:
    """Import the kernel module with no project module of an earlier load in sight, and record what it imported.

    A long-lived worker would otherwise keep the first `common` it imported and hand it to every later
    kernel doing `from common import f`, whatever folder that kernel is in. So the project's modules
    (everything outside the standard library and installed packages) are set aside during the load,
    the ones the load added are dropped after it (the kernel keeps references to what it uses), and
    sys.path is restored. The kernel module itself stays registered for the on-device checks.
    """
    global _READS
    if not _READS_HOOKED:
        _hook_reads()
    saved_path = list(sys.path)
    set_aside = {name: module for name, module in list(sys.modules.items()) if _is_project_module(name, module)}
    for name in set_aside:
        del sys.modules[name]
    before = set(sys.modules)
    _READS = reads = []
    try:
        module = _import_kernel_module(spec, roots)
        _READS = None  # hashing the files below reads them too
        added = {name: sys.modules[name] for name in set(sys.modules) - before}
        dependencies = _dependency_files(added, reads)
    finally:
        _READS = None
        for name in set(sys.modules) - before:
            if _is_project_module(name, sys.modules[name]):
                del sys.modules[name]
        sys.modules.update(set_aside)
        sys.path[:] = saved_path
    sys.modules[module.__name__] = module
    return _LoadedModule(module=module, dependencies=dependencies)


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

    sys.addaudithook(note_read)  # a hook cannot be removed: it does nothing outside a load
    _READS_HOOKED = True


def _import_kernel_module(spec: KernelSpec, roots: list[Path]):
    if spec.source_file is not None:
        source = spec.source_file
        if not any(_within(source, root) for root in roots):
            raise SpecError(f"{source} is outside the project's kernel roots", path=spec.spec_path, field="source",
                            fix="keep kernel sources inside the project")
        module_name = f"xisa_kernels.{spec.name}.{source.stem}"
        sys.path.insert(0, str(source.parent))  # `from common import f` beside the kernel
        loader_spec = importlib.util.spec_from_file_location(module_name, source)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise SpecError(f"importing {source.name} failed: {type(exc).__name__}: {exc}",
                            path=spec.spec_path, field="source") from None
        return module
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and missing != spec.module and spec.module.startswith(missing + "."):
            raise SpecError(f"cannot import module {spec.module!r}: ModuleNotFoundError: its parent package "
                            f"{missing!r} was not found", path=spec.spec_path, field="module",
                            fix=f"add {missing.replace('.', '/')}/__init__.py under the project root, or put "
                                "its parent folder on PYTHONPATH") from None
        raise SpecError(f"cannot import module {spec.module!r}: ModuleNotFoundError: {exc}", path=spec.spec_path,
                        field="module") from None
    except Exception as exc:
        raise SpecError(f"cannot import module {spec.module!r}: {type(exc).__name__}: {exc}",
                        path=spec.spec_path, field="module") from None
    origin = Path(getattr(module, "__file__", "") or "")
    if not any(_within(origin, root) for root in roots):
        raise SpecError(f"module {spec.module!r} lives outside the project's kernel roots ({origin})",
                        path=spec.spec_path, field="module")
    return module


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
        return bool(paths) and any(not _in_environment(p) for p in list(paths))
    except TypeError:
        return False


def _dependency_files(added: dict[str, Any], reads: list[str]) -> dict[str, str | None]:
    """The project files a load read and the files of the project modules it added, with their SHA-256
    (a namespace package's missing __init__.py as None: one appearing would change what the import runs).
    Bytecode caches are left out: they follow their sources."""
    files: dict[str, str | None] = {}
    for path in reads:
        if path.endswith(".pyc") or path.startswith(_SYSTEM_FOLDERS) or _in_environment(path):
            continue
        if os.path.isfile(path):
            files[os.path.abspath(path)] = file_sha256(path)
    for name, module in added.items():
        if not _is_project_module(name, module):
            continue
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
    """Run Triton's runtime binder on the cell's stand-ins, exactly as `JITFunction.run` does."""
    spec = cell.kernel
    path = spec.spec_path
    where = cell.field_path or "case"
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
    for name, value in cell.constexprs.items():
        param = params.get(name)
        if param is None:
            raise _unknown_param(name, params, path, f"{where}.constexprs.{name}")
        if not param.is_constexpr:
            raise BindError(f"{name!r} is a runtime parameter, not a tl.constexpr", path=path,
                            field=f"{where}.constexprs.{name}", fix="move it under `args`")
        kwargs[name] = constexpr_value(value, path=path, field=f"{where}.constexprs.{name}")
    missing = [n for n, p in params.items() if n not in kwargs and not p.has_default]
    if missing:
        section = "constexprs" if params[missing[0]].is_constexpr else "args"
        raise BindError(f"parameter {missing[0]!r} has no value for target {cell.target.name}", path=path,
                        field=f"{where}.{section}", fix=f"add {section}: {{{missing[0]}: ...}}")
    return bind_values(fn, cell.target.gpu_target(), kwargs, cell.options, path=path, where=where,
                       target_name=cell.target.name)


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
