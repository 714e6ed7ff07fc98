"""The application layer: each of xisa's jobs written once, as plain functions that return result objects.

Compile a selection, check it against its goldens (or against a base revision, its goldens read from
git or its kernels compiled), bless it, review it as a page, run it on the GPUs present, diagnose the
machine. The CLI commands and the pytest plugin parse their options, call one of these and render
what comes back; nothing here prints or exits: refusals are the typed errors of `xisa.errors`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fnmatch
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager

from xisa.analyze.expect import Failure, check_against_targets, evaluate, judge_launch
from xisa.analyze.loops import Loop, analysis_loops
from xisa.compile.autotune import count_configs
from xisa.compile.mca import Estimate, estimate_loop
from xisa.compile.result import CellResult
from xisa.compile.runner import RunOptions, run_cells
from xisa.compile.toolchain import check_knobs_read, describe_toolchain
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED, SpecError, ToolchainError, UsageError
from xisa.golden.bless import BlessOutcome, bless as write_goldens
from xisa.golden.store import golden_paths, read_golden_toolchain
from xisa.golden.verdict import UNUSED, CellVerdict, CheckReport, Scope, build_report, check_scopes
from xisa.names import display_path
from xisa.spec.cases import Cell, KernelSpec, build_cells, discover_spec_files, load_specs
from xisa.spec.project import Project, load_project
from xisa.spec.shard import parse_shard, shard_of
from xisa.spec.targets import Target, load_targets, select_targets

# How a caller watches a compile: given the number of cells, a context that yields a callback called
# with each result as it arrives (the CLI's progress bar); by default, nothing.
Progress = Callable[[int], ContextManager[Callable[[CellResult], None]]]


@contextlib.contextmanager
def no_progress(total: int) -> Iterator[Callable[[CellResult], None]]:
    yield lambda result: None


# --------------------------------------------------------------------------------- the project

@dataclass
class Workspace:
    project: Project
    targets: dict[str, Target]
    specs: list[KernelSpec]

    def select(self, *, arch: list[str] | None = None, kernel: list[str] | None = None) -> tuple[list[Target], list[Cell]]:
        chosen = select_targets(self.targets, arch)
        if kernel:
            names = {s.name for s in self.specs}
            for flt in kernel:
                kpat = flt.partition(":")[0]
                if not any(fnmatch.fnmatchcase(n, kpat) for n in names):
                    near = difflib.get_close_matches(kpat, sorted(names), n=1)
                    raise SpecError(f"no kernel matches {flt!r}", field="--kernel",
                                    fix=f"did you mean {near[0]!r}?" if near else f"kernels: {', '.join(sorted(names))}")
        cells = build_cells(self.specs, chosen, kernel_filters=kernel)
        known = {name: target.backend for name, target in self.targets.items()}
        for cell in cells:
            check_against_targets(cell.expect, known, path=cell.kernel.spec_path, field=cell.field_path)
        return chosen, cells


def open_workspace(*, spec: list[Path] | None = None, golden: Path | None = None, cwd: Path | None = None) -> Workspace:
    project = load_project(cwd=cwd, spec=spec, golden=golden)
    targets = load_targets(list(project.target_dirs), root=project.root)
    files = discover_spec_files(list(project.spec_paths))
    if not files:
        raise SpecError("no kernel specs found", path=", ".join(project.display(p) for p in project.spec_paths),
                        fix="add kernels/<name>.yaml or pass --spec PATH")
    roots = list(project.kernel_roots)
    specs = load_specs(files, root=project.root, pythonpath=project.pythonpath, import_hooks=project.import_hooks,
                       count_configs=lambda spec, field: count_configs(spec, field, roots=roots))
    return Workspace(project=project, targets=targets, specs=specs)


def select_cells(ws: Workspace, *, arch: list[str] | None, kernel: list[str] | None,
                 shard: tuple[int, int] | None = None) -> tuple[list[Target], list[Cell]]:
    chosen, cells = ws.select(arch=arch, kernel=kernel)
    if shard is not None:
        index, count = shard
        cells = [c for c in cells if shard_of(c.id, count) == index - 1]
    return chosen, cells


def validate_scopes(scopes: list[str] | None, ws: Workspace | None = None, *,
                    also: list[tuple[str, str, str]] | tuple = ()) -> None:
    """A bad --scope is refused before anything compiles: its syntax, and (given the workspace) a
    part that matches no known target, kernel or case; `also` adds (kernel, case, target) names that
    only a base revision has."""
    if ws is None:
        for text in scopes or []:
            Scope.parse(text)
        return
    targets = set(ws.targets) | {target for _, _, target in also}
    cases = {spec.name: {case.name for case in spec.cases} for spec in ws.specs}
    for kernel, case, _ in also:
        cases.setdefault(kernel, set()).add(case)
    check_scopes(scopes or [], targets=sorted(targets), cases={k: sorted(v) for k, v in cases.items()})


def check_golden_toolchains(cells: list[Cell], golden_dir: Path, *, display_root: Path, label: str = "",
                            ab_command: str | None = None) -> None:
    """Refuse, before anything compiles, goldens of the selection made with another toolchain than the
    one their cells compile with: no compile could be compared with them (exit 2, one line).

    Triton's version always counts; the AMD codegen revision or ptxas's version counts where both the
    golden and the installed toolchain name one for the cell's backend. Unreadable goldens are left to
    the per-cell verdict, which reports each one."""
    installed_by_backend: dict[str, dict[str, str]] = {}
    mismatched: dict[tuple[str, str, str], list[str]] = {}   # (fact, golden's, installed) -> files
    for cell in cells:
        yaml_path, _ = golden_paths(golden_dir, cell.kernel.name, cell.case, cell.target.name)
        recorded = read_golden_toolchain(yaml_path)
        if recorded is None:
            continue
        shown = label + display_path(yaml_path, display_root)
        backend = cell.target.backend
        if backend not in installed_by_backend:
            installed_by_backend[backend] = describe_toolchain(backends={backend})
        for fact, value in installed_by_backend[backend].items():
            if fact in recorded and str(recorded[fact]) != value:
                mismatched.setdefault((fact, str(recorded[fact]), value), []).append(shown)
    if not mismatched:
        return
    (fact, theirs, ours), files = max(mismatched.items(), key=lambda item: len(item[1]))
    others = len({f for group in mismatched.values() for f in group} - set(files))
    name = {"triton": "Triton", "amd_codegen": "the AMD codegen revision", "ptxas": "ptxas"}.get(fact, fact)
    if label:   # a base revision's goldens: re-blessing this tree cannot change them
        fix = (f"pip install triton=={theirs}, or judge against the base compiled with {ours}: --compile-base"
               if fact == "triton" else "install the Triton build the goldens were made with, or judge against "
                                        "the base compiled with this one: --compile-base")
    elif ab_command:   # an upgrade: the command that shows what it changes, before accepting it
        fix = (f"pip install triton=={theirs}, or re-bless with {ours} and commit the goldens once `{ab_command}` "
               "shows what it changes, cell by cell" if fact == "triton" else
               "install the Triton build the goldens were made with, or re-bless and commit the goldens once "
               f"`{ab_command}` shows what this toolchain changes, cell by cell")
    else:
        fix = (f"pip install triton=={theirs}, or re-bless with {ours} and commit the goldens" if fact == "triton"
               else "install the Triton build the goldens were made with, or re-bless and commit the goldens")
    count = len(files)
    raise ToolchainError(f"{count} golden{'s' if count != 1 else ''} of this selection {'were' if count != 1 else 'was'} "
                         f"made with {name} {theirs} but {ours} is installed"
                         + (f" ({others} more of yet another toolchain)" if others else "")
                         + ": no compile could be compared with them", path=files[0], field="toolchain", fix=fix)


# --------------------------------------------------------------------------------- compiling

@dataclass
class Run:
    """One compile of a selection: its targets, the cells' results and their expectation failures."""

    targets: list[Target]
    results: list[CellResult]
    failures: dict[str, list[Failure]]
    emitted: int | None = None      # files written by `compile(emit=...)`

    @property
    def backends(self) -> set[str]:
        return {t.backend for t in self.targets}

    def toolchain(self) -> dict[str, str]:
        """The toolchain facts of every backend of the run: what a report records."""
        return describe_toolchain(backends=self.backends)

    def toolchains(self) -> dict[str, dict[str, str]]:
        """Per target, the toolchain facts of its backend only: what its golden records."""
        return {t.name: describe_toolchain(backends={t.backend}) for t in self.targets}

    @property
    def cannot_launch(self) -> list[CellResult]:
        """The cells that cannot launch on their target although the spec does not expect it."""
        return [r for r in self.results if r.launch is not None and r.launch.unexpected]

    @property
    def failed(self) -> bool:
        """A failed expectation or an unexpected cannot-launch: `compile` and `bless` exit 1."""
        return any(self.failures.values()) or bool(self.cannot_launch)

    def failure_lines(self) -> list[str]:
        """Each failed expectation and each cell that cannot launch unexpectedly, as the one line every
        command prints on stderr."""
        return [f"expectation failed {cell_id}: {failure}" for cell_id, fails in self.failures.items()
                for failure in fails] + [f"{r.id} cannot launch: {r.launch.reason()}" for r in self.cannot_launch]


