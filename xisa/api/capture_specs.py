"""`xisa capture`'s specs: written new or merged into the ones there (`xisa.spec.capture_merge`), kept copies of
generated kernel modules beside them (`xisa.spec.capture_kept`), and each new case compiled once for the
project's targets, so a target that refuses it is left out of its `targets:` with the compiler's reason.

The compile is the one `xisa bless` would do next: its results land in xisa's result cache, so the first
`xisa bless` / `xisa check` after a capture compiles nothing again. `--no-check` skips it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from xisa.errors import SpecError, UsageError, XisaError
from xisa.names import display_path
from xisa.spec.capture import KEPT_FOLDER, CapturedKernel, Trial, kernel_source, render_case, render_spec
from xisa.spec.capture_kept import kept_body, kept_text, refresh_action
from xisa.spec.capture_merge import (append_cases, check_same_kernel, defaults_change, identities, launch_identity,
                                     next_names, parse_existing)
from xisa.spec.portable import portable_text
from xisa.spec.project import Project

# A cell that timed out or whose worker died says nothing about the target: it is not left out for that.
NOT_A_REFUSAL = ("timeout", "crash")


@dataclass
class SpecPlan:
    """One spec capture writes: its file, what was there, and the launches that become new cases."""

    kernel: CapturedKernel
    path: Path
    existing: str | None           # the file's text before this capture (None: a new file)
    data: dict | None
    launches: list[dict]
    names: list[str]
    text: str = ""                 # as written last


@dataclass
class TrialSummary:
    targets: list[str]
    cells: int = 0
    ok: int = 0
    left_out: list[str] = field(default_factory=list)    # `spec: case on TARGETS: reason`
    left_cells: int = 0
    nowhere: list[str] = field(default_factory=list)     # cases no target compiles
    # kernels whose captured heuristics no target computes again as the launch did: `spec: heuristic 'NAME' on N
    # cases (names): why` (the capture fails: the spec was written, and compiles nowhere)
    heuristics: list[str] = field(default_factory=list)
    not_loaded: list[str] = field(default_factory=list)  # specs that did not load (their error line)
    not_run: str | None = None                           # why the compile could not run at all
    seconds: float = 0.0


@dataclass
class WrittenSpecs:
    written: list[tuple[Path, int]]          # new files: (path, cases)
    updated: list[tuple[Path, int]]          # existing files: (path, cases added)
    unchanged: list[Path]
    kept: list[tuple[Path, str]]             # kept sources: (path, write | refresh | same | edited)
    notes: list[str]
    trial: TrialSummary | None


def plan_specs(kernels: list[CapturedKernel], *, out: Path, project: Project, target_names: list[str],
               dtype_names: set[str], option_backends: dict[str, set[str]], list_configs) -> list[SpecPlan]:
    """Per kernel, the launches no case of its existing spec compiles already (all of them for a new file)."""
    plans = []
    for kernel in kernels:
        path = out / f"{kernel.name}.yaml"
        shown = display_path(path, project.root)
        if os.path.islink(path) or (os.path.lexists(path) and not path.is_file()):
            raise UsageError("is a link or not a file: capture never writes through one", path=shown,
                             fix="remove it, or capture into another folder (--out DIR)")
        existing = path.read_text(encoding="utf-8") if path.exists() else None
        data = None
        known: set[str] = set()
        if existing is not None:
            data = parse_existing(existing, shown=shown)
            key, where, _ = kernel_source(kernel, out, project.root)
            check_same_kernel(data, key=key, where=where, function=kernel.function, shown=shown)
            known = set(identities(data, path, shown=shown, target_names=target_names, list_configs=list_configs))
        launches = []
        for launch in kernel.launches:
            block = render_case(launch, "probe", root=project.root, dtype_names=dtype_names,
                                option_backends=option_backends)
            identity = launch_identity(block, data, path, shown=shown, target_names=target_names, keep_defaults=False)
            if identity in known:
                continue   # a case compiles this launch already
            known.add(identity)
            if data is not None:
                defaults_change(block, data, path, shown=shown, target_names=target_names, case=f"{len(launches) + 1} (of this capture's new ones)")
            launches.append(launch)
        plans.append(SpecPlan(kernel=kernel, path=path, existing=existing, data=data, launches=launches,
                              names=next_names(data, len(launches))))
    return plans


def spec_text(plan: SpecPlan, *, project: Project, command: str, dtype_names: set[str],
              option_backends: dict[str, set[str]], trials: dict[str, Trial] | None,
              tried: tuple[str, ...] | None) -> str:
    """The file's text: a new spec, or the existing text with the new cases appended."""
    kernel = plan.kernel
    if plan.existing is None:
        only = CapturedKernel(**{**kernel.__dict__, "launches": plan.launches})
        return render_spec(only, spec_dir=plan.path.parent, project_root=project.root, command=command,
                           dtype_names=dtype_names, option_backends=option_backends, names=plan.names,
                           trials=trials, tried=tried)
    checked = (f", compiled for {len(tried)} target{'s' if len(tried) != 1 else ''}" if tried else
               ", not compiled by capture (--no-check)" if tried is None else "")
    added = f"added by a later `xisa capture -- {command}`{checked}"
    blocks = [render_case(launch, name, root=project.root, dtype_names=dtype_names, option_backends=option_backends,
                          trial=(trials or {}).get(name), added=added)
              for name, launch in zip(plan.names, plan.launches)]
    return append_cases(plan.existing, blocks, shown=display_path(plan.path, project.root))


