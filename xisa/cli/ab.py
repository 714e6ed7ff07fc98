"""`xisa ab`: the same selection under two toolchains (or knobs), compared cell by cell for every target.

`xisa ab-side` (hidden) is the half a side in another Python runs: `OTHER_PYTHON -m xisa ab-side`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.cli.check import CountOption, Format, FormatOption, OutputOption, emit_report
from xisa.cli.options import (ArchOption, JobsOption, KernelOption, NoCacheOption, QuietOption, SpecOption,
                              TimeoutOption, run_options, stderr)
from xisa.compile.worker.toolchain import parse_knobs
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED, UsageError
from xisa.fsio import write_atomic
from xisa.golden.ab import Side, side_payload
from xisa.render.progress import progress_reporter

EnvOption = "NAME=VALUE: a codegen knob set for that side only, over xisa's pinned environment (repeatable)."


def ab(
    a_golden: Annotated[bool, typer.Option("--a-golden", help="Side A is the goldens as they are (no compile).")] = False,
    a_python: Annotated[Optional[str], typer.Option(
        "--a-python", help="Side A compiles with this Python's Triton (default: the Python running xisa).")] = None,
    a_env: Annotated[Optional[list[str]], typer.Option("--a-env", help=EnvOption)] = None,
    b_python: Annotated[Optional[str], typer.Option(
        "--b-python", help="Side B compiles with this Python's Triton (default: the Python running xisa).")] = None,
    b_env: Annotated[Optional[list[str]], typer.Option("--b-env", help=EnvOption)] = None,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None,
    golden: Annotated[Optional[Path], typer.Option("--golden", help="Golden folder of --a-golden (default: golden/).")] = None,
    fmt: FormatOption = Format.text, output: OutputOption = None, count: CountOption = None,
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the HTML page to FILE.")] = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
) -> None:
    """Compile the selection as side A and as side B (another Triton, a codegen knob, or the goldens as side A)
    and compare every cell. Exit 0 every cell the same, 1 a cell changed, 2 a side failed (untrusted).

    Each side defaults to the Python running xisa with xisa's pinned knobs; at least one option must make the sides differ."""
    if a_golden and (a_python or a_env):
        raise UsageError("the goldens as they are compile nothing, so they take no Python or knob", field="--a-golden",
                         fix="drop --a-python/--a-env, or drop --a-golden")
    side_a = Side("A", golden=a_golden, python=a_python, knobs=parse_knobs(a_env or [], field="--a-env"))
    side_b = Side("B", python=b_python, knobs=parse_knobs(b_env or [], field="--b-env"))
    for side in (side_a, side_b):
        if side.python and not quiet:   # it shows no progress bar: say where the time goes
            stderr().print(f"side {side.label} compiles with {side.python}, in a process of its own", markup=False)
    outcome = api.ab(api.Selection(arch=arch, kernel=kernel, spec=spec, golden=golden), a=side_a, b=side_b,
                     options=run_options(jobs, timeout, no_cache), progress=progress_reporter)
    emit_report(outcome.report, fmt, output, counts=count or [], title="xisa ab", quiet=quiet)
    if html is not None:
        from xisa.render.html import render_html, write_html

        write_html(html, render_html(outcome.report, title="xisa ab: " + " vs ".join(
            side.describe() for side in outcome.report.sides),
            exit_note="golden = side A, head = side B", loop_estimates=api.loop_estimates(outcome.report)))
        stderr().print(f"wrote {html}", markup=False)
    raise typer.Exit(outcome.exit_code)


def ab_side(
    output: Annotated[Path, typer.Option("--output", help="Write the side's results (JSON) to FILE.")],
    knob: Annotated[Optional[list[str]], typer.Option("--knob", help="NAME=VALUE codegen knob (repeatable).")] = None,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None,
    jobs: JobsOption = 0, timeout: TimeoutOption = 600.0, no_cache: NoCacheOption = False,
) -> None:
    """One side of `xisa ab`, run by that side's Python: compile the selection and write every result whole."""
    options = run_options(jobs, timeout, no_cache, note=False)
    options.knobs = parse_knobs(knob or [], field="--knob")
    run = api.compile(api.Selection(arch=arch, kernel=kernel, spec=spec), options=options)
    payload = side_payload(run.results, run.toolchain(), run.toolchains())
    write_atomic(output, json.dumps(payload, sort_keys=True))
    raise typer.Exit(EXIT_UNTRUSTED if any(not r.ok for r in run.results) else EXIT_OK)
