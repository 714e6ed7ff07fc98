"""`xisa compile`: cross-compile the selected cells and show what they compiled to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from xisa import api
from xisa.analyze.expect import check_key
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, NoCacheOption, QuietOption, SpecOption,
                              TimeoutOption, print_failure_lines, run_options, stderr, stdout)
from xisa.names import CellKey
from xisa.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNTRUSTED
from xisa.render.progress import progress_reporter
from xisa.render.compiled import (compile_payload, loops_payload, render_compile_markdown, render_compile_table,
                                  render_loops_text)
from xisa.render.formats import cells_phrase, error_block, grouped_by_message


def compile_command(
    arch: ArchOption = None,
    kernel: KernelOption = None,
    spec: SpecOption = None,
    count: Annotated[Optional[list[str]], typer.Option("--count", help="Mnemonic or glob to count (repeatable).")] = None,
    emit: Annotated[Optional[Path], typer.Option("--emit", help="Write every stage of every cell to DIR.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: {toolchain, cells}.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a case x target markdown table.")] = False,
    top: Annotated[int, typer.Option("--top", min=0, help="Show each cell's N most frequent instructions (0: none).")] = 5,
    jobs: JobsOption = 0,
    timeout: TimeoutOption = 600.0,
    no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    loops: Annotated[bool, typer.Option("--loops", help="Show each cell's loops and llvm-mca's estimate per loop "
                                                        "(a model, where llvm-mca knows the target).")] = False,
) -> None:
    """Cross-compile kernel cases for targets (no GPU needed) and print histograms, resources, fingerprints."""
    for pattern in count or []:
        check_key(pattern, path=None, field="--count")
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec)
    run = api.compile(selection, options=run_options(jobs, timeout, no_cache), emit=emit,
                      progress=progress_reporter)
    results, failures = run.results, run.failures
    if emit is not None:
        stderr().print(f"wrote {run.emitted} files under {emit}")
    found = api.cell_loops(results, {t.name: t for t in run.targets}) if loops else None
    if as_json:
        payload = compile_payload(results, failures, backends=run.backends)
        if found is not None:
            for cell in payload["cells"]:
                cell["loops"] = loops_payload(found.get(str(CellKey(cell["kernel"], cell["case"], cell["target"])), []))
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
    elif markdown:
        typer.echo(render_compile_markdown(results, counts=count or []), nl=False)
    elif not quiet:
        render_compile_table(stdout(), results, failures, counts=count or [], top=top,
                             isa_of={t.name: t.handler.isa for t in run.targets})
    if found is not None and not as_json:
        render_loops_text(stdout(), found, {t.name: t.handler for t in run.targets})
    print_failure_lines(run.failure_lines())
    errors = [r for r in results if not r.ok]
    for ids, message in grouped_by_message([(r.id, r.error or "") for r in errors]):
        stderr().print(Text(error_block(f"error {cells_phrase(ids)}", message), style="red"), highlight=False)
    if errors:
        raise typer.Exit(EXIT_UNTRUSTED)
    if run.failed:   # a failed expectation, or a cell that cannot launch unexpectedly
        raise typer.Exit(EXIT_REGRESSION)
    raise typer.Exit(EXIT_OK)