def write_text(path: Path, text: str, *, new: bool) -> None:
    """A new file is created, never through a link (O_EXCL, O_NOFOLLOW); an existing one replaced whole, through a
    temporary file in its folder."""
    if new:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_kept_sources(plans: list[SpecPlan], sources: dict[str, str], *, out: Path,
                       project: Project) -> tuple[list[tuple[Path, str]], list[str]]:
    """The kept copy of each generated kernel module, beside the specs (`generated/<name>.py`)."""
    kept, notes = [], []
    for plan in plans:
        kernel = plan.kernel
        if not kernel.kept:
            continue
        text = sources.get(kernel.generated["sha256"])
        folder = out / KEPT_FOLDER
        path = folder / f"{kernel.name}.py"
        shown = display_path(path, project.root)
        if text is None:
            raise UsageError("the capture hook kept no text for a generated module", path=shown,
                             fix="capture again (the records folder lost a file)")
        if os.path.islink(folder) or os.path.islink(path):
            raise UsageError("is a link: capture never writes through one", path=shown, fix="pass --out a real folder")
        folder.mkdir(parents=True, exist_ok=True)
        new = kept_text(text, kernel.generated, root=project.root)
        before = path.read_text(encoding="utf-8") if path.exists() else None
        action = refresh_action(before, new)
        if action in ("write", "refresh"):
            write_text(path, new, new=action == "write")
        if action == "refresh" and kept_body(before or "") != kept_body(new) and plan.existing is not None:
            notes.append(f"{shown}: the program generated another text: the copy is written again, and the cases "
                         "already there compile the new text (the goldens show what it changed)")
        if action == "edited":
            notes.append(f"{shown}: its text was edited since capture kept it: left as it is (delete it to keep "
                         "what the program generates now)")
        for item in kernel.generated.get("unresolved") or []:
            notes.append(f"{shown}: the generated module's global {item} has no import that brings it back: the "
                         "copy may not compile")
        kept.append((path, action))
    return kept, notes