def judge_launches(cells: list[Cell], results: list[CellResult]) -> None:
    """Each compiled result's `launch`: its workgroup against its target file's per-workgroup limits,
    and the spec's `launchable` for that target."""
    for cell, result in zip(cells, results):
        if result.ok and result.analysis is not None:
            target = cell.target
            excess = target.handler.launch_excess(result.analysis.resources, target=target,
                                                  num_warps=int(result.options.get("num_warps") or 1))
            result.launch = judge_launch(cell.expect, target.name, excess, target_file=target.path)


def expectation_failures(cell: Cell, result: CellResult) -> list[Failure]:
    if not result.ok or result.analysis is None:
        return []
    launchable = result.launch is None or result.launch.launchable
    return evaluate(cell.expect, cell.target.name, result.analysis, launchable=launchable)


@contextlib.contextmanager
def restored_environment() -> Iterator[None]:
    """A compile pins Triton's codegen variables and its cache folder in this process (its workers
    inherit them); the caller, a user's test session, gets its own environment back afterwards."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def compile_cells(ws: Workspace, chosen: list[Target], cells: list[Cell], *, options: RunOptions,
                  progress: Progress = no_progress) -> Run:
    """One pool for the whole selection; results in the order of `cells`."""
    with restored_environment(), progress(len(cells)) as advance:
        results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=ws.project.cache_dir,
                            options=options, progress=advance)
    judge_launches(cells, results)
    failures = {cell.id: expectation_failures(cell, result) for cell, result in zip(cells, results)}
    return Run(targets=chosen, results=results, failures=failures)


def compile_selection(ws: Workspace, *, arch: list[str] | None, kernel: list[str] | None, options: RunOptions,
                      shard: str | None = None, golden_dirs: list[tuple[Path, str]] | tuple = (),
                      ab_command: str | None = None, progress: Progress = no_progress) -> Run:
    """Select and compile. `shard` is the `I/N` text of --shard. `golden_dirs` (folder, label) are checked
    for another toolchain first, so a mismatch is one line before any compile, not a report after all;
    `ab_command` is the `xisa ab` that line offers for this tree's goldens."""
    chosen, cells = select_cells(ws, arch=arch, kernel=kernel, shard=parse_shard(shard))
    for folder, label in golden_dirs:
        check_golden_toolchains(cells, folder, display_root=ws.project.root if not label else folder.parent,
                                label=label, ab_command=ab_command)
    return compile_cells(ws, chosen, cells, options=options, progress=progress)


