"""Kernel specs: YAML files naming a Triton function and its cases, expanded into cells.

Pure data: nothing here imports Triton. Binding the arguments to the kernel happens in `bind`.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import itertools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from xisa.analyze.expect import Expectations, check_for_target as check_expectations_for_target, parse_expectations
from xisa.errors import SpecError
from xisa.names import CASE_NAME, KERNEL_NAME, CellKey, check_name
from xisa.spec.targets import Target, select_targets, selects
from xisa.yamlio import load_yaml

_FILE_KEYS = {"name", "source", "module", "function", "targets", "defaults", "cases", "description"}
_CASE_KEYS = {"name", "args", "constexprs", "options", "targets", "overrides", "matrix", "expect", "description", "runtime",
              "config", "heuristics"}
_LAYER_KEYS = {"args", "constexprs", "options", "targets", "expect", "runtime", "config", "heuristics"}
_DEFAULT_KEYS = {"args", "constexprs", "options", "expect", "overrides", "runtime", "config", "heuristics"}
# `config: all` expands a case into one case per config a launch on the target could pick: `<case>-config<i>` for the
# autotuner's config i, `<case>-pruned<j>` for the j-th config its pruner made (gemlite's pruner makes new ones).
CONFIG_ALL = "all"
CONFIG_FIX = "config: 0 (an index into the autotuner's configs), a mapping such as {BLOCK_M: 64, num_warps: 4}, or all"
# Given a spec (its cases not yet read), the field asking and the case's cells on given targets (`config` unset), the
# configs each target's pruning keeps: {target name: [(index in the autotuner's list or None, values)]}, the key
# None meaning every target alike (an autotuner that prunes nothing). Running the pruner imports the kernel module
# and answers the device as each target, so the caller supplies it (the compile layer's `config_lister`).
KeptConfigs = dict["str | None", list[tuple["int | None", dict]]]
ConfigLister = Callable[["KernelSpec", str, Callable[[list[Target]], list["Cell"]]], KeptConfigs]
# A matrix multiplies: 18 axes of two values are 262144 cases, minutes of silence before anything
# compiles. The bundled specs have at most a few dozen cases each.
MAX_CASES_PER_SPEC = 4096


@dataclass(frozen=True)
class KernelSpec:
    name: str
    spec_path: str              # as shown to the user (relative to the project root where possible)
    spec_file: Path             # absolute
    source_file: Path | None    # absolute .py path, or None when `module` is used
    module: str | None
    function: str
    cases: tuple["CaseSpec", ...]
    pythonpath: tuple[Path, ...] = ()      # [tool.xisa] pythonpath: ahead of sys.path during the load
    import_hooks: tuple[Path, ...] = ()    # [tool.xisa] import_hooks: run before the load


@dataclass(frozen=True)
class CaseSpec:
    kernel: str
    name: str
    field_path: str             # e.g. cases[2] (gemm_bf16) for error messages
    layers: tuple[dict, ...]    # defaults, case, matrix patches: merged in this order
    overrides: tuple[tuple[str, dict], ...]
    target_patterns: tuple[str, ...]
    # Where each layer and override is written (`defaults`, `cases[0] (c)`, `defaults.overrides.gfx11*`): an
    # error about a value names the layer that set it, so one bad value in `defaults:` is one message for all cases.
    layer_fields: tuple[str, ...] = ()
    override_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cell:
    """One kernel case on one target, with everything needed to bind and compile it."""

    kernel: KernelSpec
    case: str
    target: Target
    args: dict[str, Any]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    expect: Expectations           # parsed and checked when the spec loaded
    field_path: str = field(default="")
    runtime: str | None = None     # a function of the kernel module that launches and checks this case
    config: int | dict | None = None   # the autotuner config the case picks: an index or a mapping of its values
    # What the kernel's @triton.heuristics gave at a captured launch: compiling the case computes them again,
    # and another value is an error (the stand-ins are not the launch's arguments).
    heuristics: dict[str, Any] = field(default_factory=dict)
    # `args.x` -> the field of the layer whose value the cell has (`defaults`): what an error about it names
    value_fields: dict[str, str] = field(default_factory=dict)

    def field_of(self, section: str, name: str) -> str:
        """`defaults.args.x` or `cases[0] (c).args.x`: where the value the cell has for `section.name` is written."""
        return f"{self.value_fields.get(f'{section}.{name}', self.field_path or 'case')}.{section}.{name}"

    @property
    def key(self) -> CellKey:
        return CellKey(self.kernel.name, self.case, self.target.name)

    @property
    def id(self) -> str:
        return str(self.key)


def _err(msg: str, path: str, fieldname: str, fix: str | None = None) -> SpecError:
    return SpecError(msg, path=path, field=fieldname, fix=fix)


def _mapping(value: Any, path: str, fieldname: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _err(f"must be a mapping, got {type(value).__name__}", path, fieldname)
    for key in value:
        if not isinstance(key, str):
            raise _err(f"key {key!r} must be a string", path, fieldname)
    return value


def _patterns(value: Any, path: str, fieldname: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise _err("must be a target name or glob, or a non-empty list of them", path, fieldname,
                   "e.g. targets: ['gfx11*', gfx942]")
    return tuple(value)


def _check_keys(data: dict, allowed: set[str], path: str, fieldname: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
        fix = f"did you mean {near[0]!r}?" if near else f"allowed keys: {', '.join(sorted(allowed))}"
        raise _err(f"unknown key {unknown[0]!r}", path, f"{fieldname}.{unknown[0]}".lstrip("."), fix)


def _check_layer(layer: dict, path: str, fieldname: str, allowed: set[str] = _LAYER_KEYS) -> dict:
    layer = _mapping(layer, path, fieldname)
    _check_keys(layer, allowed, path, fieldname)
    for key in ("args", "constexprs", "options", "heuristics"):
        if key in layer:
            _mapping(layer[key], path, f"{fieldname}.{key}")
    if "expect" in layer:
        expect = {pattern: _mapping(conds, path, f"{fieldname}.expect.{pattern}")
                  for pattern, conds in _mapping(layer["expect"], path, f"{fieldname}.expect").items()}
        layer["expect"] = parse_expectations(expect, path=path, field=fieldname)
    if "targets" in layer:
        _patterns(layer["targets"], path, f"{fieldname}.targets")
    if "runtime" in layer and not (layer["runtime"] is None or (isinstance(layer["runtime"], str)
                                                               and layer["runtime"].isidentifier())):
        raise _err("must name a function of the kernel module", path, f"{fieldname}.runtime",
                   "runtime: check_my_kernel")
    if "config" in layer:
        _check_config(layer["config"], path, f"{fieldname}.config")
    return layer


def _check_config(value: Any, path: str, fieldname: str) -> None:
    if value == CONFIG_ALL or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return
    if isinstance(value, dict) and value:
        for key, item in _mapping(value, path, fieldname).items():
            plain = item is None or isinstance(item, (bool, int, float, str))
            if not plain and not (isinstance(item, dict) and set(item) == {"dtype"}):
                raise _err(f"config value {item!r} is not an int, float, bool, string or {{dtype: NAME}}", path,
                           f"{fieldname}.{key}", CONFIG_FIX)
        return
    raise _err(f"config {value!r} is not an index, a mapping or `all`", path, fieldname, CONFIG_FIX)

def load_spec(spec_file: Path, *, display: str | None = None, list_configs: ConfigLister | None = None) -> KernelSpec:
    """Read one spec; `list_configs` says which configs each target's pruning keeps (for `config: all`)."""
    shown = display or str(spec_file)
    return spec_from_data(load_yaml(spec_file, error=SpecError, display=shown), spec_file, shown=shown,
                          list_configs=list_configs)


