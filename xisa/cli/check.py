"""`xisa check`, `xisa bless`, `xisa diff`: goldens as a CI gate and as a PR review."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.fsio import write_atomic
from xisa.names import CellKey
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, LockTimeoutOption, NoCacheOption, QuietOption,
                              SpecOption, TimeoutOption, print_failure_lines, run_options, stderr, stdout)
from xisa.golden.verdict import CheckReport
from xisa.render.progress import progress_reporter
from xisa.render.formats import cells_phrase, error_block, grouped_by_message
from xisa.render.review import render_check_text
from xisa.render.comment import MARKDOWN_MAX_CHARS, MIN_CHARS
from xisa.render.reports import render_report
from xisa.cli.ci import TimingsOption
from xisa.spec.shard import BUILDKITE_COUNT, BUILDKITE_JOB, shard_from_environment


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
ShardOption = Annotated[Optional[str], typer.Option(
    "--shard", help="Run only shard I of N: I/N. Without it (and without --base), a Buildkite step's "
                    "BUILDKITE_PARALLEL_JOB and BUILDKITE_PARALLEL_JOB_COUNT give it.")]
BaseOption = Annotated[Optional[str], typer.Option(
    "--base", help="The PR gate: judge this tree's cells against git revision BASE (e.g. origin/main) with "
                   "--scope, and hold this tree's goldens to its compile.")]
MaxCharsOption = Annotated[int, typer.Option(
    "--max-chars", min=MIN_CHARS,
    help="Markdown: at most this many characters (GitHub refuses a PR comment over 65,536); a longer report keeps "
         "its top changes and says how many cells it leaves out.")]
CompileBaseOption = Annotated[bool, typer.Option(
    "--compile-base", help="With --base: compile the kernels at BASE in a temporary worktree instead of "
                           "reading its goldens.")]


def emit_report(report: CheckReport, fmt: Format, output: Path | None, *, counts: list[str], title: str,
                quiet: bool, accept: list[str] | None = None, max_chars: int = MARKDOWN_MAX_CHARS) -> None:
    """A check, gate or A/B report in `fmt` (`xisa.render.reports`' table), to stdout or written to `output`
    (`xisa check`, `diff`, `ab`). Text on stdout is printed to the terminal's console (colour, its width)."""
    if fmt is Format.text and output is None:
        render_check_text(stdout(), report, counts=counts, quiet=quiet, accept=accept)
        return
    text = render_report(report, fmt.value, counts=counts, title=title, quiet=quiet, accept=accept,
                         max_chars=max_chars)
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(output, text, mode=0o666)  # a report is meant to be read: not mkstemp's private 0600
        stderr().print(f"wrote {output}")


def check(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    base: BaseOption = None, compile_base: CompileBaseOption = False,
    fmt: FormatOption = Format.text, output: OutputOption = None, count: CountOption = None,
    shard: ShardOption = None, timings: TimingsOption = None, jobs: JobsOption = 0, timeout: TimeoutOption = 600.0,
    no_cache: NoCacheOption = False, quiet: QuietOption = False, max_chars: MaxCharsOption = MARKDOWN_MAX_CHARS,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
) -> None:
    """CI gate: every cell against its golden (or, with --base, against a base revision). Exit 0 all well,
    1 regression, 2 untrustworthy."""
    if shard is None and base is None:
        shard = shard_from_environment(os.environ)
        if shard is not None:
            stderr().print(f"xisa: note: --shard {shard} from {BUILDKITE_JOB} and {BUILDKITE_COUNT}", markup=False,
                           highlight=False)
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec, golden=golden, scope=scope, shard=shard,
                              timings=timings)
    outcome = api.check(selection, base=base, compile_base=compile_base, options=run_options(jobs, timeout, no_cache),
                        progress=progress_reporter)
    if shard is not None:
        from xisa.api.shards import shard_balance_note

        note = shard_balance_note((outcome.report.selection or {}).get("shard_plan"), int(shard.split("/")[0]))
        stderr().print(f"xisa: note: {note or 'shards split by cell hash, balanced by count only (--timings FILE splits them by recorded seconds)'}",
                       markup=False, highlight=False)
    title = "xisa check" if base is None else f"xisa: ISA against `{base}`"
    emit_report(outcome.report, fmt, output, counts=count or [], title=title, quiet=quiet, accept=outcome.accept,
                max_chars=max_chars)
    print_failure_lines(outcome.failure_lines)
    raise typer.Exit(outcome.exit_code)


