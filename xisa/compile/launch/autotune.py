"""What a kernel's wrappers do to a launch: the config a case picks, its values and pre_hook, and the values each
heuristic computes, applied in the order a launch runs them.

A wrapper's part is decided by its type (isinstance), never its class name. Every triton `Autotuner` subclass
keeps the part of Triton's contract that decides the code: the chosen config's `all_kwargs()` join the launch's
kwargs, and its `pre_hook` runs on `{**args, **kwargs, **all_kwargs()}` first. FlagGems' LibTuner (read from
flag_gems 5.0.2 utils/libentry.py) and fla's CachedAutotuner (fla-core 0.6.0 ops/utils/cache.py) differ from
Autotuner.run only in how they choose, which a case replaces by naming the config: LibTuner keys its SQL config
cache on `key` mapped through its `strategy` plus the dtypes, benchmarks through its `policy` after
`prune_configs` (Autotuner's `prune_configs_by`), and swaps a cached config for the listed one with equal
`all_kwargs()`; CachedAutotuner puts a config from fla's files into Autotuner's cache (one that is none of its
`configs` xisa cannot name: `xisa capture` notes it). Both take `configs[0]` unbenchmarked when there is one.
Their tuner-level `pre_hook`/`post_hook` (reset_to_zero, restore_value) run only around benchmarks, not on
the launch that compiles, so xisa runs neither. Any other KernelInterface (FlagGems' LibEntry) passes the
launch through (`loader.unwrap_kernel` says why that holds for LibEntry).
"""

from __future__ import annotations

from typing import Any

from xisa.compile.launch.prune import (describe_config, describe_kept, kept_configs, listed_index, plain_config,
                                same_config)
from xisa.compile.launch.standins import constexpr_value, plain
from xisa.errors import BindError, HeuristicError, SpecError
from xisa.spec.cases import Cell, KernelSpec

def autotuner_of(wrappers: tuple[Any, ...], spec: KernelSpec, field: str):
    from triton.runtime.autotuner import Autotuner

    tuners = [w for w in wrappers if isinstance(w, Autotuner)]
    if len(tuners) > 1:
        raise SpecError(f"{spec.function!r} stacks {len(tuners)} @triton.autotune decorators; xisa picks a config of "
                        "one", path=spec.spec_path, field=field, fix="autotune the kernel once")
    return tuners[0] if tuners else None


def not_autotuned(spec: KernelSpec, field: str) -> SpecError:
    return SpecError(f"{spec.function!r} is not an @triton.autotune object, so `config` has nothing to pick",
                     path=spec.spec_path, field=field,
                     fix="drop `config`, or name the @triton.autotune object in `function:`")


def _same_value(given: Any, value: Any) -> bool:
    """A spec value (a {dtype: NAME} already made the dtype) equals a launch value; a bool never equals an int."""
    if isinstance(given, bool) or isinstance(value, bool):
        return isinstance(given, bool) and isinstance(value, bool) and given == value
    return given == value


