"""`xisa device`: the on-device tier on the GPUs present; every other target is skipped with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from xisa import api
from xisa.cli.options import ArchOption, JobsOption, KernelOption, SpecOption, TimeoutOption, run_options, stdout

_STYLE = {"pass": "green", "fail": "red", "error": "red", "skip": "yellow"}


def device(
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0,
    emit: Annotated[Optional[Path], typer.Option("--emit", help="Write launch and ahead-of-time stages to DIR.")] = None,
) -> None:
    """Run the cases' runtime checks on the GPU present and prove the launch compiled what xisa predicts."""
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec)
    report = api.device(selection, options=run_options(jobs, timeout, False), emit=emit)
    for line in report.not_run:   # a selection that verified nothing: diagnostics, whatever the format
        typer.echo(f"xisa: error: {line}", err=True)
    if not report.devices and not report.not_run:
        typer.echo("xisa: note: no GPU is visible, so no cell ran (name targets with --arch to make that "
                   "exit 2)", err=True)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        raise typer.Exit(report.exit_code)
    out = stdout()
    for d in report.devices:
        out.print(d.describe())
    if report.results:
        table = Table("cell", "result", "fidelity", "seconds", "detail")
        for r in report.results:
            table.add_row(r.id, Text(r.status, style=_STYLE[r.status]), r.fidelity, f"{r.seconds:.2f}",
                          Text(r.message))
        out.print(table)
    for target, reason in sorted(report.skipped_targets.items()):
        out.print(Text(f"{target}: skipped: {reason}"))
    counts = {}
    for r in report.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    equal = sum(1 for r in report.results if r.fidelity == "equal")
    out.print((", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "no cells ran")
              + f"; fidelity equal: {equal}; targets skipped: {len(report.skipped_targets)}")
    raise typer.Exit(report.exit_code)