def compile(*, arch: list[str] | None, kernel: list[str] | None, spec: list[Path] | None, options: RunOptions,
            emit: Path | None = None, progress: Progress = no_progress) -> Run:
    """`xisa compile`: the selection compiled; with `emit`, every stage of every cell written there."""
    from xisa.compile.emit import emit_stages

    ws = open_workspace(spec=spec)
    chosen, cells = select_cells(ws, arch=arch, kernel=kernel)
    if emit is not None:
        options = dataclasses.replace(options, keep_stages=True)
    run = compile_cells(ws, chosen, cells, options=options, progress=progress)
    if emit is not None:
        run.emitted = emit_stages(emit, cells, run.results)
    return run


# --------------------------------------------------------------------------------- loops

def cell_loops(results: list[CellResult], targets: dict[str, Target], *, estimate: bool = True
               ) -> dict[str, list[tuple[Loop, Estimate | str | None]]]:
    """Each compiled cell's loops (`xisa.analyze.loops`), with llvm-mca's estimate of each where asked
    (`xisa.compile.mca`: an `Estimate`, or one line saying why there is none)."""
    found: dict[str, list[tuple[Loop, Estimate | str | None]]] = {}
    for result in results:
        if not result.ok or result.analysis is None:
            continue
        target = targets.get(result.target)
        found[result.id] = [(loop, estimate_loop(loop, triple=target.handler.mca_triple, cpu=str(target.arch))
                             if estimate and target is not None else None)
                            for loop in analysis_loops(result.analysis)]
    return found


def loop_estimates(report: CheckReport, *, cwd: Path | None = None) -> dict[tuple[str, str, str], str]:
    """llvm-mca's estimate (or why there is none) of each changed loop of the report, for the HTML page:
    (cell id, function, header) -> one line. Computed here, where it is shown, never in a check."""
    changed = [v for v in report.verdicts if v.delta and v.delta.loops and v.head is not None]
    if not changed:
        return {}
    project = load_project(cwd=cwd)
    targets = load_targets(list(project.target_dirs), root=project.root)
    estimates = {}
    for verdict in changed:
        target = targets.get(verdict.target)
        for change in verdict.delta.loops:
            if change.head is None or target is None:
                continue
            said = estimate_loop(change.head, triple=target.handler.mca_triple, cpu=str(target.arch))
            estimates[(verdict.id, change.head.function, change.head.header)] = said if isinstance(said, str) \
                else said.text()
    return estimates


# --------------------------------------------------------------------------------- judging

@dataclass
class CheckOutcome:
    """A report, the `xisa bless` commands that accept what it found (None: none offered), the exit code,
    and the compile's failed expectations as lines (`Run.failure_lines`)."""

    report: CheckReport
    accept: list[str] | None
    exit_code: int
    failure_lines: list[str] = dataclasses.field(default_factory=list)


def judge(ws: Workspace, run: Run, *, kernel_filters: list[str] | None, scopes: list[str] | None,
          golden_dir: Path | None = None, display_root: Path | None = None, shard: tuple[int, int] | None = None,
          selection: dict[str, Any] | None = None) -> CheckReport:
    """The run's cells against goldens (this tree's unless `golden_dir` names others)."""
    return build_report(run.results, run.failures, golden_dir=golden_dir or ws.project.golden_dir,
                        display_root=display_root or ws.project.root, selected_targets={t.name for t in run.targets},
                        kernel_filters=kernel_filters, scopes=scopes or [], toolchain=run.toolchain(), shard=shard,
                        selection=selection)


def bless_commands(report: CheckReport, ws: Workspace, *, kernel: list[str] | None, spec: list[Path] | None,
                   golden: Path | None) -> list[str]:
    """The `xisa bless` commands that accept what this check found changed, new or unused."""
    from xisa.render.formats import accept_commands

    extra = [word for path in spec or [] for word in ("--spec", str(path))]
    extra += ["--golden", str(golden)] if golden is not None else []
    return accept_commands(report, kernel_filters=kernel, extra_args=extra, kernels={s.name for s in ws.specs})


def ab_command(*, arch: list[str] | None, kernel: list[str] | None, spec: list[Path] | None,
               golden: Path | None) -> str:
    """The `xisa ab` that compares a selection's goldens with this toolchain's compile of it."""
    import shlex

    words = ["xisa", "ab", "--a-golden"]
    for flag, values in (("--arch", arch), ("--kernel", kernel), ("--spec", spec), ("--golden", [golden] if golden else [])):
        words += [word for value in values or [] for word in (flag, str(value))]
    return shlex.join(words)


