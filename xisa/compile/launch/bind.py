"""Bind a cell's stand-in arguments through Triton's own runtime binder.

A launch specializes on its arguments (divisibility 16, int == 1 as a constexpr, AMD pointer range);
an ahead-of-time compile is only faithful when it sees the same signature, constexprs and attrs.
So the cell's values become stand-ins (`standins`) that answer `dtype`, `data_ptr()` and `ptr_range()` like
the real tensors would, the kernel's wrappers apply their values (`autotune`), and the binder that
`JITFunction.run` uses binds them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from xisa.compile.launch.autotune import backend_option_fields, kept_at_autotuner, run_wrappers
from xisa.compile.launch.loader import named_object, unwrap_kernel
from xisa.compile.launch.standins import DerivedInt, constexpr_value, make_standin, plain, resolve_derived
from xisa.errors import BindError
from xisa.spec.cases import Cell


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
    notes: tuple[str, ...] = ()      # launch options Triton itself rewrote for the target, each named
    picked: dict | None = None       # that config: {index: in the autotuner's list (None: its pruner made it), values}
    # the option keywords the launch hands `backend.parse_options` (its own and `JITFunction.run`'s): what a
    # launch elsewhere parses again under its own knobs (`xisa export --verify`)
    launch_options: dict[str, Any] = field(default_factory=dict)

    def signature_record(self) -> dict[str, Any]:
        names = list(self.signature)
        constexprs = {}
        for path, value in self.constexprs.items():
            constexprs[_path_name(names, path)] = plain(value)
        attrs = {}
        for path, values in self.attrs.items():
            if values:
                attrs[_path_name(names, path)] = [f"{k}={v}" for k, v in values]
        return {"signature": dict(self.signature), "constexprs": constexprs, "attrs": attrs}

    def options_record(self) -> dict[str, Any]:
        return {k: plain(v) for k, v in sorted(vars(self.options).items()) if k not in ("extern_libs", "arch")}


def _path_name(names: list[str], path: tuple) -> str:
    return ".".join([names[path[0]], *map(str, path[1:])])



def bind_cell(cell: Cell, fn) -> BoundCell:
    """Run Triton's runtime binder on the cell's stand-ins, exactly as `JITFunction.run` does: after the kernel's
    @triton.autotune config (the one the case picks) and @triton.heuristics have set their values, as at a launch.
    `fn` is the JITFunction or the object the spec names around it."""
    spec = cell.kernel
    path = spec.spec_path
    where = cell.field_path or "case"
    fn, wrappers, params, kwargs = _case_values(cell, fn)
    options = dict(cell.options)
    config_name, picked = "", None
    if wrappers or cell.config is not None or cell.heuristics:
        kwargs, options, config_name, picked = run_wrappers(cell, wrappers, kwargs, options, params)
    missing = [n for n, p in params.items() if n not in kwargs and not p.has_default]
    if missing:
        section = "constexprs" if params[missing[0]].is_constexpr else "args"
        raise BindError(f"parameter {missing[0]!r} has no value for target {cell.target.name}", path=path,
                        field=f"{where}.{section}", fix=f"add {section}: {{{missing[0]}: ...}}")
    try:
        bound = bind_values(fn, cell.target.gpu_target(), kwargs, options, path=path, where=where,
                            target_name=cell.target.name, option_field=lambda name: cell.field_of("options", name))
    except BindError as exc:
        if not config_name:
            raise
        raise BindError(f"{config_name}: {exc.detail}", path=path, field=exc.field, fix=exc.fix) from None
    bound.config, bound.picked = config_name, picked
    return bound


def configs_kept_for(cell: Cell, fn) -> tuple[Any, list]:
    """The autotuner `fn` holds and the configs its pruning keeps for the cell's stand-ins, as a launch with them
    would prune (run it where the cell's target answers the device: `xisa.compile.incremental.reads.compiling`)."""
    fn, wrappers, params, kwargs = _case_values(cell, fn)
    return kept_at_autotuner(cell, wrappers, kwargs, dict(cell.options), params)


def _case_values(cell: Cell, fn) -> tuple[Any, tuple, dict[str, Any], dict[str, Any]]:
    """The JITFunction, its wrappers and parameters, and the case's arguments as a launch passes them: stand-ins for
    tensors, derived ints resolved, constexprs as values."""
    spec = cell.kernel
    path = spec.spec_path
    fn, wrappers = unwrap_kernel(named_object(spec, fn, cell.target), spec)
    params = {p.name: p for p in fn.params}
    kwargs: dict[str, Any] = {}
    for name, value in cell.args.items():
        param = params.get(name)
        if param is None:
            raise _unknown_param(name, params, path, cell.field_of("args", name))
        if param.is_constexpr:
            raise BindError(f"{name!r} is a tl.constexpr parameter", path=path, field=cell.field_of("args", name),
                            fix="move it under `constexprs`")
        kwargs[name] = make_standin(value, path=path, field=cell.field_of("args", name))
    for name, value in list(kwargs.items()):
        if isinstance(value, DerivedInt):
            kwargs[name] = resolve_derived(value, kwargs, path=path, field=cell.field_of("args", name))
    for name, value in cell.constexprs.items():
        param = params.get(name)
        if param is None:
            raise _unknown_param(name, params, path, cell.field_of("constexprs", name))
        if not param.is_constexpr:
            raise BindError(f"{name!r} is a runtime parameter, not a tl.constexpr", path=path,
                            field=cell.field_of("constexprs", name), fix="move it under `args`")
        kwargs[name] = constexpr_value(value, path=path, field=cell.field_of("constexprs", name))
    return fn, wrappers, params, kwargs



def bind_values(fn, target, kwargs: dict[str, Any], launch_options: dict[str, Any], *, path: str = "",
                where: str = "case", target_name: str = "", option_field=None) -> BoundCell:
    """Triton's runtime binder on argument values (stand-ins or real tensors), as `JITFunction.run` calls it.
    `option_field(name)`: where an option is written (the layer that set it), `{where}.options.NAME` without."""
    option_field = option_field or (lambda name: f"{where}.options.{name}")
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    params = {p.name: p for p in fn.params}
    backend = make_backend(target)
    option_fields = backend_option_fields(backend, target)
    for name, value in launch_options.items():
        if name not in option_fields:
            near = difflib.get_close_matches(name, sorted(option_fields), n=1)
            fix = f"did you mean {near[0]!r}?" if near else "see the backend's options"
            raise BindError(f"unknown launch option {name!r} for {target_name or target.backend}", path=path,
                            field=option_field(name), fix=fix)
        if name in params:
            raise BindError(f"option {name!r} shadows a kernel parameter", path=path, field=option_field(name))
    launch_kwargs = {**kwargs, **launch_options, **_run_options(fn, launch_options, option_fields)}
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    try:
        bound_args, specialization, options = binder(**launch_kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, launch_kwargs, bound_args, specialization,
                                                               options)
    except (TypeError, KeyError, ValueError, AssertionError) as exc:
        raise BindError(f"Triton's binder refused the case: {type(exc).__name__}: {exc}", path=path,
                        field=where) from None
    notes = tuple(note for name, wanted in launch_options.items()
                  if (note := _refuse_unhonoured(options, name, wanted, path=path, field=option_field(name))))
    return BoundCell(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs, options=options, target=target,
                     notes=notes, launch_options={k: v for k, v in launch_kwargs.items() if k in option_fields})


def _run_options(fn, launch_options: dict[str, Any], option_fields: set[str]) -> dict[str, Any]:
    """The two options `JITFunction.run` sets before binding: `debug` is the launch's, else the jit's
    (`@triton.jit(debug=True)`), or TRITON_DEBUG's (pinned off); `instrumentation_mode` is always
    TRITON_INSTRUMENTATION_MODE's (pinned unset, Triton 3.7+)."""
    from triton import knobs

    chosen = {"debug": launch_options.get("debug", getattr(fn, "debug", None)) or knobs.runtime.debug}
    if "instrumentation_mode" in option_fields:
        chosen["instrumentation_mode"] = getattr(knobs.compilation, "instrumentation_mode", "") or ""
    return chosen


def _refuse_unhonoured(options, name: str, wanted: Any, *, path: str, field: str) -> str | None:
    """A launch option the compile would not get as written is an error when no launch could compile it (Triton
    takes it from elsewhere): compiling a replacement silently would guard a kernel the case does not describe.
    A value Triton only re-spells (a dict as a tuple of items) is honoured; `null` means the default. A value
    Triton's options rewrite for the target, warning as they do (gfx950's `kpack` 2 -> 1), is what a launch
    compiles too: it compiles, and the returned note names the rewrite."""
    if wanted is None:
        return None
    if name == "arch":
        raise BindError("the architecture is the cell's target, not an option", path=path, field=field,
                        fix="remove it, and name the target in the spec's `targets:` or an override")
    got = getattr(options, name, None)
    if plain(got) == plain(wanted):
        return None
    rewritten, warned = _rewritten(options, name, wanted)
    if rewritten is not _UNSET and plain(rewritten) == plain(got):
        return (f"{name}={plain(wanted)!r} compiles as {plain(got)!r}, as a launch does: Triton's options rewrite "
                f"it for this target ({warned})") if warned else None
    why = ("it comes from TRITON_INSTRUMENTATION_MODE at a launch, which xisa pins unset"
           if name == "instrumentation_mode" else f"Triton's options for this target make it {plain(got)!r}")
    raise BindError(f"a launch would not compile with {name}={plain(wanted)!r}: {why}", path=path, field=field,
                    fix=f"remove {name} from the options (or give the value a launch compiles with)")


_UNSET = object()


def _rewritten(options, name: str, wanted: Any) -> tuple[Any, str]:
    """What the options dataclass makes of `wanted` by itself (as a launch's `parse_options` builds it), and the
    first line of the warning it gave ('' for a silent re-spelling); `_UNSET` when it refuses the value."""
    import dataclasses
    import warnings

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            again = getattr(dataclasses.replace(options, **{name: wanted}), name)
    except Exception:
        return _UNSET, ""
    return again, (str(caught[0].message).strip().splitlines() or [""])[0] if caught else ""


def _unknown_param(name: str, params: dict, path: str, field: str) -> BindError:
    near = difflib.get_close_matches(name, list(params), n=1)
    fix = f"did you mean {near[0]!r}?" if near else f"the kernel's parameters: {', '.join(params)}"
    return BindError(f"the kernel has no parameter {name!r}", path=path, field=field, fix=fix)
