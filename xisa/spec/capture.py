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
from xisa.spec.views import contiguous_strides, offset_alignment, span_elements

TWO_GIB = 2**31 - 1   # the AMD backend's bound for tt.pointer_range 32, judged on the whole storage
# Target globs of a backend's options: an option only one backend knows goes under that vendor's override.
BACKEND_TARGETS = {"hip": "gfx*", "cuda": "sm_*"}


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

    @property
    def interpreted(self) -> bool:
        return any(launch.get("interpreted") for launch in self.launches)


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


def group_launches(records: list[dict], *, names: dict[str, str] | None = None) -> list[CapturedKernel]:
    """One CapturedKernel per kernel (file and qualified name), its launches deduplicated by specialization.
    `names` renames kernels: a function's name (or `module:function`) -> the spec name."""
    kernels: dict[tuple[str, str, str], CapturedKernel] = {}
    seen: set[str] = set()
    for record in records:
        if record["key"] in seen:
            continue
        seen.add(record["key"])
        # one spec per object launched: the jit function and an autotuner wrapping it are two `function:`s
        ident = (record["file"], record["qualname"], record["function"])
        if ident not in kernels:
            kernels[ident] = CapturedKernel(function=record["function"], qualname=record["qualname"],
                                            module=record["module"], file=record["file"], wrapper=record.get("wrapper"),
                                            through=tuple(record.get("through") or ()))
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
    if storage != (offset + span_elements(shape, strides)) * element:
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


def _kernel_source(kernel: CapturedKernel, spec_dir: Path, project_root: Path) -> tuple[str, str, list[str]]:
    """`source:` (a file inside the project, relative to the spec) or `module:` (anything else importable)."""
    file = Path(kernel.file)
    root = Path(os.path.abspath(project_root))
    if file.is_relative_to(root):
        return "source", Path(os.path.relpath(file, os.path.abspath(spec_dir))).as_posix(), []
    if kernel.module != "__main__":
        return "module", kernel.module, [f"{kernel.file} is outside the project {root}: named by its module"]
    return "source", file.as_posix(), [f"the script {kernel.file} is outside the project {root}: move the kernel "
                                       "into a module of the project"]


def render_spec(kernel: CapturedKernel, *, spec_dir: Path, project_root: Path, command: str,
                dtype_names: set[str], option_backends: dict[str, set[str]]) -> str:
    """The spec YAML of one captured kernel (written into `spec_dir`)."""
    key, where, notes = _kernel_source(kernel, spec_dir, project_root)
    lines = [f"# Captured by `xisa capture -- {command}`: {len(kernel.launches)} distinct launch "
             f"specialization{'s' if len(kernel.launches) != 1 else ''} of {kernel.qualname} ({kernel.file}).",
             "# Each case compiles what that launch compiled; edit freely (names, shared `defaults`, `expect`)."]
    if kernel.interpreted:
        lines.append("# Captured under Triton's interpreter: alignments are the CPU tensors' (torch aligns a CPU "
                     "allocation to 64 bytes, so a view's alignment is its byte offset's, as on a GPU).")
    if any(launch.get("no_run") for launch in kernel.launches):
        lines.append("# Captured with --no-run: no launch compiled or ran; each case is what its launch would compile.")
    if kernel.through:
        said = [f"{kernel.function} is the {' over '.join(kernel.through)} the program launched"]
        if "Autotuner" in kernel.through:
            said.append("each case's `config:` is the config the autotuner chose")
        if "Heuristics" in kernel.through:
            said.append("the heuristics' values are not in `constexprs:`: they are computed again from the case's "
                        "arguments when it compiles")
        notes.append("; ".join(said))
    if kernel.wrapper:
        notes.append(f"the program launched the @triton.jit function inside the {kernel.wrapper} {kernel.function} "
                     "directly; xisa loads the name as the wrapper: give each case a `config:` or name the inner function")
    if kernel.qualname != kernel.function:
        notes.append(f"{kernel.qualname} is not a module-level function: xisa cannot load it by name")
    lines += [f"# note: {note}" for note in notes]
    lines += [f"name: {kernel.name}", f"{key}: {_flow(where)}", f"function: {kernel.function}", "cases:"]
    for index, launch in enumerate(kernel.launches, start=1):
        lines.append(f"  - name: launch{index}")
        if launch.get("test"):
            lines.append(f"    # first launched in {launch['test']}")
        if launch.get("warmup"):
            lines.append("    # a warm-up compile (kernel.warmup / warmup=True), not a launch")
        if launch.get("heuristics"):   # computed again when the case compiles: another value is an error
            lines.append(f"    heuristics: {_flow(launch['heuristics'])}")
        args = launch.get("args") or {}
        if args:
            lines.append("    args:")
            for name, arg in args.items():
                value, comments = _tensor(arg, dtype_names) if "tensor" in arg else _value(arg)
                text = f"      {name}: {_flow(value)}"
                lines.append(text + (f"   # {'; '.join(comments)}" if comments else ""))
        if launch.get("constexprs"):
            unsupported = [n for n, v in launch["constexprs"].items() if isinstance(v, dict) and "unsupported" in v]
            constexprs = {n: ({"unsupported": v["unsupported"]} if n in unsupported else v)
                          for n, v in launch["constexprs"].items()}
            lines.append(f"    constexprs: {_flow(constexprs)}"
                         + (f"   # {', '.join(unsupported)}: no spec form yet, write by hand" if unsupported else ""))
        if launch.get("autotune"):
            chosen = launch["autotune"]
            if launch.get("config_chosen_by") not in (None, "autotuner"):   # not benchmarked: xisa capture --config-policy
                lines.append(f"    # config: chosen by the capture's config policy ({launch['config_chosen_by']})")
            lines.append(f"    config: {_flow({**chosen['kwargs'], **chosen['options']})}")
        common, per_backend = _options_by_backend(launch.get("options") or {}, option_backends)
        if common:
            lines.append(f"    options: {_flow(common)}")
        if per_backend:
            lines.append("    overrides:")
            for backend, options in sorted(per_backend.items()):
                pattern = BACKEND_TARGETS.get(backend, f"{backend}*")
                lines.append(f"      {_flow(pattern)}: {{options: {_flow(options)}}}")
    return "\n".join(lines) + "\n"