def trial_compile(plans: list[SpecPlan], *, project: Project, patterns: list[str] | None,
                  progress) -> tuple[dict[Path, dict[str, Trial]], TrialSummary]:
    """Each new case compiled once for the chosen targets (default: all): what each target said."""
    from xisa.api.run import compile_cells
    from xisa.api.workspace import Workspace
    from xisa.compile.launch.config_all import config_lister
    from xisa.compile.runner import RunOptions
    from xisa.spec.cases import build_cells, case_targets, load_specs
    from xisa.spec.targets import load_targets, select_targets

    targets = load_targets(list(project.target_dirs), root=project.root)
    chosen = select_targets(targets, patterns)
    asked = frozenset(t.name for t in chosen if t.device_of is not None)
    summary = TrialSummary(targets=[t.name for t in chosen])
    roots = list(project.kernel_roots)
    specs, filters, by_name = [], [], {}
    for plan in plans:
        if not plan.names:
            continue
        try:
            (spec,) = load_specs([plan.path], root=project.root, pythonpath=project.pythonpath,
                                 import_hooks=project.import_hooks,
                                 list_configs=config_lister(roots, list(targets.values())))
        except XisaError as exc:
            summary.not_loaded.append(str(exc))
            continue
        specs.append(spec)
        by_name[spec.name] = (plan, spec)
        filters += [f"{spec.name}:{name}" for name in plan.names]
    cells = build_cells(specs, chosen, kernel_filters=filters, asked=asked) if specs else []
    started = time.monotonic()
    summary.not_run = interpreted_triton()
    if summary.not_run:
        return {}, summary
    try:
        run = compile_cells(Workspace(project=project, targets=targets, specs=specs), chosen, cells,
                            options=RunOptions(), progress=progress) if cells else None
    except XisaError as exc:   # the specs are written; what they compile to is the next `xisa compile`'s to say
        summary.not_run = str(exc)
        return {}, summary
    summary.seconds = time.monotonic() - started
    said: dict[tuple[str, str], dict[str, str]] = {}
    kinds: dict[tuple[str, str], set[str | None]] = {}
    for result in run.results if run else []:
        said.setdefault((result.kernel, result.case), {})
        reason = _refusal(result, by_name[result.kernel][1].spec_path)
        summary.cells += 1
        summary.ok += reason is None
        if reason is not None:
            said[(result.kernel, result.case)][result.target] = reason
            kinds.setdefault((result.kernel, result.case), set()).add(result.error_kind)
    unheuristic: dict[tuple[str, str], tuple[list[str], str]] = {}   # (spec, heuristic) -> (cases, why)
    trials: dict[Path, dict[str, Trial]] = {}
    every = [targets[name] for name in sorted(targets)]
    for (kernel, case_name), refused in said.items():
        plan, spec = by_name[kernel]
        case = next(c for c in spec.cases if c.name == case_name)
        tried = tuple(t.name for t in case_targets(case, chosen, asked))
        left = tuple(t.name for t in case_targets(case, every) if t.name not in refused)
        all_refused = bool(refused) and set(refused) == set(tried)
        trials.setdefault(plan.path, {})[case_name] = Trial(tried=tried, refused=refused,
                                                            targets=None if all_refused or not refused else left)
        shown = spec.spec_path
        if all_refused and kinds.get((kernel, case_name)) == {"heuristic"}:
            # not a target's limit: the captured form of a heuristic does not compile anywhere
            why = next(iter(refused.values()))
            named = re.search(r"heuristic '([^']+)'", why)
            cases, _ = unheuristic.setdefault((shown, named[1] if named else "?"), ([], why))
            cases.append(case_name)
        elif all_refused:
            summary.nowhere.append(f"{shown}: {case_name}: {next(iter(refused.values()))}")
        elif refused:
            by_reason: dict[str, list[str]] = {}
            for target, why in refused.items():
                by_reason.setdefault(why, []).append(target)
            summary.left_out += [f"{shown}: {case_name} on {', '.join(names)}: {why}" for why, names in by_reason.items()]
        summary.left_cells += len(refused) if not all_refused else 0
    for (shown, heuristic), (cases, why) in unheuristic.items():
        listed = ", ".join(cases[:4]) + (f", and {len(cases) - 4} more" if len(cases) > 4 else "")
        why = re.sub(r"^cases\[\d+\] \([^)]*\): (heuristic '[^']+' )?", "", why)
        summary.heuristics.append(f"{shown}: the captured heuristic {heuristic!r} compiles on no target, in "
                                  f"{len(cases)} case{'s' if len(cases) != 1 else ''} ({listed}): {why}")
    return trials, summary