def spec_from_data(data: Any, spec_file: Path, *, shown: str, list_configs: ConfigLister | None = None) -> KernelSpec:
    """A spec from its parsed YAML, as if read from `spec_file` (which decides where `source:` is looked for)."""
    data = _mapping(data, shown, "<top>")
    _check_keys(data, _FILE_KEYS, shown, "")
    kernel_name = check_name("kernel", data.get("name", spec_file.stem), KERNEL_NAME, path=shown, field="name")
    source = data.get("source")
    module = data.get("module")
    if (source is None) == (module is None):
        raise _err("give exactly one of `source` (a .py path) or `module` (a dotted module)", shown, "source")
    source_file = None
    if source is not None:
        if not isinstance(source, str) or not source.endswith(".py"):
            raise _err(f"{source!r} is not a .py file path", shown, "source", "e.g. source: gemm.py")
        source_file = (spec_file.parent / source).resolve()
        if not source_file.is_file():
            raise _err(f"{source!r} does not exist (looked for {source_file.name} beside the spec)", shown, "source")
    elif not isinstance(module, str) or not all(p.isidentifier() for p in module.split(".")):
        raise _err(f"{module!r} is not a dotted module name", shown, "module")
    function = data.get("function")
    if not isinstance(function, str) or not function.isidentifier():
        raise _err("missing or not a Python identifier", shown, "function", "function: my_kernel")
    file_targets = _patterns(data["targets"], shown, "targets") if "targets" in data else ("*",)
    defaults = _check_layer(data.get("defaults"), shown, "defaults", _DEFAULT_KEYS)
    default_overrides = _overrides(defaults.pop("overrides", None), shown, "defaults.overrides") if defaults else ()
    default_override_fields = tuple(f"defaults.overrides.{pattern}" for pattern, _ in default_overrides)
    unread = KernelSpec(name=kernel_name, spec_path=shown, spec_file=spec_file.resolve(), source_file=source_file,
                        module=module, function=function, cases=())
    cases_raw = data.get("cases")
    if not isinstance(cases_raw, list) or not cases_raw:
        raise _err("must be a non-empty list of cases", shown, "cases")
    cases: list[CaseSpec] = []
    seen: set[str] = set()
    for index, raw in enumerate(cases_raw):
        fieldname = f"cases[{index}]"
        raw = _mapping(raw, shown, fieldname)
        _check_keys(raw, _CASE_KEYS, shown, fieldname)
        base = check_name("case", raw.get("name"), CASE_NAME, path=shown, field=f"{fieldname}.name")
        fieldname = f"cases[{index}] ({base})"
        layer = _check_layer({k: v for k, v in raw.items() if k in _LAYER_KEYS}, shown, fieldname)
        own_overrides = _overrides(raw.get("overrides"), shown, f"{fieldname}.overrides")
        overrides = default_overrides + own_overrides
        override_fields = default_override_fields + tuple(f"{fieldname}.overrides.{p}" for p, _ in own_overrides)
        expansion = _expand_matrix(raw.get("matrix"), shown, f"{fieldname}.matrix",
                                   budget=MAX_CASES_PER_SPEC - len(cases))
        layer_fields = ("defaults", fieldname)
        for suffix, patches in expansion:
            layers = (defaults, layer, *patches)
            targets = file_targets
            for piece in layers:
                if "targets" in piece:
                    targets = _patterns(piece["targets"], shown, f"{fieldname}.targets")
            case = CaseSpec(kernel=kernel_name, name=base + suffix, field_path=fieldname,
                            layers=tuple(copy.deepcopy(list(layers))), overrides=overrides, target_patterns=targets,
                            override_fields=override_fields,
                            layer_fields=(*layer_fields, *[f"{fieldname}.matrix"] * len(patches)))
            for expanded in _expand_configs(case, unread, shown, list_configs):
                check_name("case", expanded.name, CASE_NAME, path=shown, field=f"{fieldname}.matrix")
                if expanded.name in seen:
                    raise _err(f"case name {expanded.name!r} is used twice", shown, fieldname,
                               "give each case a unique name")
                seen.add(expanded.name)
                cases.append(expanded)
                if len(cases) > MAX_CASES_PER_SPEC:
                    raise _err(f"expands to more than the {MAX_CASES_PER_SPEC} cases a spec may have", shown,
                               fieldname, "drop axes, values or configs, or split the cases into several specs")
    return dataclasses.replace(unread, cases=tuple(cases))