def check(*, arch: list[str] | None = None, kernel: list[str] | None = None, spec: list[Path] | None = None,
          golden: Path | None = None, scope: list[str] | None = None, base: str | None = None,
          compile_base: bool = False, shard: str | None = None, options: RunOptions = RunOptions(),
          progress: Progress = no_progress) -> CheckOutcome:
    """`xisa check`: every selected cell against its golden, or with `base` the PR gate (see `gate`)."""
    if base is not None:
        if shard is not None:
            raise UsageError("--shard cannot be combined with --base: the gate against a base judges the whole "
                             "selection", field="--shard", fix="shard `xisa check` without --base, and run the gate once")
        return gate(base, compile_base=compile_base, arch=arch, kernel=kernel, spec=spec, golden=golden, scope=scope,
                    options=options, progress=progress)
    if compile_base:
        raise UsageError("--compile-base needs --base", field="--compile-base", fix="e.g. --base origin/main --compile-base")
    from xisa.golden.selection import describe_selection

    validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    validate_scopes(scope, ws)
    _, whole = select_cells(ws, arch=arch, kernel=kernel)   # every shard's cells: what `xisa merge` must get back
    selection = describe_selection(ws, arch=arch, kernel=kernel, cells=whole)
    run = compile_selection(ws, arch=arch, kernel=kernel, options=options, shard=shard,
                            golden_dirs=[(ws.project.golden_dir, "")],
                            ab_command=ab_command(arch=arch, kernel=kernel, spec=spec, golden=golden), progress=progress)
    report = judge(ws, run, kernel_filters=kernel, scopes=scope, shard=parse_shard(shard), selection=selection)
    return CheckOutcome(report=report, accept=bless_commands(report, ws, kernel=kernel, spec=spec, golden=golden),
                        exit_code=report.exit_code, failure_lines=run.failure_lines())


def gate(base: str, *, compile_base: bool = False, arch: list[str] | None = None, kernel: list[str] | None = None,
         spec: list[Path] | None = None, golden: Path | None = None, scope: list[str] | None = None,
         options: RunOptions = RunOptions(), progress: Progress = no_progress) -> CheckOutcome:
    """The PR gate (`xisa diff`, `xisa check --base`): this tree against BASE, its goldens (read from git)
    or its kernels (compiled in a worktree), judged by the scope; `accept` brings this tree's stale goldens
    in line. Everything that can be refused is refused before the first compile: a filter, the scope,
    the revision, goldens of another toolchain at either end."""
    from xisa.golden.gate import base_record, judge_against_base
    from xisa.golden.store import list_goldens
    from xisa.spec import gitrev

    for flag, value in (("--arch", arch), ("--kernel", kernel)):
        if value:   # a gate over part of the cells would pass whatever changed in the rest
            raise UsageError(f"{flag} cannot narrow the gate against a base: the cells it leaves out would not be "
                             "judged", field=flag, fix=f"drop it (the gate judges every cell); to look at a subset, "
                                                      f"run `xisa check {flag} ...` without --base")
    validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    commit = gitrev.resolve(base, ws.project.root)
    head_goldens = (ws.project.golden_dir, "")
    with contextlib.ExitStack() as stack:
        base_errors: dict[str, str] = {}
        if compile_base:
            tree, root, base_ws, base_targets, base_cells = _open_base(stack, ws, commit, spec=spec)
            validate_scopes(scope, ws, also=[(c.kernel.name, c.case, c.target.name) for c in base_cells])
            run = compile_selection(ws, arch=None, kernel=None, options=options, golden_dirs=[head_goldens],
                                    progress=progress)
            base_dir, base_errors = _compile_base(stack, tree, root, base_ws, base_targets, base_cells,
                                                  options=options, progress=progress)
        else:
            base_dir = stack.enter_context(gitrev.goldens_at(base, ws.project, golden=golden))
            # A scope may name what only the base has: a removed kernel, a renamed case, a dropped target.
            validate_scopes(scope, ws, also=list_goldens(base_dir))
            run = compile_selection(ws, arch=None, kernel=None, options=options,
                                    golden_dirs=[head_goldens, (base_dir, f"{base}:")], progress=progress)
        report = judge_against_base(run.results, run.failures, base=base_record(base, commit, compiled=compile_base),
                                    base_dir=base_dir, base_errors=base_errors, head_golden_dir=ws.project.golden_dir,
                                    display_root=ws.project.root, selected_targets={t.name for t in run.targets},
                                    scopes=scope or [], toolchain=run.toolchain())
    stale = dataclasses.replace(report, verdicts=report.stale_goldens, stale_goldens=[], base=None)
    return CheckOutcome(report=report, accept=bless_commands(stale, ws, kernel=None, spec=spec, golden=golden),
                        exit_code=report.exit_code, failure_lines=run.failure_lines())


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
    chosen, cells = select_cells(base_ws, arch=None, kernel=None)
    return tree, root, base_ws, chosen, cells


def _compile_base(stack: contextlib.ExitStack, tree: Path, root: Path, base_ws: Workspace, chosen: list[Target],
                  cells: list[Cell], *, options: RunOptions, progress: Progress) -> tuple[Path, dict[str, str]]:
    """Compile the base's cells in its worktree, imports resolved there, and render the results as goldens
    in a temporary folder. Returns that folder and the base cells that failed."""
    from xisa.golden.store import render_golden, write_golden
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
    base_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="xisa-base-goldens-"))) / "golden"
    toolchains = base_run.toolchains()
    for result in base_run.results:
        if result.ok:
            yaml_text, stream_text = render_golden(result, toolchain=toolchains[result.target], stream_file=True)
            write_golden(*golden_paths(base_dir, result.kernel, result.case, result.target), yaml_text, stream_text)
        else:
            errors[result.id] = result.error or "compile failed"
    base_dir.mkdir(parents=True, exist_ok=True)
    return base_dir, errors


