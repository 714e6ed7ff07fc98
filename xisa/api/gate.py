"""The PR gate (`xisa diff`, `xisa check --base`): this tree against a base revision, its goldens read from git or
its kernels compiled in a worktree, judged by the scope."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from xisa.api.judging import CheckOutcome, bless_commands
from xisa.api.run import Progress, compile_cells, compile_selection, no_progress
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace, keeps_cache_bounded, open_workspace, validate_scopes
from xisa.compile.runner import RunOptions
from xisa.errors import UsageError
from xisa.golden.store import GoldenSet
from xisa.spec.cases import Cell
from xisa.spec.targets import Target


@keeps_cache_bounded
def gate(base: str, selection: Selection, *, compile_base: bool = False, options: RunOptions = RunOptions(),
         progress: Progress = no_progress) -> CheckOutcome:
    """The PR gate (`xisa diff`, `xisa check --base`): this tree against BASE, its goldens (read from git)
    or its kernels (compiled in a worktree), judged by the scope; `accept` brings this tree's stale goldens
    in line. Everything that can be refused is refused before the first compile: a filter, the scope,
    the revision, goldens of another toolchain at either end."""
    from xisa.golden.gate import base_record, judge_against_base
    from xisa.golden.store import list_goldens
    from xisa.spec import gitrev

    for flag, value in (("--arch", selection.arch), ("--kernel", selection.kernel)):
        if value:   # a gate over part of the cells would pass whatever changed in the rest
            raise UsageError(f"{flag} cannot narrow the gate against a base: the cells it leaves out would not be "
                             "judged", field=flag, fix=f"drop it (the gate judges every cell); to look at a subset, "
                                                      f"run `xisa check {flag} ...` without --base")
    scope = selection.scope
    validate_scopes(scope)
    ws = selection.workspace()
    whole = selection.whole()
    commit = gitrev.resolve(base, ws.project.root)
    head_golden_dir = (ws.project.golden_dir, "")
    with contextlib.ExitStack() as stack:
        base_errors: dict[str, str] = {}
        if compile_base:
            tree, root, base_ws, base_targets, base_cells = _open_base(stack, ws, commit, spec=selection.spec)
            validate_scopes(scope, ws, also=[(c.kernel.name, c.case, c.target.name) for c in base_cells])
            run = compile_selection(ws, whole, options=options, golden_dirs=[head_golden_dir], progress=progress)
            base_goldens, base_errors = _compile_base(tree, root, base_ws, base_targets, base_cells,
                                                      options=options, progress=progress)
        else:
            base_dir = stack.enter_context(gitrev.goldens_at(base, ws.project, golden=selection.golden))
            # A scope may name what only the base has: a removed kernel, a renamed case, a dropped target.
            validate_scopes(scope, ws, also=list_goldens(base_dir))
            run = compile_selection(ws, whole, options=options,
                                    golden_dirs=[head_golden_dir, (base_dir, f"{base}:")], progress=progress)
            base_goldens = GoldenSet.for_results(base_dir, run.results, display_root=base_dir.parent, owner=base,
                                                 material=ws.material)

        def judged(base_goldens: GoldenSet):
            return judge_against_base(run.results, run.failures, base=base_record(base, commit, compiled=compile_base),
                                      base_goldens=base_goldens, base_errors=base_errors,
                                      head_goldens=GoldenSet.for_results(ws.project.golden_dir, run.results,
                                                                         display_root=ws.project.root,
                                                                         material=ws.material),
                                      selected_targets={t.name for t in run.targets}, scopes=scope or [],
                                      toolchain=run.toolchain())

        report = judged(base_goldens)
        wanting = {v.id for v in report.verdicts if v.review_note}
        if not compile_base and wanting and _compile_for_streams(stack, ws, commit, wanting, spec=selection.spec,
                                                                 options=options, progress=progress):
            # The base's compact goldens name streams this machine had not compiled: now it has (where the base
            # compiles to its goldens' fingerprints), and the review shows their diffs.
            report = judged(GoldenSet.for_results(base_dir, run.results, display_root=base_dir.parent, owner=base,
                                                  material=ws.material))
    stale = dataclasses.replace(report, verdicts=report.stale_goldens, stale_goldens=[], base=None)
    return CheckOutcome(report=report, accept=bless_commands(stale, ws, whole), failure_lines=run.failure_lines())


def _open_base(stack: contextlib.ExitStack, ws: Workspace, commit: str, *, spec: list[Path] | None):
    """A temporary worktree of `commit` and the workspace of the project there, configured as the base
    configures it (its own `[tool.xisa]` specs and targets: a PR that drops a spec from the list must not
    drop it from the base too); specs named with --spec are those paths at the base. Returns the worktree,
    the repository root, the base's workspace, its targets and its cells."""
    from xisa.spec import gitrev

    root = gitrev.repo_root(ws.project.root)
    tree = stack.enter_context(gitrev.worktree_at(commit, root))
    base_root = tree / gitrev.project_at(root, ws.project)
    base_specs = None
    if spec:
        mapped = []
        for path in ws.project.spec_paths:
            try:
                mapped.append(tree / path.resolve().relative_to(root.resolve()))
            except ValueError:   # the same file on both sides: its changes would never show
                raise UsageError(f"{path} is outside the git repository {root}, so the base has no version of it",
                                 field="--spec", fix="keep the specs inside the repository") from None
        base_specs = [path for path in mapped if path.exists()]
        if not base_specs:
            raise UsageError(f"no --spec path exists at {commit[:12]}: there is nothing to compile there",
                             field="--spec", fix="name specs that the base has too, or judge against its goldens "
                                                 "(without --compile-base)")
    base_ws = open_workspace(cwd=base_root, spec=base_specs)
    chosen, cells = Selection().cells(base_ws)
    return tree, root, base_ws, chosen, cells