def bless(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, jobs: JobsOption = 0,
    timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
    lock_timeout: LockTimeoutOption = 30.0,
    quiet: QuietOption = False,
    record_stages: Annotated[bool, typer.Option(
        "--record-stages", help="Bless nothing: only add stage fingerprints and source-line tables to the goldens "
                                "whose cell is unchanged "
                                "(changed, new and unused cells are listed and left as they are).")] = False,
) -> None:
    """Accept the current compile as the goldens of the selection (refused when CI is set)."""
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec, golden=golden)
    blessed = api.bless(selection, options=run_options(jobs, timeout, no_cache),
                        lock_timeout=lock_timeout, progress=progress_reporter, record_stages=record_stages)
    outcome = blessed.outcome
    out = stdout()
    for path in outcome.recovered:
        out.print(f"recovered {path} (left by an interrupted bless)")
    if not quiet:
        for path in outcome.written:
            out.print(f"wrote {path}")
        for path in outcome.removed:
            out.print(f"removed {path}")
    if record_stages:
        if not quiet:
            for path in outcome.stages_recorded:
                out.print(f"recorded stages and source lines in {path}")
        for cell_id in outcome.left:
            out.print(f"left {cell_id}: its cell changed or has no golden (bless it without --record-stages)")
        out.print(f"{len(outcome.stages_recorded)} given stage fingerprints and source lines, "
                  f"{len(outcome.unchanged)} unchanged, "
                  f"{len(outcome.left)} left")
    else:
        if outcome.migrated:
            layout = blessed.layout
            out.print(f"migrated {len(outcome.migrated)} goldens to the {layout} layout (golden_layout = \"{layout}\"): "
                      "same records and fingerprints, "
                      + ("stream and source lines now named by SHA-256, kept in xisa's cache on this machine"
                         if layout == "compact" else "stream files and source lines written beside them"))
        out.print(f"{len(outcome.written)} written, "
                  + (f"{len(outcome.migrated)} migrated, " if outcome.migrated else "")
                  + f"{len(outcome.unchanged)} unchanged, {len(outcome.removed)} removed")
    if blessed.upgrade is not None:   # goldens of another toolchain rewritten: say what changed, for the commit
        from xisa.render.review import upgrade_commit_message

        out.print("\nsuggested commit message:\n", markup=False)
        out.print(upgrade_commit_message(blessed.upgrade), markup=False, highlight=False, soft_wrap=True)
    err = stderr()
    failed = [(r.id, r.error or "") for r in blessed.run.results if not r.ok]
    for ids, message in grouped_by_message(failed):
        err.print(error_block(f"error {cells_phrase(ids)} (no golden written)", message), markup=False)
    print_failure_lines(blessed.run.failure_lines())
    raise typer.Exit(blessed.exit_code)


def diff(
    base: Annotated[str, typer.Option("--base", help="Git revision to judge against, e.g. origin/main.")],
    compile_base: CompileBaseOption = False,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    fmt: FormatOption = Format.markdown, output: OutputOption = None, count: CountOption = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False, max_chars: MaxCharsOption = MARKDOWN_MAX_CHARS,
) -> None:
    """The PR gate and its comment: this tree against BASE, judged by --scope (markdown by default).

    Exit 1 when a cell outside the scope changed, appeared or disappeared since BASE, or this tree's
    goldens disagree with its compile; 2 when the result cannot be trusted; 0 otherwise. The same as
    `xisa check --base BASE`."""
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec, scope=scope)
    outcome = api.gate(base, selection, compile_base=compile_base, options=run_options(jobs, timeout, no_cache),
                       progress=progress_reporter)
    emit_report(outcome.report, fmt, output, counts=count or [], title=f"xisa: ISA against `{base}`", quiet=quiet,
                accept=outcome.accept, max_chars=max_chars)
    print_failure_lines(outcome.failure_lines)
    raise typer.Exit(outcome.exit_code)


def merge(
    reports: Annotated[list[Path], typer.Argument(help="JSON reports of `xisa check --shard I/N --format json`.")],
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    output: OutputOption = None,
) -> None:
    """Combine shard reports into one verdict; refuses shards that are not one complete, consistent selection."""
    from xisa.golden.merge import merge_reports
    from xisa.golden.report_json import dumps

    merged = merge_reports(list(reports))
    if fmt == "json":
        text = dumps(merged)
    else:
        lines = [f"{c['verdict']}: {CellKey(c['kernel'], c['case'], c['target'])}"
                 + (f": {c['message']}" if c["verdict"] == "cannot-launch" else "")   # names the resource and limit
                 for c in merged["cells"] if c["verdict"] != "same"]
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