def review(*, base: str | None = None, arch: list[str] | None = None, kernel: list[str] | None = None,
           spec: list[Path] | None = None, golden: Path | None = None, scope: list[str] | None = None,
           options: RunOptions = RunOptions(), progress: Progress = no_progress) -> CheckOutcome:
    """`xisa report --html`: without `base`, the check's verdicts and exit code; with it, the selection
    against BASE's goldens, failing only when the result cannot be trusted (a review, not a gate)."""
    validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    validate_scopes(scope, ws)
    run = compile_selection(ws, arch=arch, kernel=kernel, options=options, progress=progress)
    if base is None:
        report = judge(ws, run, kernel_filters=kernel, scopes=scope)
        return CheckOutcome(report=report, accept=bless_commands(report, ws, kernel=kernel, spec=spec, golden=golden),
                            exit_code=report.exit_code, failure_lines=run.failure_lines())
    from xisa.spec import gitrev

    with gitrev.goldens_at(base, ws.project, golden=golden) as base_dir:
        report = judge(ws, run, kernel_filters=kernel, scopes=scope, golden_dir=base_dir, display_root=base_dir)
    return CheckOutcome(report=report, accept=None, exit_code=EXIT_UNTRUSTED if report.exit_code == EXIT_UNTRUSTED
                        else EXIT_OK, failure_lines=run.failure_lines())


def unused_goldens(ws: Workspace, chosen: list[Target], cells: list[Cell], *, kernel_filters: list[str] | None,
                   cell_patterns: list[str] | None = None) -> list[CellVerdict]:
    """The goldens inside a selection (its targets, kernel filters and, if given, cell-id globs) that no
    cell of it has: what `xisa check` reports as unused. Nothing is compiled."""
    empty = Run(targets=chosen, results=[], failures={})
    report = build_report(empty.results, empty.failures, golden_dir=ws.project.golden_dir,
                          display_root=ws.project.root, selected_targets={t.name for t in chosen},
                          kernel_filters=kernel_filters, scopes=[], toolchain={})
    ids = {cell.id for cell in cells}
    return [v for v in report.verdicts if v.verdict == UNUSED and v.id not in ids
            and (not cell_patterns or any(fnmatch.fnmatchcase(v.id, p) for p in cell_patterns))]


# --------------------------------------------------------------------------------- blessing

@dataclass
class ToolchainUpgrade:
    """A bless under another toolchain than the goldens': what the new compile changes against the goldens
    it replaces (a report with the goldens as `base`), and both toolchains."""

    report: CheckReport
    old: dict[str, str]
    new: dict[str, str]


@dataclass
class BlessResult:
    run: Run
    outcome: BlessOutcome
    upgrade: ToolchainUpgrade | None = None

    @property
    def exit_code(self) -> int:
        if self.outcome.skipped_errors:
            return EXIT_UNTRUSTED
        return 1 if self.run.failed else EXIT_OK


def bless_run(ws: Workspace, run: Run, *, kernel_filters: list[str] | None, lock_timeout: float = 30.0,
              record_stages: bool = False) -> BlessOutcome:
    """Write the goldens of a run; unused goldens of its selection go when every cell compiled.
    `record_stages`: only add stage fingerprints and source-line tables to the goldens whose cell is unchanged."""
    return write_goldens(run.results, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                         toolchains=run.toolchains(), stream_files=ws.project.stream_files,
                         selected_targets={t.name for t in run.targets}, kernel_filters=kernel_filters,
                         lock_timeout=lock_timeout, record_stages=record_stages)


def bless(*, arch: list[str] | None = None, kernel: list[str] | None = None, spec: list[Path] | None = None,
          golden: Path | None = None, options: RunOptions = RunOptions(), lock_timeout: float = 30.0,
          progress: Progress = no_progress, record_stages: bool = False) -> BlessResult:
    """`xisa bless`: accept the current compile as the goldens of the selection (refused when CI is set).
    `record_stages` (`--record-stages`): accept nothing; add stage fingerprints and source-line tables to
    unchanged cells' goldens."""
    from xisa.golden.bless import refuse_in_ci

    refuse_in_ci()
    ws = open_workspace(spec=spec, golden=golden)
    run = compile_selection(ws, arch=arch, kernel=kernel, options=options, progress=progress)
    upgrade = toolchain_upgrade(ws, run, kernel_filters=kernel)   # before the goldens it compares with are rewritten
    return BlessResult(run=run, outcome=bless_run(ws, run, kernel_filters=kernel, lock_timeout=lock_timeout,
                                                  record_stages=record_stages), upgrade=upgrade)


def toolchain_upgrade(ws: Workspace, run: Run, *, kernel_filters: list[str] | None) -> ToolchainUpgrade | None:
    """None unless a golden of the run's cells was made with another toolchain than its cell compiled with;
    then the run against the goldens as they are (an A/B with the goldens as side A)."""
    from xisa.golden.ab import majority_toolchain

    toolchains = run.toolchains()
    old = []
    for result in run.results:
        recorded = read_golden_toolchain(golden_paths(ws.project.golden_dir, result.kernel, result.case, result.target)[0])
        if recorded and any(str(recorded.get(k)) != v for k, v in toolchains[result.target].items() if k in recorded):
            old.append(recorded)
    if not old:
        return None
    old_toolchain = majority_toolchain(old)
    report = build_report(run.results, {}, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                          selected_targets={t.name for t in run.targets}, kernel_filters=kernel_filters, scopes=[],
                          toolchain={"triton": old_toolchain.get("triton", "")}, launches=False)
    return ToolchainUpgrade(report=report, old=old_toolchain, new=run.toolchain())


# --------------------------------------------------------------------------------- A/B

