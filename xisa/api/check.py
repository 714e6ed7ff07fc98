"""`xisa check` and `xisa report --html`: a selection's cells against their goldens, and the goldens it leaves
unused."""

from __future__ import annotations

import fnmatch
import os

from xisa.api.gate import gate
from xisa.api.judging import CheckOutcome, judge, outcome
from xisa.api.run import Progress, Run, compile_selection, no_progress
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace, keeps_cache_bounded, validate_scopes
from xisa.compile.incremental.cache import TIMINGS
from xisa.compile.runner import RunOptions
from xisa.errors import UsageError
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import UNUSED, CellVerdict, build_report
from xisa.spec.capture_kept import kept_source_notes
from xisa.spec.cases import Cell
from xisa.spec.shard import parse_shard
from xisa.spec.targets import Target


@keeps_cache_bounded
def check(selection: Selection, *, base: str | None = None, compile_base: bool = False,
          options: RunOptions = RunOptions(), progress: Progress = no_progress) -> CheckOutcome:
    """`xisa check`: every selected cell against its golden, or with `base` the PR gate (see `gate`)."""
    if base is not None:
        if selection.shard is not None:
            raise UsageError("--shard cannot be combined with --base: the gate against a base judges the whole "
                             "selection", field="--shard", fix="shard `xisa check` without --base, and run the gate once")
        return gate(base, selection, compile_base=compile_base, options=options, progress=progress)
    if compile_base:
        raise UsageError("--compile-base needs --base", field="--compile-base", fix="e.g. --base origin/main --compile-base")
    from xisa.golden.selection import describe_selection

    validate_scopes(selection.scope)
    ws = selection.workspace()
    validate_scopes(selection.scope, ws)
    refuse_live_timings(selection, ws)
    chosen, whole = selection.cells(ws, sharded=False)   # every shard's cells: what `xisa merge` must get back
    # a filter that selects nothing is no pass, unless goldens are left there to report as unused
    selection.require_cells(ws, whole, goldens_left=lambda: bool(unused_goldens(ws, chosen, [],
                                                                                kernel_filters=selection.kernel)))
    plan = selection.shard_plan(whole)   # and how they are split, so that it can tell each shard's part
    described = describe_selection(ws, arch=selection.arch, kernel=selection.kernel, cells=whole,
                                   shard_plan=plan.to_json() if plan is not None else None)
    run = compile_selection(ws, selection, options=options, golden_dirs=[(ws.project.golden_dir, "")],
                            ab_command=selection.ab_command(), progress=progress)
    report = judge(ws, run, kernel_filters=selection.kernel, scopes=selection.scope,
                   shard=parse_shard(selection.shard), selection=described, shard_plan=plan)
    checked = outcome(report, ws, selection, run)
    # a kept copy of a generated kernel module whose generator changed here: said, the verdict unchanged
    checked.failure_lines += kept_source_notes(ws.specs, search=[ws.project.root, *ws.project.pythonpath])
    return checked


def refuse_live_timings(selection: Selection, ws: Workspace) -> None:
    """--timings may not be the run's own cache's timings file: the run rewrites it as it compiles, so a shard
    run after it would split by other numbers (and `xisa merge` refuse the shards)."""
    if selection.timings is not None and os.path.abspath(selection.timings) == os.path.abspath(
            ws.project.cache_dir / TIMINGS):
        raise UsageError("is the timings file of this run's own cache, which the run rewrites: later shards would "
                         "split differently", path=str(selection.timings), field="--timings",
                         fix=f"copy it first (cp {selection.timings} timings.json) and pass the copy to every shard")


@keeps_cache_bounded
def review(selection: Selection, *, base: str | None = None, options: RunOptions = RunOptions(),
           progress: Progress = no_progress) -> CheckOutcome:
    """`xisa report --html`: the verdicts and exit code of `xisa check` (without `base`) or of the gate
    `xisa diff --base BASE` (with it), judged by the same call, so the page can never say otherwise."""
    return check(selection, base=base, options=options, progress=progress)


def unused_goldens(ws: Workspace, chosen: list[Target], cells: list[Cell], *, kernel_filters: list[str] | None,
                   cell_patterns: list[str] | None = None) -> list[CellVerdict]:
    """The goldens inside a selection (its targets, kernel filters and, if given, cell-id globs) that no
    cell of it has: what `xisa check` reports as unused. Nothing is compiled."""
    empty = Run(targets=chosen, results=[], failures={})
    goldens = GoldenSet.for_results(ws.project.golden_dir, empty.results, display_root=ws.project.root)
    report = build_report(empty.results, empty.failures, goldens=goldens,
                          selected_targets={t.name for t in chosen}, kernel_filters=kernel_filters, scopes=[], toolchain={})
    ids = {cell.id for cell in cells}
    return [v for v in report.verdicts if v.verdict == UNUSED and v.id not in ids
            and (not cell_patterns or any(fnmatch.fnmatchcase(v.id, p) for p in cell_patterns))]