def select_config(tuner, chosen: Any, spec: KernelSpec, field: str, kept: list | None = None,
                  target: str = "") -> tuple[int | None, Any, str]:
    """The config a case's `config:` picks among `kept` (what `target`'s pruning leaves; default: the whole list):
    an index into the autotuner's list, or a mapping matching exactly one kept config's values on the keys it gives.
    Returns its index in the autotuner's list (None: the pruner made it), the config and its description."""
    configs = list(tuner.configs)
    pruned = kept is not None and (len(kept) != len(configs) or any(a is not b for a, b in zip(kept, configs)))
    kept = configs if kept is None else kept
    listing = "; ".join(describe_kept(tuner, kept, i) for i in range(len(kept)))
    among = f"{target}'s pruner keeps {listing}" if pruned else listing
    if chosen is None:
        raise SpecError(f"{spec.function!r} is autotuned ({len(configs)} configs) and the case picks none",
                        path=spec.spec_path, field=field, fix="config: 0 (an index), a mapping of a config's values "
                        f"such as {{{', '.join(f'{k}: {v}' for k, v in plain_config(kept[0]).items())}}}, or all "
                        "(one case per config)")
    if isinstance(chosen, int) and not isinstance(chosen, bool):
        if chosen >= len(configs):
            raise SpecError(f"config {chosen} is out of range: the autotuner has {len(configs)} configs",
                            path=spec.spec_path, field=field, fix=f"an index 0..{len(configs) - 1}: {listing}")
        position = next((i for i, config in enumerate(kept) if same_config(config, configs[chosen])), None)
        if position is None:
            raise _not_kept(describe_config(f"config {chosen}", configs[chosen]), among, spec, field)
        return chosen, kept[position], describe_kept(tuner, kept, position)
    if not isinstance(chosen, dict):
        raise BindError(f"config {chosen!r} was not expanded", path=spec.spec_path, field=field)
    wanted = {name: constexpr_value(value, path=spec.spec_path, field=f"{field}.{name}")
              for name, value in chosen.items()}
    shown = f"config {{{', '.join(f'{k}: {v}' for k, v in chosen.items())}}}"
    matches = _matching(kept, wanted)
    if not matches and pruned and _matching(configs, wanted):
        raise _not_kept(shown, among, spec, field)
    if len(matches) != 1:
        how = "matches none" if not matches else f"matches {len(matches)} ({', '.join(map(str, matches))})"
        of = f"of the {len(kept)} configs {target}'s pruner keeps" if pruned else \
            f"of the autotuner's {len(configs)} configs"
        raise SpecError(f"{shown} {how} {of}", path=spec.spec_path, field=field,
                        fix=f"give values that match exactly one, or an index: {listing}")
    return listed_index(tuner, kept[matches[0]]), kept[matches[0]], describe_kept(tuner, kept, matches[0])


def _matching(configs: list, wanted: dict[str, Any]) -> list[int]:
    """The positions of the configs whose values are `wanted` on its keys; a list holding one config twice
    (FlagGems' tuning files can) matches once: the same launch."""
    missing = object()
    matches = [i for i, config in enumerate(configs)
               if all(_same_value(value, config.all_kwargs().get(name, missing if value is not None else None))
                      for name, value in wanted.items())]
    if matches and all(same_config(configs[i], configs[matches[0]]) for i in matches[1:]):
        matches = matches[:1]
    return matches


def _not_kept(shown: str, among: str, spec: KernelSpec, field: str) -> SpecError:
    return SpecError(f"{shown} is pruned away on this target: {among}", path=spec.spec_path, field=field,
                     fix="pick a config the pruner keeps (an index or values), or config: all (the kept ones)")