@dataclass
class AbOutcome:
    """`xisa ab`: the comparison (side A as the goldens, side B as the compile) and the exit code: 0 every cell
    the same, 1 a cell changed (or, against the goldens, has none or has no cell), 2 a side failed."""

    report: Any      # xisa.golden.ab.AbReport
    exit_code: int


# What another Python needs to run xisa's compile from this checkout (xisa itself need not be installed).
_SIDE_MODULES = ("triton", "torch", "yaml", "typer", "rich")
_SIDE_PROBE = """
import importlib.metadata as m, importlib.util as u, json, sys
try:
    triton = m.version("triton")
except m.PackageNotFoundError:
    triton = None
spec = u.find_spec("xisa")
print(json.dumps({"python": list(sys.version_info[:2]), "prefix": sys.prefix, "triton": triton,
                  "missing": [n for n in %r if u.find_spec(n) is None],
                  "xisa": spec.origin if spec else None}))
""" % (_SIDE_MODULES,)


def _xisa_parent() -> Path:
    return Path(__file__).resolve().parent.parent


def _side_pythonpath(cache_dir: Path) -> Path:
    """The folder another Python imports this xisa from: the checkout it lives in, or, when xisa is installed
    (its parent a site-packages, whose Triton and torch would shadow that Python's own), a folder in xisa's
    private cache holding only a link to the package. Stable, as the result cache key's sys.path must be."""
    parent = _xisa_parent()
    if parent.name not in ("site-packages", "dist-packages"):
        return parent
    from xisa.compile.cache import check_private

    folder = cache_dir / "ab-pythonpath"
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    check_private(folder, folder.lstat(), "cache folder")
    link, package = folder / "xisa", parent / "xisa"
    if os.path.islink(link) and os.readlink(link) != str(package):
        link.unlink()
    if not os.path.lexists(link):
        link.symlink_to(package, target_is_directory=True)
    return folder


def _side_environment(cache_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_side_pythonpath(cache_dir)), *filter(None, [env.get("PYTHONPATH")])])
    return env


def probe_side_python(python: str, *, field: str, cache_dir: Path) -> dict[str, Any]:
    """Refuse, before anything compiles, another Python that cannot compile for xisa: not runnable, too old,
    no Triton or one outside xisa's range, a module missing, or this checkout's xisa not the one it imports."""
    import json
    import subprocess

    from xisa.compile.toolchain import SUPPORTED_TRITON, check_supported

    try:
        proc = subprocess.run([python, "-c", _SIDE_PROBE], capture_output=True, text=True,
                              env=_side_environment(cache_dir), timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ToolchainError(f"cannot run {python}: {getattr(exc, 'strerror', None) or exc}", field=field,
                             fix="name a Python interpreter, e.g. ../venv-3.9/bin/python") from None
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"{python} is not a Python xisa can use: {last}", field=field,
                             fix="name a Python 3.11+ interpreter") from None
    if tuple(facts["python"]) < (3, 11):
        raise ToolchainError(f"{python} is Python {'.'.join(map(str, facts['python']))}; xisa needs 3.11+",
                             field=field, fix="make the virtual environment with Python 3.11 or later")
    if facts["triton"] is None:
        raise ToolchainError(f"{python} has no Triton installed", field=field,
                             fix=f"{python} -m pip install triton==VERSION torch pyyaml typer rich")
    try:
        check_supported(facts["triton"])
    except ToolchainError:
        (low_major, low_minor), (high_major, high_minor) = SUPPORTED_TRITON
        raise ToolchainError(f"{python} has Triton {facts['triton']}, outside the range xisa supports "
                             f"({low_major}.{low_minor} to {high_major}.{high_minor})", field=field,
                             fix=f"install a Triton from {low_major}.{low_minor} to {high_major}.{high_minor} there") from None
    if facts["missing"]:
        raise ToolchainError(f"{python} cannot import {', '.join(facts['missing'])}, which xisa's compile needs",
                             field=field, fix=f"{python} -m pip install {' '.join(facts['missing'])}".replace(
                                 " yaml", " pyyaml"))
    ours = str(_xisa_parent() / "xisa" / "__init__.py")
    if facts["xisa"] is None or os.path.realpath(facts["xisa"]) != os.path.realpath(ours):
        raise ToolchainError(f"{python} imports xisa from {facts['xisa']}, not from this checkout ({ours})",
                             field=field, fix="run it without -I/-E, or uninstall the other xisa there")
    return facts


