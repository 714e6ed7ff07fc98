"""`xisa bless`: accept a selection's compile as its goldens, and say what a toolchain upgrade changed."""

from __future__ import annotations

from dataclasses import dataclass

from xisa.api.run import Progress, Run, compile_selection, no_progress
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace, keeps_cache_bounded
from xisa.compile.runner import RunOptions
from xisa.errors import EXIT_OK, EXIT_UNTRUSTED
from xisa.golden.bless import BlessOutcome, bless as write_goldens
from xisa.golden.store import GoldenSet, recorded_toolchain
from xisa.golden.verdict import CheckReport, build_report



@dataclass
class ToolchainUpgrade:
    """A bless under another toolchain than the goldens': what the new compile changes against the goldens
    it replaces (a report with the goldens as `base`), and both toolchains."""

    report: CheckReport
    old: dict[str, str]
    new: dict[str, str]


@dataclass
class BlessResult:
    run: Run
    outcome: BlessOutcome
    upgrade: ToolchainUpgrade | None = None
    layout: str = "compact"     # the project's golden layout, which the goldens were written in

    @property
    def exit_code(self) -> int:
        if self.outcome.skipped_errors:
            return EXIT_UNTRUSTED
        return 1 if self.run.failed else EXIT_OK


def bless_run(ws: Workspace, run: Run, *, kernel_filters: list[str] | None, lock_timeout: float = 30.0,
              record_stages: bool = False) -> BlessOutcome:
    """Write the goldens of a run; unused goldens of its selection go when every cell compiled.
    `record_stages`: only add stage fingerprints and source-line tables to the goldens whose cell is unchanged."""
    return write_goldens(run.results, golden_dir=ws.project.golden_dir, display_root=ws.project.root,
                         toolchains=run.toolchains(), stream_files=ws.project.stream_files,
                         layout=ws.project.golden_layout, material=ws.material,
                         selected_targets={t.name for t in run.targets}, kernel_filters=kernel_filters,
                         lock_timeout=lock_timeout, record_stages=record_stages)


@keeps_cache_bounded
def bless(selection: Selection, *, options: RunOptions = RunOptions(), lock_timeout: float = 30.0,
          progress: Progress = no_progress, record_stages: bool = False) -> BlessResult:
    """`xisa bless`: accept the current compile as the goldens of the selection (refused when CI is set).
    `record_stages` (`--record-stages`): accept nothing; add stage fingerprints and source-line tables to
    unchanged cells' goldens."""
    from xisa.api.check import unused_goldens
    from xisa.golden.bless import refuse_in_ci

    refuse_in_ci()
    ws = selection.workspace()
    chosen, cells = selection.cells(ws)
    # a filter that selects nothing blesses nothing, unless goldens are left there (bless removes them)
    selection.require_cells(ws, cells, goldens_left=lambda: bool(unused_goldens(ws, chosen, [],
                                                                                kernel_filters=selection.kernel)))
    run = compile_selection(ws, selection, options=options, progress=progress)
    kernel = selection.kernel
    upgrade = toolchain_upgrade(ws, run, kernel_filters=kernel)   # before the goldens it compares with are rewritten
    return BlessResult(run=run, outcome=bless_run(ws, run, kernel_filters=kernel, lock_timeout=lock_timeout,
                                                  record_stages=record_stages), upgrade=upgrade,
                       layout=ws.project.golden_layout)


def toolchain_upgrade(ws: Workspace, run: Run, *, kernel_filters: list[str] | None) -> ToolchainUpgrade | None:
    """None unless a golden of the run's cells was made with another toolchain than its cell compiled with;
    then the run against the goldens as they are (an A/B with the goldens as side A)."""
    from xisa.golden.ab import majority_toolchain

    toolchains = run.toolchains()
    old = []
    for result in run.results:
        recorded = recorded_toolchain(ws.project.golden_dir, (result.kernel, result.case, result.target))
        if recorded and any(str(recorded.get(k)) != v for k, v in toolchains[result.target].items() if k in recorded):
            old.append(recorded)
    if not old:
        return None
    old_toolchain = majority_toolchain(old)
    goldens = GoldenSet.for_results(ws.project.golden_dir, run.results, display_root=ws.project.root,
                                    material=ws.material)
    report = build_report(run.results, {}, goldens=goldens, selected_targets={t.name for t in run.targets},
                          kernel_filters=kernel_filters, scopes=[], toolchain={"triton": old_toolchain.get("triton", "")}, launches=False)
    return ToolchainUpgrade(report=report, old=old_toolchain, new=run.toolchain())
