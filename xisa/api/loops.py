"""Loops of compiled cells, with llvm-mca's estimate of each where asked: for `xisa compile --loops` and the page."""

from __future__ import annotations

from pathlib import Path

from xisa.analyze.loops import Loop, analysis_loops
from xisa.compile.tools.mca import Estimate, estimate_loop
from xisa.compile.worker.result import CellResult
from xisa.golden.verdict import CheckReport
from xisa.spec.project import load_project
from xisa.spec.targets import Target, load_targets


def cell_loops(results: list[CellResult], targets: dict[str, Target], *, estimate: bool = True
               ) -> dict[str, list[tuple[Loop, Estimate | str | None]]]:
    """Each compiled cell's loops (`xisa.analyze.loops`), with llvm-mca's estimate of each where asked
    (`xisa.compile.tools.mca`: an `Estimate`, or one line saying why there is none)."""
    found: dict[str, list[tuple[Loop, Estimate | str | None]]] = {}
    for result in results:
        if not result.ok or result.analysis is None:
            continue
        target = targets.get(result.target)
        found[result.id] = [(loop, estimate_loop(loop, triple=target.handler.mca_triple, cpu=str(target.arch))
                             if estimate and target is not None else None)
                            for loop in analysis_loops(result.analysis)]
    return found


def loop_estimates(report: CheckReport, *, cwd: Path | None = None) -> dict[tuple[str, str, str], str]:
    """llvm-mca's estimate (or why there is none) of each changed loop of the report, for the HTML page:
    (cell id, function, header) -> one line. Computed here, where it is shown, never in a check."""
    changed = [v for v in report.verdicts if v.delta and v.delta.loops and v.head is not None]
    if not changed:
        return {}
    project = load_project(cwd=cwd)
    targets = load_targets(list(project.target_dirs), root=project.root)
    estimates = {}
    for verdict in changed:
        target = targets.get(verdict.target)
        for change in verdict.delta.loops:
            if change.head is None or target is None:
                continue
            said = estimate_loop(change.head, triple=target.handler.mca_triple, cpu=str(target.arch))
            estimates[(verdict.id, change.head.function, change.head.header)] = said if isinstance(said, str) \
                else said.text()
    return estimates