class _SideProcess:
    """One side compiled by another Python: `PYTHON -m xisa ab-side`, with this checkout first on its
    PYTHONPATH, in this process's working folder and environment (so the same project and cache: the cache
    key holds the toolchain's identity, so each Triton keeps its own entries). Runs after this
    process compiled its side; its results come back whole through a file (a kernel's import may print)."""

    def __init__(self, side, *, arch: list[str] | None, kernel: list[str] | None, spec: list[Path] | None,
                 options: RunOptions, field: str, cache_dir: Path):
        import subprocess

        self.side, self.field = side, field
        probe_side_python(side.python, field=field, cache_dir=cache_dir)
        self.folder = Path(tempfile.mkdtemp(prefix="xisa-ab-side-"))
        self.output = self.folder / "side.json"
        self.errors = open(self.folder / "stderr.txt", "w+", encoding="utf-8")
        command = [side.python, "-m", "xisa", "ab-side", "--output", str(self.output), "--jobs", str(options.jobs),
                   "--timeout", repr(options.timeout)]
        command += ["--no-cache"] if not options.use_cache else []
        command += [word for name in arch or [] for word in ("--arch", name)]
        command += [word for name in kernel or [] for word in ("--kernel", name)]
        command += [word for path in spec or [] for word in ("--spec", str(Path(path).resolve()))]
        command += [word for name, value in sorted(side.knobs.items()) for word in ("--knob", f"{name}={value}")]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.errors, env=_side_environment(cache_dir))

    def results(self) -> tuple[list[CellResult], dict[str, str], dict[str, dict[str, str]]]:
        import json

        from xisa.golden.ab import read_side_payload

        code = self.process.wait()
        self.errors.seek(0)
        lines = [line for line in self.errors.read().splitlines() if line.strip()]
        try:
            return read_side_payload(json.loads(self.output.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            said = next((line for line in reversed(lines) if line.startswith("xisa: error:")), None)
            said = said[len("xisa: error: "):] if said else (lines[-1] if lines else f"exit code {code}")
            raise ToolchainError(f"side {self.side.label} ({self.side.python}) could not compile: {said}",
                                 field=self.field, fix="run the same selection with `xisa compile` in that "
                                                       "environment to see why") from None

    def close(self) -> None:
        import shutil

        if self.process.poll() is None:   # interrupted: the other side's compile is not worth waiting for
            self.process.kill()
            self.process.wait()
        self.errors.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def ab(*, a, b, arch: list[str] | None = None, kernel: list[str] | None = None, spec: list[Path] | None = None,
       golden: Path | None = None, options: RunOptions = RunOptions(), progress: Progress = no_progress) -> AbOutcome:
    """`xisa ab`: the selection compiled as side A and as side B (`xisa.golden.ab.Side`: this Python, another
    Python, each with its codegen knobs; or side A the goldens as they are), compared cell by cell.

    The sides compile one after the other, each with every core (a side in another Python in a process of its
    own); each reuses the result cache."""
    from xisa.golden.ab import judge_ab, majority_toolchain
    from xisa.golden.selection import describe_selection
    from xisa.golden.store import render_golden, write_golden

    if b.golden:
        raise UsageError("side B is compiled; only side A can be the goldens", field="--b-golden",
                         fix="swap the sides: --a-golden")
    if a.compiles_like(b):
        raise UsageError("both sides compile with the same Python and the same knobs: nothing could differ",
                         field="--b-python", fix="give side B another Python (--b-python PATH) or a knob "
                                                 "(--b-env NAME=VALUE), or compare with the goldens (--a-golden)")
    ws = open_workspace(spec=spec, golden=golden)
    chosen, cells = select_cells(ws, arch=arch, kernel=kernel)
    selection = describe_selection(ws, arch=arch, kernel=kernel, cells=cells)
    sides = (a, b)
    for side in sides:   # a typo'd knob would read `same` everywhere (another Python checks its own)
        if not side.python:
            check_knobs_read(side.knobs, field=f"--{side.label.lower()}-env")
    compiled: dict[str, tuple[list[CellResult], dict[str, str], dict[str, dict[str, str]]]] = {}
    with contextlib.ExitStack() as stack:
        # One side after the other, each with every core: two pools at once on the same cores cost more than
        # the two compiles (measured 1.2x on 2 cores), and a side found in the cache costs nothing either way.
        for side in sides:
            if not side.golden and not side.python:
                run = compile_cells(ws, chosen, cells, options=dataclasses.replace(options, knobs=dict(side.knobs)),
                                    progress=progress)
                compiled[side.label] = (run.results, run.toolchain(), run.toolchains())
        for side in sides:
            if side.python:
                child = _SideProcess(side, arch=arch, kernel=kernel, spec=spec, options=options,
                                     field=f"--{side.label.lower()}-python", cache_dir=ws.project.cache_dir)
                stack.callback(child.close)
                compiled[side.label] = child.results()
        wanted = [cell.id for cell in cells]
        for label, (results, _, _) in compiled.items():   # the other Python selected what this one did
            if sorted(r.id for r in results) != sorted(wanted):
                raise ToolchainError(f"side {label} compiled other cells than this selection", field=f"--{label.lower()}-python",
                                     fix="run both sides with the same xisa checkout")
            order = {cell_id: i for i, cell_id in enumerate(wanted)}
            results.sort(key=lambda r: order[r.id])
        for side in sides:
            if side.label in compiled:
                side.toolchain = compiled[side.label][1]
        a_errors: dict[str, str] = {}
        if a.golden:
            a_dir = ws.project.golden_dir
            a.golden_dir = display_path(a_dir, ws.project.root) + "/"
            recorded = [read_golden_toolchain(golden_paths(a_dir, c.kernel.name, c.case, c.target.name)[0])
                        for c in cells]
            a.toolchain = majority_toolchain([t for t in recorded if t])
        else:
            a_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="xisa-ab-a-"))) / "golden"
            results, _, toolchains = compiled[a.label]
            for result in results:
                if result.ok:
                    write_golden(*golden_paths(a_dir, result.kernel, result.case, result.target),
                                 *render_golden(result, toolchain=toolchains[result.target], stream_file=True))
                else:
                    a_errors[result.id] = result.error or "compile failed"
            a_dir.mkdir(parents=True, exist_ok=True)
        report = judge_ab(compiled[b.label][0], a_golden_dir=a_dir, a_errors=a_errors, a_is_goldens=a.golden,
                          display_root=ws.project.root if a.golden else a_dir.parent,
                          selected_targets={t.name for t in chosen}, kernel_filters=kernel, sides=[a, b],
                          selection=selection)
    return AbOutcome(report=report, exit_code=report.exit_code)


# --------------------------------------------------------------------------------- the machine