def run_wrappers(cell: Cell, wrappers: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any],
                  params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str, dict | None]:
    """What the kernel's wrappers do to a launch's keyword arguments, outermost first: an Autotuner adds its config's
    values (`Config.all_kwargs`) and runs its pre_hook; a Heuristics sets each of its keys from a dict of every
    argument (`Heuristics.run`); any other wrapper changes nothing. A value the case gives that a wrapper would replace with another is refused, naming
    both (the same value is accepted: a captured case repeats them).
    The autotuner picks among the configs its pruning keeps on the cell's target (`xisa.compile.launch.prune`).
    Returns the kernel's kwargs, the launch options, the config's description ('' when none) and the config
    compiled ({index in the autotuner's list, None for one its pruner made; values}, None when none)."""
    from triton.compiler import make_backend
    from triton.runtime.autotuner import Autotuner, Heuristics

    spec = cell.kernel
    path = spec.spec_path
    where = cell.field_path or "case"
    option_fields = backend_option_fields(make_backend(cell.target.gpu_target()), cell.target)
    launch = {**kwargs, **options}   # a launch's kwargs: parameters and options alike
    given = _given(cell)
    config_name, picked = "", None
    tuner = autotuner_of(wrappers, spec, f"{where}.config")
    if tuner is None and cell.config is not None:
        raise not_autotuned(spec, f"{where}.config")
    for wrapper in wrappers:   # any KernelInterface that is neither passes the launch through unchanged
        if isinstance(wrapper, Autotuner):
            kept = kept_configs(wrapper, launch, path=path, field=f"{where}.config")   # the target answers the device
            index, config, config_name = select_config(wrapper, cell.config, spec, f"{where}.config", kept,
                                                       cell.target.name)
            picked = {"index": index, "values": plain_config(config)}
            for name, value in config.all_kwargs().items():
                if name in given and not _same_value(launch[name], value):
                    raise BindError(f"the case sets {name} to {plain(launch[name])!r} but {config_name} sets it to "
                                    f"{plain(value)!r}", path=path, field=given[name],
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
        elif isinstance(wrapper, Heuristics):
            _apply_heuristics(cell, wrapper, launch, given, params, option_fields)
    computed = {name for wrapper in wrappers if isinstance(wrapper, Heuristics) for name in wrapper.values}
    for name in cell.heuristics:
        if name not in computed:
            raise BindError(f"no @triton.heuristics of {spec.function!r} computes {name!r}", path=path,
                            field=f"{where}.heuristics.{name}",
                            fix=f"heuristics: names what the kernel's heuristics compute ({', '.join(sorted(computed)) or 'none'})")
    kernel_kwargs = {name: value for name, value in launch.items() if name in params}
    launch_options = {name: value for name, value in launch.items() if name not in params}
    return kernel_kwargs, launch_options, config_name, picked


def _given(cell: Cell) -> dict[str, str]:
    """The names of the case's own values -> the field each is written in."""
    given = {name: cell.field_of("constexprs", name) for name in cell.constexprs}
    given.update({name: cell.field_of("args", name) for name in cell.args})
    given.update({name: cell.field_of("options", name) for name in cell.options})
    return given


def _apply_heuristics(cell: Cell, wrapper, launch: dict[str, Any], given: dict[str, str], params: dict[str, Any],
                      option_fields: set[str]) -> None:
    """`Heuristics.run`: each of its keys set in `launch` from a dict of every argument."""
    path, where = cell.kernel.spec_path, cell.field_path or "case"
    for name, heuristic in wrapper.values.items():
        arguments = _Arguments(launch)
        try:
            value = heuristic(arguments)
        except Exception as exc:
            if isinstance(exc, KeyError) and exc.args and exc.args[0] in arguments.missing:
                fix = (f"give {exc.args[0]} in the case's constexprs or args: the heuristic reads it of its arguments "
                       "(a value the launch passed)")
            elif isinstance(exc, (KeyError, NameError, AttributeError)):
                fix = ("the heuristic reads what the program set at run time, not its arguments (a module global, the "
                       "environment): pass that value to the kernel as an argument, or compute it from the arguments")
            else:
                fix = "give the case the arguments the heuristic reads, as the launch had them"
            raise HeuristicError(f"heuristic {name!r} raised {type(exc).__name__}: {exc}".splitlines()[0],
                                 path=path, field=where, fix=fix) from None
        if name in given and not _same_value(launch[name], value):
            raise BindError(f"the case sets {name} to {plain(launch[name])!r} but the kernel's heuristic "
                            f"{name!r} computes {plain(value)!r}, which a launch applies over it", path=path,
                            field=given[name], fix=f"drop {name} from the case: the heuristic computes it")
        _check_captured_heuristic(cell, name, value, heuristic, dict(launch))
        if name in params or name in option_fields:
            launch[name] = value


def kept_at_autotuner(cell: Cell, wrappers: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any],
                      params: dict[str, Any]) -> tuple[Any, list]:
    """The kernel's autotuner and the configs its pruning keeps for the cell's launch, as `run_wrappers` meets it
    (a Heuristics outside it applied first). Run it where the cell's target answers the device."""
    from triton.compiler import make_backend
    from triton.runtime.autotuner import Heuristics

    field = f"{cell.field_path or 'case'}.config"
    tuner = autotuner_of(wrappers, cell.kernel, field)
    if tuner is None:
        raise not_autotuned(cell.kernel, field)
    option_fields = backend_option_fields(make_backend(cell.target.gpu_target()), cell.target)
    launch, given = {**kwargs, **options}, _given(cell)
    for wrapper in wrappers[:wrappers.index(tuner)]:
        if isinstance(wrapper, Heuristics):
            _apply_heuristics(cell, wrapper, launch, given, params, option_fields)
    return tuner, kept_configs(tuner, launch, path=cell.kernel.spec_path, field=field)


