"""Captured launches (the JSON lines `xisa capture`'s hook writes) turned into spec YAML, one file per kernel.

Each record is one launch specialization as Triton's binder saw it: the kernel's file and name, each
runtime argument (a tensor's dtype, shape, strides, address alignment and storage size; a scalar's
value), the constexprs, the launch options and, for a kernel launched through `@triton.autotune` /
`@triton.heuristics`, the wrapper (the spec's `function:`), the config the autotuner chose (the case's
`config:`) and the values the heuristics computed (left out of `constexprs:`: compiling the case
evaluates the heuristics again on its arguments; a comment shows what they gave). Records with the
same specialization (the hook's `key`, across processes too) become one case. The YAML is
written by hand so it can carry comments (strides, storage, where a launch came from) and reads like
a hand-written spec: the user commits and edits it.

A kernel whose module no other machine can import (generated at run time, `exec`'d, the program's own
script outside the project: the hook's `generated` record) is named by `source:` of a copy of its text
kept beside the specs (`generated/<name>.py`, `xisa.spec.capture_kept`). Comments carry no absolute path
of the capturing machine (`xisa.spec.portable`).

Pure data, like the rest of `spec/`: nothing here imports Triton.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xisa.names import KERNEL_NAME
from xisa.spec.capture_targets import kernel_ident
from xisa.spec.portable import portable_path, portable_text
from xisa.spec.views import contiguous_strides, default_offset, offset_alignment, view_end

TWO_GIB = 2**31 - 1   # the AMD backend's bound for tt.pointer_range 32, judged on the whole storage
# Target globs of a backend's options: an option only one backend knows goes under that vendor's override.
BACKEND_TARGETS = {"hip": "gfx*", "cuda": "sm_*"}
KEPT_FOLDER = "generated"   # beside the specs: the kept text of kernels no other machine can import


@dataclass
class CapturedKernel:
    """One kernel's distinct launches, in the order they were first made."""

    function: str
    qualname: str
    module: str
    file: str
    wrapper: str | None
    through: tuple[str, ...] = ()   # the wrappers `function` names, outermost first (Autotuner, Heuristics)
    launches: list[dict] = field(default_factory=list)
    name: str = ""          # the spec's name and file stem
    generated: dict | None = None   # the hook's record of a module no other machine can import (its kept text)
    fresh: bool = False             # its file was written while the command ran: generated, wherever it lies

    @property
    def interpreted(self) -> bool:
        return any(launch.get("interpreted") for launch in self.launches)

    @property
    def kept(self) -> bool:
        """Whether the spec names a kept copy of the kernel's text (`generated/<name>.py`)."""
        return bool(self.generated) and "sha256" in self.generated


@dataclass(frozen=True)
class Trial:
    """What capture's one compile of a new case found: the targets tried, the ones that refused it with the
    compiler's one-line reason, and the case's `targets:` to write (None: leave the file's targets)."""

    tried: tuple[str, ...]
    refused: dict[str, str]
    targets: tuple[str, ...] | None