def _compile_for_streams(stack: contextlib.ExitStack, ws: Workspace, commit: str, cell_ids: set[str], *,
                         spec: list[Path] | None, options: RunOptions, progress: Progress) -> bool:
    """Compile at the base, in a worktree, the changed cells whose compact base golden names a stream this
    machine has none of, so their streams and lines land in the material store (looked up by the golden's own
    SHA-256: a base that compiles to other fingerprints here gives no diff, never a wrong one). Best effort: a
    base that cannot be opened or compiled leaves the review's note, never an error. Whether anything compiled."""
    from xisa.errors import XisaError
    from xisa.spec import gitrev

    try:
        tree, root, base_ws, chosen, cells = _open_base(stack, ws, commit, spec=spec)
        cells = [c for c in cells if c.id in cell_ids]
        if not cells:
            return False
        with gitrev.imports_from(tree, root):
            base_run = compile_cells(base_ws, chosen, cells, options=options, progress=progress)
    except (XisaError, OSError):
        return False
    ws.material.remember(base_run.results)   # this project's store, whatever the base configures
    return any(r.ok for r in base_run.results)


def _compile_base(tree: Path, root: Path, base_ws: Workspace, chosen: list[Target], cells: list[Cell], *,
                  options: RunOptions, progress: Progress) -> tuple[GoldenSet, dict[str, str]]:
    """Compile the base's cells in its worktree, imports resolved there. Returns the results as the goldens
    `xisa bless` would write for them (in memory) and the base cells that failed."""
    from xisa.spec import gitrev

    with gitrev.imports_from(tree, root):
        errors: dict[str, str] = {}
        for spec in {c.kernel.name: c.kernel for c in cells}.values():
            outside = spec.module and gitrev.module_outside(spec.module, tree)
            if outside:
                for cell in (c for c in cells if c.kernel is spec):
                    errors[cell.id] = (f"module {spec.module!r} resolves to {outside}, outside the base worktree "
                                       "(an editable install of this checkout?)")
        cells = [c for c in cells if c.id not in errors]
        base_run = compile_cells(base_ws, chosen, cells, options=options, progress=progress)
    for result in base_run.results:
        if not result.ok:
            errors[result.id] = result.error or "compile failed"
    return GoldenSet.of_results(base_run.results, base_run.toolchains()), errors
