"""`xisa ab`: a selection compiled as side A and as side B (this Python, another Python, each with its codegen
knobs; or side A the goldens as they are), compared cell by cell."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any

from xisa.api.run import Progress, compile_cells, no_progress
from xisa.api.selection import Selection
from xisa.api.side import SideProcess
from xisa.api.workspace import keeps_cache_bounded
from xisa.compile.worker.result import CellResult
from xisa.compile.runner import RunOptions
from xisa.compile.worker.toolchain import check_knobs_read
from xisa.errors import ToolchainError, UsageError
from xisa.golden.store import GoldenSet, recorded_toolchain
from xisa.names import display_path



@dataclass
class AbOutcome:
    """`xisa ab`: the comparison (side A as the goldens, side B as the compile) and the exit code: 0 every cell
    the same, 1 a cell changed (or, against the goldens, has none or has no cell), 2 a side failed."""

    report: Any      # xisa.golden.ab.AbReport

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


@keeps_cache_bounded
def ab(selection: Selection, *, a, b, options: RunOptions = RunOptions(), progress: Progress = no_progress
       ) -> AbOutcome:
    """`xisa ab`: the selection compiled as side A and as side B (`xisa.golden.ab.Side`: this Python, another
    Python, each with its codegen knobs; or side A the goldens as they are), compared cell by cell.

    The sides compile one after the other, each with every core (a side in another Python in a process of its
    own); each reuses the result cache."""
    from xisa.golden.ab import judge_ab, majority_toolchain
    from xisa.golden.selection import describe_selection

    if b.golden:
        raise UsageError("side B is compiled; only side A can be the goldens", field="--b-golden",
                         fix="swap the sides: --a-golden")
    if a.compiles_like(b):
        raise UsageError("both sides compile with the same Python and the same knobs: nothing could differ",
                         field="--b-python", fix="give side B another Python (--b-python PATH) or a knob "
                                                 "(--b-env NAME=VALUE), or compare with the goldens (--a-golden)")
    ws = selection.workspace()
    chosen, cells = selection.cells(ws)
    selection.require_cells(ws, cells)
    described = describe_selection(ws, arch=selection.arch, kernel=selection.kernel, cells=cells)
    sides = (a, b)
    for side in sides:   # a typo'd knob would read `same` everywhere (another Python checks its own)
        if not side.python:
            check_knobs_read(side.knobs, field=f"--{side.label.lower()}-env")
    compiled: dict[str, tuple[list[CellResult], dict[str, str], dict[str, dict[str, str]]]] = {}
    with contextlib.ExitStack() as stack:
        # One side after the other, each with every core: two pools at once on the same cores cost more than
        # the two compiles (measured 1.2x on 2 cores), and a side found in the cache costs nothing either way.
        for side in sides:
            if not side.golden and not side.python:
                run = compile_cells(ws, chosen, cells, options=dataclasses.replace(options, knobs=dict(side.knobs)),
                                    progress=progress)
                compiled[side.label] = (run.results, run.toolchain(), run.toolchains())
        for side in sides:
            if side.python:
                child = SideProcess(side, selection, options=options,
                                    field=f"--{side.label.lower()}-python", cache_dir=ws.project.cache_dir)
                stack.callback(child.close)
                compiled[side.label] = child.results()
        wanted = [cell.id for cell in cells]
        for label, (results, _, _) in compiled.items():   # the other Python selected what this one did
            if sorted(r.id for r in results) != sorted(wanted):
                raise ToolchainError(f"side {label} compiled other cells than this selection", field=f"--{label.lower()}-python",
                                     fix="run both sides with the same xisa checkout")
            order = {cell_id: i for i, cell_id in enumerate(wanted)}
            results.sort(key=lambda r: order[r.id])
        for side in sides:
            if side.label in compiled:
                side.toolchain = compiled[side.label][1]
    a_errors: dict[str, str] = {}
    b_results = compiled[b.label][0]
    if a.golden:
        a.golden_dir = display_path(ws.project.golden_dir, ws.project.root) + "/"
        recorded = [recorded_toolchain(ws.project.golden_dir, (c.kernel.name, c.case, c.target.name)) for c in cells]
        a.toolchain = majority_toolchain([t for t in recorded if t])
        a_goldens = GoldenSet.for_results(ws.project.golden_dir, b_results, display_root=ws.project.root,
                                          material=ws.material)
    else:   # side A's compile judged as the goldens bless would write for it, in memory
        results, _, toolchains = compiled[a.label]
        a_errors = {r.id: r.error or "compile failed" for r in results if not r.ok}
        a_goldens = GoldenSet.of_results(results, toolchains)
    report = judge_ab(b_results, a_goldens=a_goldens, a_errors=a_errors, a_is_goldens=a.golden,
                      selected_targets={t.name for t in chosen}, kernel_filters=selection.kernel,
                      sides=[a, b], selection=described)
    return AbOutcome(report=report)
