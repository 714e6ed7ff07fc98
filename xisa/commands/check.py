"""`xisa check`, `xisa bless`, `xisa diff`: goldens as a CI gate and as a PR review."""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa.bless import bless as bless_goldens, refuse_in_ci
from xisa.cli import app
from xisa.commands.common import (ArchOption, JobsOption, KernelOption, NoCacheOption, QuietOption, SpecOption,
                                  TimeoutOption, stderr, stdout)
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED
from xisa.progress import progress_reporter
from xisa.report import error_block, render_check_text, render_junit, render_markdown
from xisa.runner import RunOptions
from xisa.toolchain import describe_toolchain
from xisa.verdict import CheckReport, build_report
from xisa.shard import parse_shard
from xisa.workspace import Run, compile_cells, open_workspace, select_cells


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


def _validate_scopes(scopes: list[str] | None, ws=None) -> None:
    """A bad --scope is refused before anything compiles: its syntax, and (given the workspace) a
    part that matches no known target, kernel or case."""
    from xisa.verdict import Scope, check_scopes

    if ws is None:
        for text in scopes or []:
            Scope.parse(text)
        return
    check_scopes(scopes or [], targets=sorted(ws.targets),
                 cases={spec.name: [case.name for case in spec.cases] for spec in ws.specs})


def _accept(report: CheckReport, ws, kernel: list[str] | None, spec: list[Path] | None,
            golden: Path | None) -> list[str]:
    """The `xisa bless` commands that accept what this check found changed, new or unused."""
    from xisa.report import accept_commands

    extra = [word for path in spec or [] for word in ("--spec", str(path))]
    extra += ["--golden", str(golden)] if golden is not None else []
    return accept_commands(report, kernel_filters=kernel, extra_args=extra, kernels={s.name for s in ws.specs})


def _run(ws, arch, kernel, jobs, timeout, no_cache, shard=None) -> Run:
    options = RunOptions(jobs=jobs, timeout=timeout, use_cache=not no_cache)
    chosen, cells = select_cells(ws, arch=arch, kernel=kernel, shard=parse_shard(shard))
    with progress_reporter(len(cells)) as advance:
        return compile_cells(ws, chosen, cells, options=options, progress=advance)


@app.command()
def check(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    fmt: FormatOption = Format.text, output: OutputOption = None, count: CountOption = None,
    shard: ShardOption = None, jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
) -> None:
    """CI gate: every cell against its golden. Exit 0 all well, 1 regression, 2 untrustworthy."""
    _validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    _validate_scopes(scope, ws)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache, shard)
    report = build_report(run.results, run.failures, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                          selected_targets={t.name for t in run.targets}, kernel_filters=kernel,
                          scopes=scope or [], toolchain=describe_toolchain(backends=run.backends),
                          shard=parse_shard(shard))
    _emit_report(report, fmt, output, counts=count or [], title="xisa check", quiet=quiet,
                 accept=_accept(report, ws, kernel, spec, golden))
    raise typer.Exit(report.exit_code)


def _command_line() -> str:
    """The command as typed, with absolute paths made relative so goldens carry no machine paths."""
    words = []
    for word in sys.argv[1:]:
        if os.path.isabs(word):
            word = os.path.basename(word)
        words.append(word)
    return "xisa " + shlex.join(words)


@app.command()
def bless(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, jobs: JobsOption = 0,
    timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
    lock_timeout: Annotated[float, typer.Option("--lock-timeout", help="Seconds to wait for another bless.")] = 30.0,
    quiet: QuietOption = False,
) -> None:
    """Accept the current compile as the goldens of the selection (refused when CI is set)."""
    refuse_in_ci()
    ws = open_workspace(spec=spec, golden=golden)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache)
    outcome = bless_goldens(run.results, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                            toolchain=describe_toolchain(backends=run.backends), command=_command_line(),
                            stream_files=ws.project.stream_files, selected_targets={t.name for t in run.targets},
                            kernel_filters=kernel, lock_timeout=lock_timeout)
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


@app.command()
def diff(
    base: Annotated[str, typer.Option("--base", help="Git revision to compare against, e.g. origin/main.")],
    compile_base: Annotated[bool, typer.Option("--compile-base",
                                               help="Compile the kernels at BASE in a temporary worktree.")] = False,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    fmt: FormatOption = Format.markdown, output: OutputOption = None, count: CountOption = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
) -> None:
    """This tree's cells against BASE's goldens (or BASE compiled): the PR comment."""
    from xisa import gitrev

    _validate_scopes(scope)
    ws = open_workspace(spec=spec)
    _validate_scopes(scope, ws)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache)
    toolchain = describe_toolchain(backends=run.backends)
    selected = {t.name for t in run.targets}
    title = f"xisa: ISA against `{base}`"
    if compile_base:
        from xisa.golden import golden_paths, render_golden, write_golden

        with gitrev.worktree_at(base, ws.project.root) as tree:
            relative_specs = [ws.project.display(p) for p in ws.project.spec_paths]
            base_ws = open_workspace(cwd=tree, spec=[tree / p for p in relative_specs])
            base_run = _run(base_ws, arch, kernel, jobs, timeout, no_cache)
            with tempfile.TemporaryDirectory(prefix="xisa-base-goldens-") as folder:
                base_dir = Path(folder)
                for result in base_run.results:
                    if result.ok:
                        yaml_text, stream_text = render_golden(result, toolchain=toolchain, command="base",
                                                               stream_file=True)
                        write_golden(*golden_paths(base_dir, result.kernel, result.case, result.target), yaml_text,
                                     stream_text)
                report = build_report(run.results, run.failures, golden_dir=base_dir, display_root=base_dir,
                                      selected_targets=selected, kernel_filters=kernel, scopes=scope or [],
                                      toolchain=toolchain)
    else:
        with gitrev.goldens_at(base, ws.project.golden_dir) as base_dir:
            report = build_report(run.results, run.failures, golden_dir=base_dir, display_root=base_dir,
                                  selected_targets=selected, kernel_filters=kernel, scopes=scope or [],
                                  toolchain=toolchain)
    _emit_report(report, fmt, output, counts=count or [], title=title, quiet=False)
    raise typer.Exit(EXIT_UNTRUSTED if report.exit_code == EXIT_UNTRUSTED else EXIT_OK)


@app.command()
def merge(
    reports: Annotated[list[Path], typer.Argument(help="JSON reports of `xisa check --shard I/N --format json`.")],
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    output: OutputOption = None,
) -> None:
    """Combine shard reports into one verdict; refuses missing, duplicate or mixed-toolchain shards."""
    from xisa.merge import merge_reports

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
