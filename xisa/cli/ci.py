"""What a CI workflow sizes and keys itself by: `xisa shards` (the split `xisa check --shard I/N --timings FILE`
makes, and the shard count a matrix needs) and `xisa cache key` (a digest of the configured specs and sources)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.api.shards import ShardsOutcome, plan_shards
from xisa.cli.options import ArchOption, KernelOption, SpecOption, stdout
from xisa.golden.verdict import JSON_SCHEMA_VERSION

TimingsOption = Annotated[Optional[Path], typer.Option(
    "--timings", help="Recorded seconds per cell ({cell id: seconds}): every compile records them in timings.json "
                      "of xisa's cache folder (XISA_CACHE_DIR; `xisa cache info` prints it); pass a copy. Shards are "
                      "split longest-first by them, the same on every machine (without it: by cell hash).")]


def shards_payload(outcome: ShardsOutcome) -> dict:
    return {"schema": JSON_SCHEMA_VERSION, "kind": "shards", "method": outcome.method, "count": outcome.count,
            "cores": outcome.cores, "cells": outcome.cells, "recorded_cells": outcome.recorded,
            "total_seconds": round(outcome.total_seconds, 3), "slowest_seconds": round(outcome.slowest_seconds, 3),
            "mean_seconds": round(outcome.mean_seconds, 3), "slowest_over_mean": round(outcome.slowest_over_mean, 4),
            "slowest_wall_seconds": round(outcome.slowest_wall_seconds, 3),
            "matrix": list(range(1, outcome.count + 1)),
            # the whole selection, found apart from the split: a CI checks that the shards cover it exactly, once
            "cell_ids": list(outcome.selected),
            "shards": [{"index": s.index, "cells": s.cells, "seconds": round(s.seconds, 3), "cell_ids": s.cell_ids}
                       for s in outcome.loads]}


def shards(
    count: Annotated[Optional[int], typer.Argument(help="Shards to split into (or --max-seconds).")] = None,
    timings: TimingsOption = None,
    max_seconds: Annotated[Optional[float], typer.Option(
        "--max-seconds", help="Instead of COUNT: the fewest shards whose slowest one's recorded seconds, over "
                              "--cores, fit this many wall seconds.")] = None,
    cores: Annotated[int, typer.Option("--cores", help="Cores of one runner (for --max-seconds and the wall estimate).")] = 1,
    arch: ArchOption = None, kernel: KernelOption = None, spec: SpecOption = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """How `xisa check --shard I/N` splits the selection: each shard's cells and recorded seconds, the slowest
    shard over the mean; with --max-seconds, the shard count a CI matrix needs. Nothing is compiled."""
    if fmt not in ("text", "json"):
        raise typer.BadParameter(f"{fmt!r} is not text or json", param_hint="--format")
    selection = api.Selection(arch=arch, kernel=kernel, spec=spec, timings=timings)
    outcome = plan_shards(selection, count=count, max_wall_seconds=max_seconds, cores=cores)
    if fmt == "json":
        typer.echo(json.dumps(shards_payload(outcome), indent=2))
        return
    out = stdout()
    known = f"{outcome.recorded} of {outcome.cells} cells recorded" if outcome.method == "timings" else \
        "by cell hash (no --timings): every cell weighs alike"
    out.print(f"{outcome.count} shards of {outcome.cells} cells, {outcome.total_seconds:.1f} s recorded ({known})",
              markup=False)
    for load in outcome.loads:
        out.print(f"shard {load.index}/{outcome.count}: {load.cells} cells, {load.seconds:.1f} s", markup=False)
    out.print(f"slowest shard {outcome.slowest_seconds:.1f} s, mean {outcome.mean_seconds:.1f} s: slowest/mean "
              f"{outcome.slowest_over_mean:.3f}; on {outcome.cores} core(s) the slowest takes "
              f"{outcome.slowest_wall_seconds:.1f} s", markup=False)


def cache_key(
    spec: SpecOption = None,
    show: Annotated[bool, typer.Option("--list", help="Also print what went into it: each file's SHA-256, the versions.")] = False,
) -> None:
    """A digest of the project's configured specs, sources, target files, pyproject.toml and toolchain versions,
    for a CI cache key (it never decides a verdict: every cached result is checked on its own)."""
    from xisa.api.cache_key import cache_key as project_cache_key

    digest, lines = project_cache_key(api.Selection(spec=spec).workspace())
    out = stdout()
    for line in lines if show else ():
        out.print(line, markup=False, highlight=False)
    out.print(digest, markup=False, highlight=False)