def read_records(folder: Path) -> tuple[list[dict], list[str]]:
    """Every process's records, oldest launch first, and the errors the hook noted instead of a record."""
    records, errors = [], []
    for path in sorted(folder.glob("launches-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:   # a process killed mid-line
                continue
            (errors.append(record["error"]) if "error" in record else records.append(record))
    records.sort(key=lambda r: r.get("time", 0))
    return records, errors


def read_sources(folder: Path) -> dict[str, str]:
    """The module texts the hook kept (`source-<sha256>.py`), by their sha256."""
    return {path.stem.removeprefix("source-"): path.read_text(encoding="utf-8")
            for path in sorted(folder.glob("source-*.py"))}


def group_launches(records: list[dict], *, names: dict[str, str] | None = None,
                   started_ns: int | None = None) -> list[CapturedKernel]:
    """One CapturedKernel per kernel (file and qualified name), its launches deduplicated by specialization.
    `names` renames kernels: a function's name (or `module:function`) -> the spec name. `started_ns`: when the
    command started; a module file written since is generated, even inside the project."""
    kernels: dict[tuple[str, str, str], CapturedKernel] = {}
    seen: set[str] = set()
    for record in records:
        if record["key"] in seen:
            continue
        seen.add(record["key"])
        generated = record.get("generated")
        ident = kernel_ident(record)
        if ident not in kernels:
            kernels[ident] = CapturedKernel(function=record["function"], qualname=record["qualname"],
                                            module=record["module"], file=record["file"], wrapper=record.get("wrapper"),
                                            through=tuple(record.get("through") or ()), generated=generated,
                                            fresh=bool(generated and started_ns is not None and
                                                       (generated.get("written_ns") or 0) >= started_ns))
        kernels[ident].launches.append(record)
    _name_kernels(list(kernels.values()), names or {})
    return list(kernels.values())


def _name_kernels(kernels: list[CapturedKernel], names: dict[str, str]) -> None:
    """The function's name; where two kernels share one, the file's stem first (`attention_fwd_kernel`)."""
    taken: dict[str, int] = {}
    for kernel in kernels:
        wanted = names.get(f"{kernel.module}:{kernel.function}") or names.get(kernel.function) or kernel.function
        taken[wanted] = taken.get(wanted, 0) + 1
    used: set[str] = set()
    for kernel in kernels:
        wanted = names.get(f"{kernel.module}:{kernel.function}") or names.get(kernel.function)
        name = wanted or kernel.function
        if not wanted and taken[name] > 1:
            name = f"{Path(kernel.file).stem}_{kernel.function}"
        base, index = name, 2
        while name in used:
            name, index = f"{base}_{index}", index + 1
        if not KERNEL_NAME.fullmatch(name):
            name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        used.add(name)
        kernel.name = name


def _flow(value: Any) -> str:
    """One YAML value on one line (`{tensor: bf16, shape: [64, 64]}`, `0.5`, `'gfx*'`)."""
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6).strip().removesuffix("\n...").strip()


def _tensor(arg: dict, dtype_names: set[str]) -> tuple[dict, list[str]]:
    """A captured tensor as a spec stand-in and the comments that go with it: its strides, offset and storage
    where they differ from a contiguous view of just its elements (a heuristic or an int derived from the
    tensor reads them: `x.stride(1) == 1`)."""
    dtype = arg["tensor"] if arg["tensor"] in dtype_names else arg.get("torch_dtype") or arg["tensor"]
    shape = [int(s) for s in arg.get("shape") or []]
    element = arg.get("element_bytes") or 1
    storage = arg.get("storage_bytes")
    notes = []
    if not shape or any(s <= 0 for s in shape):
        shape = [max(1, (storage or element) // element)]
        notes.append("an empty or 0-d view: shape from its storage")
    elif storage and arg.get("strides") is not None and len(arg["strides"]) == len(shape):
        return _view(arg, dtype, shape, element, storage), notes
    stand_in: dict[str, Any] = {"tensor": dtype, "shape": shape}
    if arg.get("strides") is not None:
        notes.append(f"strides {arg['strides']}")
    if storage is not None:
        notes.append(f"storage {storage} bytes")
    if arg.get("align", 16) != 16:
        stand_in["align"] = arg["align"]
    view_bytes = element
    for size in shape:
        view_bytes *= size
    if storage is None:
        # Triton's AMD backend cannot see this argument's storage (no ptr_range(), no untyped_storage()):
        # it never gives it tt.pointer_range 32, as for a storage over 2 GiB.
        stand_in["large"] = True
        notes.append("storage unknown to Triton: no 32-bit pointer range on AMD")
    elif storage > TWO_GIB:
        stand_in["large"] = True
    elif view_bytes > TWO_GIB:   # a broadcast view larger than its storage: what Triton judges is the storage
        stand_in["shape"] = [max(1, storage // element)]
        notes.append(f"a view of shape {shape} over a smaller storage: shape from the storage")
    return stand_in, notes


def _view(arg: dict, dtype: str, shape: list[int], element: int, storage: int) -> dict[str, Any]:
    """A tensor whose strides and storage are known: each of `strides`, `offset`, `storage` written where it is
    not the default (contiguous, 0, what the view spans), so the stand-in answers `stride()`, `data_ptr()`'s
    alignment and Triton's 2 GiB test as the launch's tensor did."""
    strides = [int(s) for s in arg["strides"]]
    offset = int(arg.get("offset") or 0)
    stand_in: dict[str, Any] = {"tensor": dtype, "shape": shape}
    if strides != list(contiguous_strides(shape)):
        stand_in["strides"] = strides
    align = arg.get("align", 16)
    if offset and offset_alignment(offset * element) == align:
        stand_in["offset"] = offset            # it decides the alignment, as the launch's address had it
    else:
        offset = 0
        if align != 16:
            stand_in["align"] = align          # an allocation not 16-byte aligned, or no offset known
    if storage != view_end(shape, strides, offset or default_offset(shape, strides)) * element:
        stand_in["storage"] = storage
    return stand_in


def _value(arg: dict) -> tuple[Any, list[str]]:
    if "unsupported" in arg:   # a mapping the spec loader refuses loudly, never a silent stand-in
        return {"unsupported": arg["unsupported"]}, [f"{arg.get('repr', '')}: no spec form yet, write this one by hand"]
    if "descriptor" in arg:    # the spec's TensorDescriptor form; zero padding is its default
        keys = ("descriptor", "shape", "strides", "block_shape") + (("padding",) if arg["padding"] != "zero" else ())
        return {key: arg[key] for key in keys}, []
    return arg["value"], []


def _options_by_backend(options: dict, option_backends: dict[str, set[str]]) -> tuple[dict, dict[str, dict]]:
    common: dict[str, Any] = {}
    per_backend: dict[str, dict] = {}
    for name, value in options.items():
        owners = option_backends.get(name)
        if owners and len(owners) == 1:
            per_backend.setdefault(next(iter(owners)), {})[name] = value
        else:   # both backends, or neither: an unknown option is reported when the spec compiles
            common[name] = value
    return common, per_backend


def installed_file(file: Path) -> bool:
    """A file of an installed distribution: under a `site-packages` or `dist-packages` folder of any environment."""
    return any(part in ("site-packages", "dist-packages") for part in file.parts)


def kernel_source(kernel: CapturedKernel, spec_dir: Path, project_root: Path) -> tuple[str, str, list[str]]:
    """`source:` (a file inside the project, relative to the spec, or the kept copy of a generated module's
    text), or `module:` (anything else importable by name), and the notes that say why."""
    file = Path(kernel.file)
    root = Path(os.path.abspath(project_root))
    installed = installed_file(file) and kernel.module != "__main__" and not kernel.kept
    if file.is_relative_to(root) and file.is_file() and not (kernel.kept and kernel.fresh) and not installed:
        return "source", Path(os.path.relpath(file, os.path.abspath(spec_dir))).as_posix(), []
    if installed:   # wherever the environment lives, the project's own `.venv` included: a clone has its own
        return "module", kernel.module, [f"{kernel.module} is an installed package's: named by its module"]
    generated = kernel.generated or {}
    why = portable_text(str(generated.get("why", "")), root)
    if kernel.kept:
        kept = f"{KEPT_FOLDER}/{kernel.name}.py"
        return "source", kept, [f"{kernel.module} cannot be imported on another machine ({why}): this spec compiles "
                                f"the copy of its text kept in {kept}, which says what generated it; re-run "
                                "`xisa capture` to refresh it when the generator changes"]
    if kernel.module != "__main__":
        if not generated:
            return "module", kernel.module, [f"{portable_path(file, root)} is outside the project: named by its module"]
        return "module", kernel.module, [f"{kernel.module} cannot be imported on another machine ({why}) and its text "
                                         f"was not kept ({portable_text(str(generated.get('error')), root)}): this "
                                         "spec compiles only where that module imports"]
    return "source", file.as_posix(), [f"the script {portable_path(file, root)} is outside the project and its text was "
                                       "not kept: move the kernel into a module of the project"]


def _header(kernel: CapturedKernel, *, root: Path, command: str, tried: tuple[str, ...] | None,
            notes: list[str]) -> list[str]:
    where = (f"generated module {kernel.module}, file {kernel.generated.get('filename')}" if kernel.kept
             else portable_path(kernel.file, root))
    count = len(kernel.launches)
    lines = [f"# Captured by `xisa capture -- {command}`: {count} distinct launch "
             f"specialization{'s' if count != 1 else ''} of {kernel.qualname} ({where}).",
             "# Each case compiles what that launch compiled; edit freely (names, shared `defaults`, `expect`,",
             "# `targets`): a later capture into this folder adds new launches as cases and changes nothing else."]
    if tried is None:
        lines.append("# Not compiled by capture (--no-check): `xisa compile --spec` on this file shows which targets "
                     "refuse a case.")
    elif tried:
        lines.append(f"# Compiled once by capture for {len(tried)} target{'s' if len(tried) != 1 else ''} "
                     f"({', '.join(tried)}): a case a target refuses lists the others in `targets:`, with the reason.")
    if kernel.interpreted:
        lines.append("# Captured under Triton's interpreter: alignments are the CPU tensors' (torch aligns a CPU "
                     "allocation to 64 bytes, so a view's alignment is its byte offset's, as on a GPU).")
    if any(launch.get("no_run") for launch in kernel.launches):
        lines.append("# Captured with --no-run: no launch compiled or ran; each case is what its launch would compile.")
    answered = sorted({launch["answered_as"] for launch in kernel.launches if launch.get("answered_as")})
    if answered:
        lines.append(f"# The program's device queries were answered as {', '.join(answered)} (`xisa capture --as`): "
                     "its configs are what it picks on that GPU.")
    captured = sorted({target for launch in kernel.launches for target in launch.get("captured_as") or ()})
    if captured:
        lines += [f"# The program ran once per target, its device queries answered as {', '.join(captured)} in turn "
                  "(`xisa capture --as`):",
                  "# each case holds what their launches bind, a value that differs set per target in `overrides`; "
                  "a target not captured compiles what they agree on."]
    ran = sorted({launch["ran_on"] for launch in kernel.launches if launch.get("ran_on")})
    if ran:
        lines.append(f"# Recorded from launches on {', '.join(ran)}'s GPU: another target compiles what it bound, "
                     "unproven (`xisa capture --no-run --as TARGET` records a target's own).")
    if kernel.through:
        said = [f"{kernel.function} is the {' over '.join(kernel.through)} the program launched"]
        if "Autotuner" in kernel.through:
            said.append("each case's `config:` is the config the autotuner chose")
        if "Heuristics" in kernel.through:
            said.append("the heuristics' values are computed again from the case's arguments when it compiles, and "
                        "must be the launch's (`heuristics:`); only a value the program passed itself is also in "
                        "`constexprs:`")
        notes.append("; ".join(said))
    if kernel.wrapper:
        notes.append(f"the program launched the @triton.jit function inside the {kernel.wrapper} {kernel.function} "
                     "directly; xisa loads the name as the wrapper: give each case a `config:` or name the inner function")
    if kernel.qualname != kernel.function:
        notes.append(f"{kernel.qualname} is not a module-level function: xisa cannot load it by name")
    return lines + [f"# note: {note}" for note in notes]


def render_spec(kernel: CapturedKernel, *, spec_dir: Path, project_root: Path, command: str,
                dtype_names: set[str], option_backends: dict[str, set[str]], names: list[str] | None = None,
                trials: dict[str, Trial] | None = None, tried: tuple[str, ...] | None = ()) -> str:
    """The spec YAML of one captured kernel (written into `spec_dir`): its cases named `names` (default
    launch1, launch2, ...), each annotated with its `trials` entry. `command` is shown as given (already
    portable); `tried`: the targets capture compiled the cases for (None: not compiled)."""
    root = Path(os.path.abspath(project_root))
    key, where, notes = kernel_source(kernel, spec_dir, root)
    lines = _header(kernel, root=root, command=command, tried=tried, notes=notes)
    lines += [f"name: {kernel.name}", f"{key}: {_flow(where)}", f"function: {kernel.function}", "cases:"]
    names = names or [f"launch{index}" for index in range(1, len(kernel.launches) + 1)]
    for name, launch in zip(names, kernel.launches):
        lines += render_case(launch, name, root=root, dtype_names=dtype_names, option_backends=option_backends,
                             trial=(trials or {}).get(name))
    return "\n".join(lines) + "\n"


def render_case(launch: dict, name: str, *, root: Path, dtype_names: set[str], option_backends: dict[str, set[str]],
                trial: Trial | None = None, added: str | None = None) -> list[str]:
    """One case, as the lines of a block under `cases:` (indented two spaces). `added`: the comment of a case
    a later capture appended."""
    lines = [f"  - name: {name}"]
    if added:
        lines.append(f"    # {portable_text(added, root)}")
    if launch.get("test"):
        lines.append(f"    # first launched in {portable_text(launch['test'], root)}")
    if launch.get("warmup"):
        lines.append("    # a warm-up compile (kernel.warmup / warmup=True), not a launch")
    lines += _targets_lines(launch, trial, root)
    if launch.get("heuristics"):   # computed again when the case compiles: another value is an error
        lines.append(f"    heuristics: {_flow(launch['heuristics'])}")
    args = launch.get("args") or {}
    if args:
        lines.append("    args:")
        for arg_name, arg in args.items():
            value, comments = _tensor(arg, dtype_names) if "tensor" in arg else _value(arg)
            text = f"      {arg_name}: {_flow(value)}"
            lines.append(text + (f"   # {portable_text('; '.join(comments), root)}" if comments else ""))
    if launch.get("constexprs"):
        unsupported = [n for n, v in launch["constexprs"].items() if isinstance(v, dict) and "unsupported" in v]
        constexprs = _constexprs(launch["constexprs"])
        lines.append(f"    constexprs: {_flow(constexprs)}"
                     + (f"   # {', '.join(unsupported)}: no spec form yet, write by hand" if unsupported else ""))
    per_target = launch.get("per_target") or {}
    by_target = any("config" in values for values in per_target.values())
    if (launch.get("autotune") or by_target) and launch.get("config_chosen_by") not in (None, "autotuner"):
        # not benchmarked: xisa capture --config-policy
        lines.append(f"    # config{' (per target)' if by_target else ''}: chosen by the capture's config policy "
                     f"({launch['config_chosen_by']})")
    if launch.get("autotune"):
        lines.append(f"    config: {_flow(_config(launch['autotune']))}")
    common, per_backend = _options_by_backend(launch.get("options") or {}, option_backends)
    if common:
        lines.append(f"    options: {_flow(common)}")
    if per_backend or per_target:
        lines.append("    overrides:")
        for backend, options in sorted(per_backend.items()):
            pattern = BACKEND_TARGETS.get(backend, f"{backend}*")
            lines.append(f"      {_flow(pattern)}: {{options: {_flow(options)}}}")
        for target in sorted(per_target):   # after the backends' globs: a target's own value wins
            lines.append(f"      {_flow(target)}: {_flow(_override(per_target[target], dtype_names))}")
    return lines


def _config(chosen: dict) -> dict:
    return {**chosen["kwargs"], **chosen["options"]}


def _constexprs(values: dict) -> dict:
    return {n: ({"unsupported": v["unsupported"]} if isinstance(v, dict) and "unsupported" in v else v)
            for n, v in values.items()}


def _override(values: dict, dtype_names: set[str]) -> dict:
    """One target's values where the targets captured differ (`xisa.spec.capture_targets`), as an override layer."""
    layer: dict[str, Any] = {}
    if values.get("args"):
        layer["args"] = {name: (_tensor(arg, dtype_names) if "tensor" in arg else _value(arg))[0]
                         for name, arg in values["args"].items()}
    if values.get("constexprs"):
        layer["constexprs"] = _constexprs(values["constexprs"])
    for section in ("options", "heuristics"):
        if values.get(section):
            layer[section] = values[section]
    if values.get("config") is not None:
        layer["config"] = _config(values["config"])
    return layer


def _targets_lines(launch: dict, trial: Trial | None, root: Path) -> list[str]:
    """The case's `targets:`: those a per-target capture saw make it (`launched_on`), less those capture's compile
    found refusing it, with comments saying why."""
    lines = _trial_lines(trial, root)
    made = launch.get("launched_on")
    if not made:
        return lines
    captured = launch.get("captured_as") or made
    why = (f"launched only as {', '.join(made)} (captured as {', '.join(captured)})" if made != captured else
           "its values differ per target (overrides): for the targets captured only")
    narrowed = trial is not None and trial.refused and trial.targets is not None
    return [f"    # {why}"] + (lines if narrowed else lines + [f"    targets: {_flow(made)}"])


def _trial_lines(trial: Trial | None, root: Path) -> list[str]:
    """The comment saying which targets refused the case and why (one line per reason), and its `targets:`."""
    if trial is None or not trial.refused:
        return []
    by_reason: dict[str, list[str]] = {}
    for target, reason in trial.refused.items():
        by_reason.setdefault(portable_text(reason, root), []).append(target)
    head = ("    # no target capture tried compiles this case" if trial.targets is None
            else f"    # left out of {', '.join(trial.refused)} by capture's compile")
    if len(by_reason) == 1:
        lines = [f"{head}: {next(iter(by_reason))}"]
    else:
        lines = [f"{head}:"] + [f"    #   {', '.join(targets)}: {reason}" for reason, targets in by_reason.items()]
    return lines + ([f"    targets: {_flow(list(trial.targets))}"] if trial.targets is not None else [])