def _expand_configs(case: CaseSpec, spec: KernelSpec, path: str, list_configs: ConfigLister | None) -> list[CaseSpec]:
    """`case` itself, or, when its merged `config` is `all`, one case per config a launch could pick: on each
    target, the configs its pruning keeps (`ConfigLister`), each case narrowed to the targets keeping its config."""
    config = None
    for piece in case.layers:
        config = piece.get("config", config)
    if config != CONFIG_ALL:
        return [case]
    fieldname = case.field_path
    for pattern, override in case.overrides:
        if "config" in override:
            raise _err("`config: all` names one case per config, so an override cannot pick a config too", path,
                       f"{fieldname}.overrides.{pattern}.config",
                       "drop the override's config, or pick the config per case instead of `all`")
    if list_configs is None:
        raise _err("`config: all` needs the kernel's config list, which this reader does not load", path,
                   f"{fieldname}.config", "open the spec through xisa's workspace (xisa compile, check)")
    kept = list_configs(spec, f"{fieldname}.config", lambda targets: [
        replace(resolve_cell(spec, case, target), config=None) for target in case_targets(case, targets)])
    # (0, config index) or (1, place in the pruner's answer) -> {target: the config it compiles there}
    by_name: dict[tuple[int, int], dict[str | None, int | dict]] = {}
    for target, configs in kept.items():
        for position, (index, values) in enumerate(configs):
            made = (1, position) if index is None else (0, index)
            by_name.setdefault(made, {})[target] = values if index is None else index
    expanded = []
    for (kind, number), on in sorted(by_name.items()):
        suffix = f"-pruned{number}" if kind else f"-config{number}"
        values = list(on.values())
        if all(value == values[0] for value in values):
            layers, overrides, fields = (*case.layers, {"config": values[0]}), case.overrides, case.override_fields
        else:   # a config the pruner made, with other values on another target: each target's as an override
            layers = case.layers
            overrides = (*case.overrides, *((target, {"config": value}) for target, value in on.items()))
            fields = (*case.override_fields, *([f"{fieldname}.config"] * len(on)))
        targets = case.target_patterns if None in on else tuple(on)
        expanded.append(replace(case, name=case.name + suffix, layers=layers, overrides=overrides,
                                override_fields=fields, target_patterns=targets,
                                layer_fields=(*case.layer_fields, f"{fieldname}.config")[:len(layers)]))
    return expanded