def device(*, arch: list[str] | None = None, kernel: list[str] | None = None, spec: list[Path] | None = None,
           options: RunOptions = RunOptions(), emit: Path | None = None, devices=None):
    """`xisa device`: the selection's runtime checks on the GPUs present (a `DeviceReport`)."""
    from xisa.device.detect import detect_devices
    from xisa.device.tier import run_device_tier

    ws = open_workspace(spec=spec)
    devices = detect_devices(ws.targets) if devices is None else devices
    chosen, cells = ws.select(arch=arch, kernel=kernel)
    return run_device_tier(chosen, cells, devices=devices, roots=list(ws.project.kernel_roots),
                           cache_dir=ws.project.cache_dir, options=options, emit=emit, arch=arch, kernel=kernel)


def doctor(*, cwd: Path | None = None, environ: dict[str, str] | None = None, torch_module: Any = None,
           probe_devices: bool = True) -> dict[str, Any]:
    """`xisa doctor`: can results made here be trusted, and do the goldens fit this toolchain (a dict)."""
    from xisa.doctor import diagnose

    return diagnose(cwd=cwd, environ=environ, torch_module=torch_module, probe_devices=probe_devices)


# --------------------------------------------------------------------------------- capturing

@dataclass
class CaptureOutcome:
    """What `capture` wrote: one spec per kernel, the hook's notes, and the command's exit code."""

    written: list[tuple[Path, int]]     # (spec file, its cases)
    notes: list[str]
    command_exit: int

    @property
    def exit_code(self) -> int:
        return self.command_exit


CAPTURE_SITE = Path(__file__).resolve().parent / "capture_site"   # the hook: a sitecustomize on PYTHONPATH


def capture(command: list[str], *, out: Path = Path("captured"), spec_names: list[str] | None = None,
            cwd: Path | None = None) -> CaptureOutcome:
    """`xisa capture -- COMMAND`: run COMMAND with the launch hook in every Python process it starts, and write
    the kernel launches it made (one case per specialization) as spec YAML in `out`, one file per kernel.
    An existing file is never replaced, and nothing is written through a link."""
    import shlex
    import shutil
    import subprocess

    from xisa.compile.standins import DTYPES
    from xisa.spec.capture import group_launches, read_records, render_spec

    if not command:
        raise UsageError("no command to run", field="COMMAND", fix="xisa capture -- python -m pytest tests/")
    names = {}
    for item in spec_names or []:
        function, sep, name = item.partition("=")
        if not sep or not function or not name:
            raise UsageError(f"{item!r} is not FUNCTION=NAME", field="--spec-name", fix="e.g. --spec-name gemm_kernel=gemm")
        names[function] = name
    cwd = Path(os.path.abspath(cwd or Path.cwd()))
    out = out if out.is_absolute() else cwd / out
    _refuse_link_on_the_way(out, cwd)
    project = load_project(cwd=cwd)
    records_dir = Path(tempfile.mkdtemp(prefix="xisa-capture-"))
    try:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(CAPTURE_SITE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["XISA_CAPTURE_RECORDS"] = str(records_dir)
        try:
            code = subprocess.run(command, cwd=cwd, env=env).returncode
        except (FileNotFoundError, PermissionError) as exc:
            raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}", field="COMMAND",
                             fix="name a program on PATH, e.g. `xisa capture -- python -m pytest`") from None
        records, notes = read_records(records_dir)
    finally:
        shutil.rmtree(records_dir, ignore_errors=True)
    code = 128 - code if code < 0 else code   # killed by a signal: the shell's convention
    kernels = group_launches(records, names=names)
    if not kernels and code == 0:
        raise UsageError("the command made no Triton kernel launch", field="COMMAND",
                         fix="run the program or tests that launch the kernels (a Python started with -E or -I "
                             "ignores PYTHONPATH, which the capture hook needs)")
    paths = [out / f"{kernel.name}.yaml" for kernel in kernels]
    for path in paths:
        if os.path.lexists(path):
            raise UsageError("a spec of that name already exists; capture never replaces a file",
                             path=display_path(path, cwd),
                             fix="remove it, capture into another folder (--out DIR), or rename the kernel "
                                 "(--spec-name FUNCTION=NEW_NAME)")
    option_backends = _option_backends()
    shown = shlex.join(command)
    written = []
    if kernels:
        out.mkdir(parents=True, exist_ok=True)
        _refuse_link_on_the_way(out, cwd)
    for kernel, path in zip(kernels, paths):
        text = render_spec(kernel, spec_dir=out, project_root=project.root, command=shown, dtype_names=set(DTYPES),
                           option_backends=option_backends)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append((path, len(kernel.launches)))
    return CaptureOutcome(written=written, notes=notes, command_exit=code)


def _refuse_link_on_the_way(folder: Path, cwd: Path) -> None:
    """`folder` and each of its existing parents below the working folder must not be a link."""
    for path in (folder, *folder.parents):
        if path == cwd or (path != folder and not path.is_relative_to(cwd)):
            break
        if os.path.islink(path):
            raise UsageError(f"is a link (to {os.readlink(path)}): capture never writes through a link",
                             path=display_path(path, cwd), fix="pass --out a real folder")


def _option_backends() -> dict[str, set[str]]:
    """Launch option -> the backends (`hip`, `cuda`) whose options dataclass has it."""
    import dataclasses as dc

    from triton.backends.amd.compiler import HIPOptions
    from triton.backends.nvidia.compiler import CUDAOptions

    owners: dict[str, set[str]] = {}
    for backend, options in (("hip", HIPOptions), ("cuda", CUDAOptions)):
        for option in dc.fields(options):
            owners.setdefault(option.name, set()).add(backend)
    return owners
