"""`xisa check`, `xisa bless`, `xisa diff`: goldens as a CI gate and as a PR review."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa.golden.bless import bless as bless_goldens, refuse_in_ci
from xisa.cli import app
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, LockTimeoutOption, NoCacheOption, QuietOption,
                                  SpecOption, TimeoutOption, stderr, stdout)
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED, UsageError
from xisa.render.progress import progress_reporter
from xisa.render.report import error_block, render_check_text, render_junit, render_markdown
from xisa.compile.runner import RunOptions
from xisa.compile.toolchain import describe_toolchain
from xisa.golden.verdict import CheckReport, build_report
from xisa.golden.selection import describe_selection
from xisa.spec.shard import parse_shard
from xisa.workspace import Run, check_golden_toolchains, compile_cells, open_workspace, select_cells


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    junit = "junit"


ScopeOption = Annotated[Optional[list[str]], typer.Option(
    "--scope", help="TARGET[:KERNEL[:CASE]] globs allowed to change (repeatable).")]
FormatOption = Annotated[Format, typer.Option("--format", help="Output format.")]
OutputOption = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report to FILE.")]
CountOption = Annotated[Optional[list[str]], typer.Option("--count", help="Mnemonic or glob column (repeatable).")]
ShardOption = Annotated[Optional[str], typer.Option("--shard", help="Run only shard I of N: I/N.")]
BaseOption = Annotated[Optional[str], typer.Option(
    "--base", help="The PR gate: judge this tree's cells against git revision BASE (e.g. origin/main) with "
                   "--scope, and hold this tree's goldens to its compile.")]
CompileBaseOption = Annotated[bool, typer.Option(
    "--compile-base", help="With --base: compile the kernels at BASE in a temporary worktree instead of "
                           "reading its goldens.")]


def _emit_report(report: CheckReport, fmt: Format, output: Path | None, *, counts: list[str], title: str,
                 quiet: bool, accept: list[str] | None = None) -> None:
    if fmt is Format.text and output is None:
        render_check_text(stdout(), report, counts=counts, quiet=quiet, accept=accept)
        return
    if fmt is Format.text:
        from io import StringIO

        from rich.console import Console

        buffer = StringIO()
        render_check_text(Console(file=buffer, width=200, no_color=True), report, counts=counts, quiet=quiet,
                          accept=accept)
        text = buffer.getvalue()
    elif fmt is Format.json:
        payload = report.to_json()
        if accept is not None:
            payload["accept"] = accept
        text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    elif fmt is Format.markdown:
        text = render_markdown(report, counts=counts, title=title, accept=accept)
    else:
        text = render_junit(report)
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be read
        os.replace(tmp, output)
        stderr().print(f"wrote {output}")


def _validate_scopes(scopes: list[str] | None, ws=None, *, also: list[tuple[str, str, str]] = ()) -> None:
    """A bad --scope is refused before anything compiles: its syntax, and (given the workspace) a
    part that matches no known target, kernel or case; `also` adds (kernel, case, target) names that
    only a base revision has."""
    from xisa.golden.verdict import Scope, check_scopes

    if ws is None:
        for text in scopes or []:
            Scope.parse(text)
        return
    targets = set(ws.targets) | {target for _, _, target in also}
    cases = {spec.name: {case.name for case in spec.cases} for spec in ws.specs}
    for kernel, case, _ in also:
        cases.setdefault(kernel, set()).add(case)
    check_scopes(scopes or [], targets=sorted(targets), cases={k: sorted(v) for k, v in cases.items()})


def _accept(report: CheckReport, ws, kernel: list[str] | None, spec: list[Path] | None,
            golden: Path | None) -> list[str]:
    """The `xisa bless` commands that accept what this check found changed, new or unused."""
    from xisa.render.report import accept_commands

    extra = [word for path in spec or [] for word in ("--spec", str(path))]
    extra += ["--golden", str(golden)] if golden is not None else []
    return accept_commands(report, kernel_filters=kernel, extra_args=extra, kernels={s.name for s in ws.specs})


def _run(ws, arch, kernel, jobs, timeout, no_cache, shard=None, *, golden_dirs=()) -> Run:
    """Select and compile. `golden_dirs` (folder, label) are checked for another toolchain first, so a
    mismatch is one line before any compile, not a report after all of them."""
    options = RunOptions(jobs=jobs, timeout=timeout, use_cache=not no_cache)
    chosen, cells = select_cells(ws, arch=arch, kernel=kernel, shard=parse_shard(shard))
    for folder, label in golden_dirs:
        check_golden_toolchains(cells, folder, display_root=ws.project.root if not label else folder.parent,
                                label=label)
    with progress_reporter(len(cells)) as advance:
        return compile_cells(ws, chosen, cells, options=options, progress=advance)


@app.command()
def check(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    base: BaseOption = None, compile_base: CompileBaseOption = False,
    fmt: FormatOption = Format.text, output: OutputOption = None, count: CountOption = None,
    shard: ShardOption = None, jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
) -> None:
    """CI gate: every cell against its golden (or, with --base, against a base revision). Exit 0 all well,
    1 regression, 2 untrustworthy."""
    if base is not None:
        if shard is not None:
            raise UsageError("--shard cannot be combined with --base: the gate against a base judges the whole "
                             "selection", field="--shard", fix="shard `xisa check` without --base, and run the gate once")
        report, accept = _gate(base, compile_base=compile_base, arch=arch, kernel=kernel, spec=spec, scope=scope,
                               jobs=jobs, timeout=timeout, no_cache=no_cache, golden=golden)
        _emit_report(report, fmt, output, counts=count or [], title=f"xisa: ISA against `{base}`", quiet=quiet,
                     accept=accept)
        raise typer.Exit(report.exit_code)
    if compile_base:
        raise UsageError("--compile-base needs --base", field="--compile-base", fix="e.g. --base origin/main --compile-base")
    _validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    _validate_scopes(scope, ws)
    _, whole = select_cells(ws, arch=arch, kernel=kernel)   # every shard's cells: what `xisa merge` must get back
    selection = describe_selection(ws, arch=arch, kernel=kernel, cells=whole)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache, shard, golden_dirs=[(ws.project.golden_dir, "")])
    report = build_report(run.results, run.failures, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                          selected_targets={t.name for t in run.targets}, kernel_filters=kernel,
                          scopes=scope or [], toolchain=describe_toolchain(backends=run.backends),
                          shard=parse_shard(shard), selection=selection)
    _emit_report(report, fmt, output, counts=count or [], title="xisa check", quiet=quiet,
                 accept=_accept(report, ws, kernel, spec, golden))
    raise typer.Exit(report.exit_code)


@app.command()
def bless(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, jobs: JobsOption = 0,
    timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
    lock_timeout: LockTimeoutOption = 30.0,
    quiet: QuietOption = False,
) -> None:
    """Accept the current compile as the goldens of the selection (refused when CI is set)."""
    refuse_in_ci()
    ws = open_workspace(spec=spec, golden=golden)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache)
    outcome = bless_goldens(run.results, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                            toolchains=run.toolchains(), stream_files=ws.project.stream_files,
                            selected_targets={t.name for t in run.targets}, kernel_filters=kernel,
                            lock_timeout=lock_timeout)
    out = stdout()
    for path in outcome.recovered:
        out.print(f"recovered {path} (left by an interrupted bless)")
    if not quiet:
        for path in outcome.written:
            out.print(f"wrote {path}")
        for path in outcome.removed:
            out.print(f"removed {path}")
    out.print(f"{len(outcome.written)} written, {len(outcome.unchanged)} unchanged, {len(outcome.removed)} removed")
    err = stderr()
    for result in run.results:
        if not result.ok:
            err.print(error_block(f"error {result.id} (no golden written)", result.error or ""), markup=False)
    for cell_id, fails in run.failures.items():
        for failure in fails:
            err.print(f"expectation failed {cell_id}: {failure}", markup=False)
    if outcome.skipped_errors:
        raise typer.Exit(EXIT_UNTRUSTED)
    raise typer.Exit(1 if any(run.failures.values()) else EXIT_OK)


def _gate(base: str, *, compile_base: bool, arch, kernel, spec, scope, jobs, timeout, no_cache,
          golden: Path | None = None) -> tuple[CheckReport, list[str]]:
    """This tree against BASE: its goldens (read from git) or its kernels (compiled in a worktree), and
    the `xisa bless` commands that bring this tree's stale goldens in line. Everything that can be refused
    is refused before the first compile: a filter, the scope, the revision, goldens of another toolchain
    at either end."""
    from xisa.spec import gitrev
    from xisa.golden.gate import base_record, judge_against_base
    from xisa.golden.store import list_goldens

    for flag, value in (("--arch", arch), ("--kernel", kernel)):
        if value:   # a gate over part of the cells would pass whatever changed in the rest
            raise UsageError(f"{flag} cannot narrow the gate against a base: the cells it leaves out would not be "
                             "judged", field=flag, fix=f"drop it (the gate judges every cell); to look at a subset, "
                                                      f"run `xisa check {flag} ...` without --base")
    _validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    commit = gitrev.resolve(base, ws.project.root)
    with contextlib.ExitStack() as stack:
        base_errors: dict[str, str] = {}
        if compile_base:
            base_side = _open_base(stack, ws, commit, spec=spec)
            _validate_scopes(scope, ws, also=[(c.kernel.name, c.case, c.target.name) for c in base_side[-1]])
            run = _run(ws, None, None, jobs, timeout, no_cache, golden_dirs=[(ws.project.golden_dir, "")])
            base_dir, base_errors = _compile_base(stack, *base_side, jobs=jobs, timeout=timeout, no_cache=no_cache)
        else:
            base_dir = stack.enter_context(gitrev.goldens_at(base, ws.project, golden=golden))
            # A scope may name what only the base has: a removed kernel, a renamed case, a dropped target.
            _validate_scopes(scope, ws, also=list_goldens(base_dir))
            run = _run(ws, None, None, jobs, timeout, no_cache,
                       golden_dirs=[(ws.project.golden_dir, ""), (base_dir, f"{base}:")])
        report = judge_against_base(run.results, run.failures, base=base_record(base, commit, compiled=compile_base),
                                    base_dir=base_dir, base_errors=base_errors, head_golden_dir=ws.project.golden_dir,
                                    display_root=ws.project.root, selected_targets={t.name for t in run.targets},
                                    scopes=scope or [], toolchain=describe_toolchain(backends=run.backends))
    stale = dataclasses.replace(report, verdicts=report.stale_goldens, stale_goldens=[], base=None)
    return report, _accept(stale, ws, None, spec, golden)


def _open_base(stack: contextlib.ExitStack, ws, commit: str, *, spec: list[Path] | None):
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


def _compile_base(stack: contextlib.ExitStack, tree: Path, root: Path, base_ws, chosen, cells, *, jobs, timeout,
                  no_cache) -> tuple[Path, dict[str, str]]:
    """Compile the base's cells in its worktree, imports resolved there, and render the results as goldens
    in a temporary folder. Returns that folder and the base cells that failed."""
    from xisa.spec import gitrev
    from xisa.golden.store import golden_paths, render_golden, write_golden

    with gitrev.imports_from(tree, root):
        errors: dict[str, str] = {}
        for spec in {c.kernel.name: c.kernel for c in cells}.values():
            outside = spec.module and gitrev.module_outside(spec.module, tree)
            if outside:
                for cell in (c for c in cells if c.kernel is spec):
                    errors[cell.id] = (f"module {spec.module!r} resolves to {outside}, outside the base worktree "
                                       "(an editable install of this checkout?)")
        cells = [c for c in cells if c.id not in errors]
        options = RunOptions(jobs=jobs, timeout=timeout, use_cache=not no_cache)
        with progress_reporter(len(cells)) as advance:
            base_run = compile_cells(base_ws, chosen, cells, options=options, progress=advance)
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


@app.command()
def diff(
    base: Annotated[str, typer.Option("--base", help="Git revision to judge against, e.g. origin/main.")],
    compile_base: CompileBaseOption = False,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    fmt: FormatOption = Format.markdown, output: OutputOption = None, count: CountOption = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
) -> None:
    """The PR gate and its comment: this tree against BASE, judged by --scope (markdown by default).

    Exit 1 when a cell outside the scope changed, appeared or disappeared since BASE, or this tree's
    goldens disagree with its compile; 2 when the result cannot be trusted; 0 otherwise. The same as
    `xisa check --base BASE`."""
    report, accept = _gate(base, compile_base=compile_base, arch=arch, kernel=kernel, spec=spec, scope=scope,
                           jobs=jobs, timeout=timeout, no_cache=no_cache)
    _emit_report(report, fmt, output, counts=count or [], title=f"xisa: ISA against `{base}`", quiet=quiet,
                 accept=accept)
    raise typer.Exit(report.exit_code)


@app.command()
def merge(
    reports: Annotated[list[Path], typer.Argument(help="JSON reports of `xisa check --shard I/N --format json`.")],
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    output: OutputOption = None,
) -> None:
    """Combine shard reports into one verdict; refuses shards that are not one complete, consistent selection."""
    from xisa.golden.merge import merge_reports

    merged = merge_reports(list(reports))
    if fmt == "json":
        text = json.dumps(merged, indent=2, sort_keys=True) + "\n"
    else:
        lines = [f"{c['verdict']}: {c['kernel']}:{c['case']}@{c['target']}" for c in merged["cells"]
                 if c["verdict"] != "same"]
        lines += [f"untrusted: {p}" for p in merged["problems"]]
        if merged["isolation_violated"]:
            lines.append("isolation violated: " + ", ".join(merged["isolation_violated"]))
        lines.append(", ".join(f"{k}: {v}" for k, v in merged["counts"].items()) + f" ({len(merged['cells'])} cells)")
        text = "\n".join(lines) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
    raise typer.Exit(merged["exit_code"])
