"""`xisa export`: the selected cells as the Triton cache entries a launch looks up; `--verify DIR` on the deploying
machine. The work is `xisa.api.export`'s; this file parses and prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from xisa.api.export import export, verify
from xisa.api.selection import Selection
from xisa.cli.options import ArchOption, JobsOption, KernelOption, SpecOption, run_options, stderr, stdout
from xisa.errors import UsageError
from xisa.names import CellKey


def export_command(
    arch: ArchOption = None,
    kernel: KernelOption = None,
    spec: SpecOption = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The bundle's folder (empty or new); "
                                                   "with --tar, the archive (.tar, .tar.gz).")] = None,
    tar: Annotated[bool, typer.Option("--tar", help="Write one archive instead of a folder.")] = False,
    deploy_dir: Annotated[Optional[Path], typer.Option(
        "--deploy-dir", help="The TRITON_CACHE_DIR the bundle will be used as on the deploying machine "
                             "(default: the -o folder itself).")] = None,
    verify_dir: Annotated[Optional[Path], typer.Option(
        "--verify", help="Say, per cell of the bundle in DIR, whether this machine's Triton looks it up; "
                         "exports nothing.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    jobs: JobsOption = 0,
) -> None:
    """Write what a launch on each target's GPU looks up in Triton's cache, for the selected cells."""
    if verify_dir is not None:
        if output is not None or tar or deploy_dir is not None or arch or kernel or spec:
            raise UsageError("--verify reads a bundle: it takes no selection or output options", field="--verify",
                             fix="xisa export --verify DIR")
        _verify(verify_dir, as_json)
    if output is None:
        raise UsageError("names no bundle to write", field="-o", fix="add -o DIR (or -o FILE.tar.gz --tar)")
    outcome = export(Selection(arch=arch, kernel=kernel, spec=spec), output=output, deploy_dir=deploy_dir, tar=tar,
                     options=run_options(jobs, 600.0, False))
    manifest = outcome.manifest
    if as_json:
        typer.echo(json.dumps({"schema": 1, "kind": "export", "output": str(outcome.output), "errors": outcome.errors,
                               "manifest": manifest}, indent=2, sort_keys=True))
    else:
        entries = len({cell["folder"] for cell in manifest["cells"]})
        stdout().print(f"wrote {len(manifest['cells'])} cells ({entries} Triton cache entries) to {outcome.output}; "
                       f"Triton {manifest['toolchain'].get('triton')}, Python {manifest['toolchain']['python']['version']}; "
                       f"use as TRITON_CACHE_DIR={manifest['deploy_dir']}", markup=False)
    err = stderr()
    for line in outcome.notes:
        err.print(f"xisa: note: {line}", markup=False, highlight=False)
    for line in outcome.errors:
        err.print(Text(f"error {line}", style="red"), highlight=False)
    raise typer.Exit(outcome.exit_code)


def _verify(folder: Path, as_json: bool) -> None:
    outcome = verify(folder)
    if as_json:
        typer.echo(json.dumps({"schema": 1, "kind": "export-verify", "folder": str(folder), "found": outcome.found,
                               "toolchain": outcome.toolchain, "cells": outcome.cells}, indent=2, sort_keys=True))
        raise typer.Exit(outcome.exit_code)
    out = stdout()
    for cell in outcome.cells:
        name = str(CellKey(cell["kernel"], cell["case"], cell["target"]))
        if cell["found"]:
            out.print(Text.assemble((name, ""), (" found", "green"), f" under {cell['key'][:16]}..."))
        else:
            out.print(Text.assemble((name, ""), (" missed", "red"), f": {cell['reason']}"))
    out.print(f"{outcome.found} of {len(outcome.cells)} cells would be found by this machine's Triton "
              f"{outcome.toolchain['triton']} (Python {outcome.toolchain['python']})", markup=False)
    raise typer.Exit(outcome.exit_code)