def _overrides(raw: Any, path: str, fieldname: str) -> tuple[tuple[str, dict], ...]:
    result = []
    for pattern, layer in _mapping(raw, path, fieldname).items():
        layer = _check_layer(layer, path, f"{fieldname}.{pattern}", _LAYER_KEYS - {"targets"})
        if layer.get("config") == CONFIG_ALL:
            raise _err("`config: all` expands a case into cases, the same on every target, so no override may set it",
                       path, f"{fieldname}.{pattern}.config", "put `config: all` on the case or under defaults")
        result.append((pattern, layer))
    return tuple(result)


def _expand_matrix(raw: Any, path: str, fieldname: str, *, budget: int) -> list[tuple[str, tuple[dict, ...]]]:
    """The case name suffixes and patches of a matrix; refused, before expanding, past `budget` cases."""
    axes = _mapping(raw, path, fieldname)
    if not axes:
        if budget < 1:
            raise _err(f"the spec has more than {MAX_CASES_PER_SPEC} cases", path, fieldname.removesuffix(".matrix"),
                       f"a spec may have at most {MAX_CASES_PER_SPEC} cases: split it into several specs")
        return [("", ())]
    choices = []
    for axis, values in axes.items():
        values = _mapping(values, path, f"{fieldname}.{axis}")
        if not values:
            raise _err("an axis needs at least one value", path, f"{fieldname}.{axis}")
        entries = []
        for value_name, patch in values.items():
            check_name("matrix value", value_name, CASE_NAME, path=path, field=f"{fieldname}.{axis}")
            entries.append((value_name, _check_layer(patch, path, f"{fieldname}.{axis}.{value_name}")))
        choices.append(entries)
    total = math.prod(len(entries) for entries in choices)
    if total > budget:
        sizes = " x ".join(str(len(entries)) for entries in choices)
        raise _err(f"expands to {total} cases ({sizes}), more than the {MAX_CASES_PER_SPEC} a spec may have",
                   path, fieldname, "drop axes or values, or split the cases into several specs")
    expanded = []
    for combo in itertools.product(*choices):
        suffix = "".join(f"-{value_name}" for value_name, _ in combo)
        expanded.append((suffix, tuple(patch for _, patch in combo)))
    return expanded


