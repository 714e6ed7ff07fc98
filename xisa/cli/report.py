"""`xisa report --html FILE`: the check (or diff) report as one self-contained HTML page for reviewers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa.cli import app
from xisa.cli.check import ScopeOption, _accept, _run, _validate_scopes
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, NoCacheOption, QuietOption, SpecOption,
                                  TimeoutOption, stderr, stdout)
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED
from xisa.render.html import render_html, write_html
from xisa.compile.toolchain import describe_toolchain
from xisa.golden.verdict import build_report
from xisa.workspace import open_workspace


@app.command()
def report(
    html_file: Annotated[Path, typer.Option("--html", help="Write the HTML page to FILE.")],
    base: Annotated[Optional[str], typer.Option(
        "--base", help="Compare against this git revision's goldens (as `xisa diff`) instead of golden/.")] = None,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None, scope: ScopeOption = None,
    title: Annotated[Optional[str], typer.Option("--title", help="Page title.")] = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder (default: golden/).")] = None,
) -> None:
    """Render the isolation matrix, histograms, resource deltas and stream diffs as one HTML page.

    Without --base: the same verdicts and exit code as `xisa check`. With --base REV: as `xisa diff`
    (exit 0 unless the result cannot be trusted)."""
    _validate_scopes(scope)
    ws = open_workspace(spec=spec, golden=golden)
    _validate_scopes(scope, ws)
    run = _run(ws, arch, kernel, jobs, timeout, no_cache)
    toolchain = describe_toolchain(backends=run.backends)
    common = dict(selected_targets={t.name for t in run.targets}, kernel_filters=kernel, scopes=scope or [],
                  toolchain=toolchain)
    if base is None:
        result = build_report(run.results, run.failures, golden_dir=ws.project.golden_dir,
                              display_root=ws.project.root, **common)
        page_title = title or "xisa check"
        code, note = result.exit_code, ""
        accept = _accept(result, ws, kernel, spec, golden)
    else:
        from xisa.spec import gitrev
        with gitrev.goldens_at(base, ws.project, golden=golden) as base_dir:
            result = build_report(run.results, run.failures, golden_dir=base_dir, display_root=base_dir, **common)
        page_title = title or f"xisa: ISA against {base}"
        code = EXIT_UNTRUSTED if result.exit_code == EXIT_UNTRUSTED else EXIT_OK
        note = f"against --base {base} this command reports changes and fails only when they cannot be trusted"
        accept = None
    write_html(html_file, render_html(result, title=page_title, exit_code=code, exit_note=note, accept=accept))
    if not quiet:
        from xisa.render.report import summary_line

        stdout().print(summary_line(result), markup=False)
    stderr().print(f"wrote {html_file}", markup=False)
    raise typer.Exit(code)