@contextlib.contextmanager
def without_interpreter() -> Iterator[None]:
    """TRITON_INTERPRET is the captured command's (the interpreter ran its kernels), not xisa's: while capture
    imports Triton and compiles, it is unset (Triton makes its own `@jit` library functions interpreted
    when it is imported under it), then set back."""
    interpret = os.environ.pop("TRITON_INTERPRET", None)
    try:
        yield
    finally:
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = interpret


def interpreted_triton() -> str | None:
    """Why this process cannot compile: Triton was imported here under TRITON_INTERPRET=1 (None: it can)."""
    standard = sys.modules.get("triton.language.standard")
    if standard is not None and any(type(v).__name__ == "InterpretedFunction" for v in vars(standard).values()):
        return ("this process imported Triton under TRITON_INTERPRET=1, so its library functions are interpreted: "
                "run `xisa compile` on the specs in a process without it")
    return None


def _refusal(result, spec_path: str) -> str | None:
    """Why a target refuses the cell (one line, without the spec's own path in front), or None: it compiled and
    one workgroup fits the target."""
    if result.ok:
        if result.launch is not None and result.launch.unexpected:
            return f"cannot launch: {result.launch.reason()}"
        return None
    if result.error_kind in NOT_A_REFUSAL:
        return None
    message = one_line(result.error or "compile error").removeprefix(f"{spec_path}: ")
    return message[:300] + ("…" if len(message) > 300 else "")


def one_line(error: str) -> str:
    """A compiler's message on one line: Triton's `CompilationError: at L:C:` / source line / `^` / message
    becomes its first line, the source line pointed at and the message."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    caret = next((i for i, line in enumerate(lines) if i and set(line.strip()) == {"^"}), None)
    if caret is not None:
        return f"{lines[0].rstrip(':')}, in `{lines[caret - 1].strip()[:100]}`: {' '.join(lines[caret + 1:]).strip()}"
    return lines[0] if lines else error


def write_captured(kernels: list[CapturedKernel], sources: dict[str, str], *, out: Path, project: Project,
                   command: str, check: bool, patterns: list[str] | None, dtype_names: set[str],
                   option_backends: dict[str, set[str]], progress) -> WrittenSpecs:
    """Plan, write, compile the new cases once (unless `check` is off), and write again with what the targets said."""
    from xisa.compile.launch.config_all import config_lister
    from xisa.spec.targets import load_targets

    targets = load_targets(list(project.target_dirs), root=project.root)
    roots = list(project.kernel_roots)
    plans = plan_specs(kernels, out=out, project=project, target_names=sorted(targets), dtype_names=dtype_names,
                       option_backends=option_backends, list_configs=config_lister(roots, list(targets.values())))
    if plans:
        out.mkdir(parents=True, exist_ok=True)
    kept, notes = write_kept_sources(plans, sources, out=out, project=project)
    render = dict(project=project, command=command, dtype_names=dtype_names, option_backends=option_backends)
    for plan in plans:
        if plan.names:
            plan.text = spec_text(plan, trials=None, tried=None if not check else (), **render)
            write_text(plan.path, plan.text, new=plan.existing is None)
    summary = None
    if check and any(plan.names for plan in plans):
        from xisa.spec.project import load_project

        # the project as `xisa compile --spec OUT` opens it: the same kernel roots, so the same cache keys
        as_compiled = load_project(cwd=project.root, spec=[out])
        trials, summary = trial_compile(plans, project=as_compiled, patterns=patterns, progress=progress)
        for plan in plans:
            if plan.names:
                text = spec_text(plan, trials=trials.get(plan.path), tried=tuple(summary.targets), **render)
                if text != plan.text:
                    write_text(plan.path, text, new=False)
                    plan.text = text
    return WrittenSpecs(written=[(p.path, len(p.names)) for p in plans if p.names and p.existing is None],
                        updated=[(p.path, len(p.names)) for p in plans if p.names and p.existing is not None],
                        unchanged=[p.path for p in plans if not p.names], kept=kept, notes=notes, trial=summary)