def _merge(layers: list[dict]) -> dict[str, Any]:
    merged: dict[str, Any] = {"args": {}, "constexprs": {}, "options": {}, "heuristics": {}, "expect": {},
                              "runtime": None, "config": None}
    for layer in layers:
        for key in ("runtime", "config"):
            if key in layer:
                merged[key] = copy.deepcopy(layer[key])
        for key in ("args", "constexprs", "options", "heuristics"):
            merged[key].update(copy.deepcopy(layer.get(key) or {}))
        for pattern, checks in layer.get("expect") or ():
            merged["expect"].setdefault(pattern, {}).update((check.key, check) for check in checks)
    merged["expect"] = tuple((pattern, tuple(checks.values())) for pattern, checks in merged["expect"].items())
    return merged


def _layers_for(case: CaseSpec, target_name: str) -> list[dict]:
    """A case's layers on a target of that name: defaults, case, matrix patches, then each matching override."""
    return list(case.layers) + [layer for pattern, layer in case.overrides if fnmatch.fnmatchcase(target_name, pattern)]


def case_values(case: CaseSpec, target_name: str) -> dict[str, Any]:
    """What a case compiles with on a target of that name: its merged args, constexprs, options, config and
    heuristics (expectations and runtime apart)."""
    merged = _merge(_layers_for(case, target_name))
    return {key: merged[key] for key in ("args", "constexprs", "options", "config", "heuristics")}


def case_targets(case: CaseSpec, targets: list[Target], asked: frozenset[str] = frozenset()) -> list[Target]:
    """The targets a case compiles on: those its `targets:` globs match, a device target only where they select
    it (`selects`: its name, or a glob with '-') or where --arch asked for it (`asked`, then any glob matching its
    name will do, as for an arch target)."""
    return [t for t in targets if any(selects(p, t) or (t.name in asked and fnmatch.fnmatchcase(t.name, p))
                                      for p in case.target_patterns)]


def choose_targets(known: dict[str, Target], arch: list[str] | None,
                   specs: list[KernelSpec]) -> tuple[list[Target], frozenset[str]]:
    """The targets a run compiles for, and the device targets --arch asked for by name: those `arch` selects (all
    arch targets without it), and each device target a spec's case selects whose arch target is chosen (so the
    default run compiles a spec's devices, and `--arch 'gfx94*'` those of gfx942)."""
    chosen = select_targets(known, arch)
    names = {t.name for t in chosen}
    wanted = [t for t in known.values() if t.device_of in names and t.name not in names
              and any(selects(p, t) for spec in specs for case in spec.cases for p in case.target_patterns)]
    asked = frozenset(t.name for t in chosen if t.device_of is not None)
    return sorted(chosen + wanted, key=lambda t: t.name), asked