def _check_captured_heuristic(cell: Cell, name: str, value: Any, heuristic, launch: dict[str, Any]) -> None:
    """A heuristic computed again on the stand-ins must give what it gave at the captured launch: another value
    compiles another branch of the kernel. Where it read a tensor's layout (a stride test on a contiguous stand-in
    of a transposed tensor), the stand-ins may not be the launch's arguments; where it read none, the kernel's
    code now computes another value (an intended config change, cut-cross-entropy's best config as heuristics)."""
    if name not in cell.heuristics:
        return
    path, where = cell.kernel.spec_path, cell.field_path or "case"
    captured = constexpr_value(cell.heuristics[name], path=path, field=f"{where}.heuristics.{name}")
    if _same_value(value, captured):
        return
    said = (f"the kernel's heuristic {name!r} computes {plain(value)!r} on the case's arguments, but the launch had "
            f"{plain(captured)!r}")
    on_purpose = f"set heuristics.{name}: {plain(value)!r} in the spec"
    layout = _layout_read(heuristic, launch)
    if layout:
        raise HeuristicError(f"{said}: it reads {', '.join(layout)}, where the stand-ins may not be the launch's "
                             "arguments", path=path, field=f"{where}.heuristics.{name}",
                             fix="give the tensors the launch's strides, offset and storage (xisa capture writes "
                                 f"them); if the kernel's heuristic changed on purpose, {on_purpose}")
    raise HeuristicError(f"{said}: it reads no tensor's layout, so the kernel's code computes another value than at "
                         "capture", path=path, field=f"{where}.heuristics.{name}",
                         fix=f"if the change is on purpose (a new config), {on_purpose}; if not, the kernel's "
                             "heuristic changed by mistake")


class _Arguments(dict):
    """The dict a heuristic is given (`{**args, **kwargs}`, as Heuristics.run makes it), noting the keys it asked for
    and did not find."""

    def __init__(self, launch: dict[str, Any]):
        super().__init__(launch)
        self.missing: set = set()

    def __missing__(self, key):
        self.missing.add(key)
        raise KeyError(key)


# What a stand-in answers of its tensor's layout: where a heuristic reads one of these, a stand-in written without the
# launch's strides, offset or storage gives another value than the launch's tensor did.
_LAYOUT = frozenset({"stride", "strides", "data_ptr", "storage_offset", "untyped_storage", "is_contiguous",
                     "ptr_range"})


def _layout_read(heuristic, launch: dict[str, Any]) -> list[str]:
    """`x_ptr.stride`, ...: the layout of the tensors the heuristic reads (run once more, watched); [] where it reads
    none, or cannot be watched."""
    from xisa.compile.launch.standins import StandInTensor

    read: set[str] = set()

    class Watched:
        def __init__(self, name: str, tensor):
            self._name, self._tensor = name, tensor

        def __getattr__(self, attribute: str):
            if attribute in _LAYOUT:
                read.add(f"{self._name}.{attribute}")
            return getattr(self._tensor, attribute)

    watched = {key: Watched(key, value) if isinstance(value, StandInTensor) else value for key, value in launch.items()}
    try:
        heuristic(watched)
    except Exception:
        pass   # what it read before it failed still says where it looked
    return sorted(read)


def backend_option_fields(backend, target) -> set[str]:
    """The launch options the backend knows: the fields of its options dataclass."""
    import dataclasses

    options_cls = type(backend.parse_options({}))
    return {f.name for f in dataclasses.fields(options_cls)}

