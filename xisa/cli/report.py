"""`xisa report --html FILE`: the check (or diff) report as one self-contained HTML page for reviewers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.cli.check import ScopeOption
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, NoCacheOption, QuietOption, SpecOption,
                              TimeoutOption, print_failure_lines, run_options, stderr, stdout)
from xisa.render.html import render_html, write_html
from xisa.render.progress import progress_reporter


def report(
    html_file: Annotated[Path, typer.Option("--html", help="Write the HTML page to FILE.")],
    base: Annotated[Optional[str], typer.Option(
        "--base", help="The gate against this git revision (as `xisa diff --base`) instead of golden/.")] = None,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    title: Annotated[Optional[str], typer.Option("--title", help="Page title.")] = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
) -> None:
    """Render the isolation matrix, histograms, resource deltas and stream diffs as one HTML page.

    Without --base: the same verdicts and exit code as `xisa check`. With --base REV: the gate, the same verdicts
    and exit code as `xisa diff --base REV` (and `xisa check --base REV`) with the same --scope."""
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec, golden=golden, scope=scope)
    outcome = api.review(selection, base=base,
                         options=run_options(jobs, timeout, no_cache), progress=progress_reporter)
    page_title = title or ("xisa check" if base is None else f"xisa: ISA against {base}")
    write_html(html_file, render_html(outcome.report, title=page_title, accept=outcome.accept,
                                      loop_estimates=api.loop_estimates(outcome.report)))
    if not quiet:
        from xisa.render.review import summary_line

        stdout().print(summary_line(outcome.report), markup=False)
    stderr().print(f"wrote {html_file}", markup=False)
    print_failure_lines(outcome.failure_lines)
    raise typer.Exit(outcome.exit_code)