def _value_fields(case: CaseSpec, target_name: str) -> dict[str, str]:
    """`args.x` -> the field of the last layer (on that target) that sets it."""
    named = list(zip(case.layers, case.layer_fields or [case.field_path] * len(case.layers)))
    named += [(layer, where) for (pattern, layer), where in
              zip(case.overrides, case.override_fields or [case.field_path] * len(case.overrides))
              if fnmatch.fnmatchcase(target_name, pattern)]
    fields = {}
    for layer, where in named:
        for section in ("args", "constexprs", "options"):
            fields.update((f"{section}.{name}", where) for name in layer.get(section) or {})
    return fields


def resolve_cell(spec: KernelSpec, case: CaseSpec, target: Target) -> Cell:
    merged = _merge(_layers_for(case, target.name))
    check_expectations_for_target(merged["expect"], target.name, target.backend,
                                  path=spec.spec_path, field=case.field_path)
    return Cell(kernel=spec, case=case.name, target=target, args=merged["args"], constexprs=merged["constexprs"],
                options=merged["options"], expect=merged["expect"], field_path=case.field_path,
                runtime=merged["runtime"], config=merged["config"], heuristics=merged["heuristics"],
                value_fields=_value_fields(case, target.name))


def build_cells(specs: list[KernelSpec], targets: list[Target], *, kernel_filters: list[str] | None = None,
                asked: frozenset[str] = frozenset()) -> list[Cell]:
    """Every (kernel, case, target) cell selected; `kernel_filters` are `KERNEL` or `KERNEL:CASE` globs; `asked`:
    the device targets --arch named (`case_targets`)."""
    cells = []
    for spec in specs:
        for case in spec.cases:
            if kernel_filters and not any(matches_kernel_filter(f, spec.name, case.name) for f in kernel_filters):
                continue
            for target in case_targets(case, targets, asked):
                cells.append(resolve_cell(spec, case, target))
    return cells


def matches_kernel_filter(flt: str, kernel: str, case: str) -> bool:
    """`KERNEL` or `KERNEL:CASE` globs, as --kernel takes them."""
    kpat, _, cpat = flt.partition(":")
    return fnmatch.fnmatchcase(kernel, kpat) and (not cpat or fnmatch.fnmatchcase(case, cpat))


SPEC_SUFFIXES = (".yaml", ".yml")


def discover_spec_files(paths: list[Path]) -> list[Path]:
    """The spec files (`*.yaml`, `*.yml`) in each folder, and each file given; both forms of one name in a
    folder are refused (which one is the spec would depend on the order files are listed in)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())
            stems: dict[str, Path] = {}
            for file in found:
                if file.stem in stems:
                    raise SpecError(f"both {stems[file.stem].name} and {file.name} are here", path=str(file),
                                    field="<file>", fix=f"keep one spec named {file.stem!r}: remove or rename the other")
                stems[file.stem] = file
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise SpecError("no such file or folder", path=str(path), field="--spec")
    return files


def load_specs(files: list[Path], *, root: Path, pythonpath: tuple[Path, ...] = (),
               import_hooks: tuple[Path, ...] = (), list_configs: ConfigLister | None = None) -> list[KernelSpec]:
    """The specs of `files`; `pythonpath` and `import_hooks` are the project's settings, part of every load
    (the ones that list an autotuner's configs too)."""
    def settled(spec: KernelSpec) -> KernelSpec:
        return replace(spec, pythonpath=tuple(pythonpath), import_hooks=tuple(import_hooks))

    lister = None if list_configs is None else (
        lambda spec, field, cells_on: list_configs(settled(spec), field, cells_on))
    specs = []
    names: dict[str, str] = {}
    for file in files:
        try:
            shown = str(file.resolve().relative_to(root.resolve()))
        except ValueError:
            shown = str(file)
        spec = load_spec(file, display=shown, list_configs=lister)
        if spec.name in names:
            raise SpecError(f"kernel name {spec.name!r} is also defined in {names[spec.name]}", path=shown,
                            field="name", fix="give each spec a unique `name`")
        names[spec.name] = shown
        specs.append(settled(spec))
    return specs
