"""A run judged against goldens: the report, and the `xisa bless` commands that accept what it found."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xisa.api.run import Run
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import CheckReport, build_report
from xisa.spec.shard import ShardPlan



@dataclass
class CheckOutcome:
    """A report, the `xisa bless` commands that accept what it found (None: none offered), and the compile's
    failed expectations as lines (`Run.failure_lines`)."""

    report: CheckReport
    accept: list[str] | None
    failure_lines: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """The report's own verdict (`CheckReport.exit_code`): no command exits with another than its renderers state."""
        return self.report.exit_code


def judge(ws: Workspace, run: Run, *, kernel_filters: list[str] | None, scopes: list[str] | None,
          golden_dir: Path | None = None, display_root: Path | None = None, shard: tuple[int, int] | None = None,
          selection: dict[str, Any] | None = None, shard_plan: ShardPlan | None = None) -> CheckReport:
    """The run's cells against goldens (this tree's unless `golden_dir` names others)."""
    goldens = GoldenSet.for_results(golden_dir or ws.project.golden_dir, run.results,
                                    display_root=display_root or ws.project.root, material=ws.material)
    return build_report(run.results, run.failures, goldens=goldens, selected_targets={t.name for t in run.targets},
                        kernel_filters=kernel_filters, scopes=scopes or [], toolchain=run.toolchain(), shard=shard,
                        selection=selection, shard_plan=shard_plan)


def bless_commands(report: CheckReport, ws: Workspace, selection: Selection) -> list[str]:
    """The `xisa bless` commands that accept what this check found changed, new or unused."""
    from xisa.render.review import accept_commands

    return accept_commands(report, kernel_filters=selection.kernel, extra_args=selection.location_args(),
                           kernels={s.name for s in ws.specs})


def outcome(report: CheckReport, ws: Workspace, selection: Selection, run: Run) -> CheckOutcome:
    """A check's outcome: its report, the commands accepting what it found, its exit code, the run's failures."""
    return CheckOutcome(report=report, accept=bless_commands(report, ws, selection), failure_lines=run.failure_lines())
