"""The pull-request gate: this tree's compile against a base revision, judged by the declared scope.

In a pull request the goldens are the author's own: after a wholesale `xisa bless` every cell agrees
with them, so agreeing proves nothing about isolation. The gate compares the head's compile with the
base revision (its goldens, or its kernels compiled) and fails when a cell outside the scope changed,
appeared or disappeared. It also holds the head's goldens to the head's compile, whatever the scope,
so a PR cannot merge goldens that the base branch's own `xisa check` would then reject.

Pure: takes results and goldens read beforehand (`GoldenSet`), returns a `CheckReport`; git, compiling and rendering live
elsewhere.
"""

from __future__ import annotations

from typing import Any

from xisa.analyze.expect import Failure
from xisa.golden.store import GoldenSet
from xisa.names import CellKey
from xisa.compile.worker.result import CellResult
from xisa.golden.verdict import CHANGED, ERROR, NEW, SAME, UNUSED, CellVerdict, CheckReport, Scope, build_report


def base_record(revision: str, commit: str, *, compiled: bool) -> dict[str, Any]:
    """What the report says about the base: the revision as given, the commit it resolved to, and
    whether its goldens were read or its kernels compiled."""
    return {"revision": revision, "commit": commit, "compared": "compiled" if compiled else "goldens"}


def judge_against_base(results: list[CellResult], failures: dict[str, list[Failure]], *, base: dict[str, Any],
                       base_goldens: GoldenSet, base_errors: dict[str, str], head_goldens: GoldenSet,
                       selected_targets: set[str], scopes: list[str], toolchain: dict[str, str]) -> CheckReport:
    """`results` are every cell of this tree (the gate takes no filter); `base_goldens` are the base's
    goldens (read from git, or the base's compile as goldens); `base_errors` maps a cell id to the
    reason its base could not be compiled: such a cell cannot be judged, so it is an error (exit 2),
    never a silent `new`. `head_goldens` are this tree's."""
    # Every base golden is judged, those of a target this tree no longer knows too (a PR that deletes a
    # project target file removes its cells): they are `removed`, never skipped.
    judged_targets = selected_targets | {target for _, _, target in base_goldens.keys()}
    report = build_report(results, failures, goldens=base_goldens, selected_targets=judged_targets,
                          kernel_filters=None, scopes=scopes, toolchain=toolchain)
    parsed = [Scope.parse(s) for s in scopes]
    name = base["revision"]
    judged = {v.id for v in report.verdicts}
    for verdict in report.verdicts:
        verdict.judged_by_scope = True
        verdict.in_scope = any(s.covers(verdict.kernel, verdict.case, verdict.target) for s in parsed)
        where = "in scope" if verdict.in_scope else "outside the declared scope"
        if verdict.id in base_errors and verdict.verdict in (NEW, UNUSED):
            verdict.verdict = ERROR
            verdict.message = f"the cell does not compile at {name}, so it cannot be compared: {base_errors[verdict.id]}"
        elif verdict.verdict == NEW:
            verdict.message = f"new since {name} (no golden there), {where}"
        elif verdict.verdict == UNUSED:
            verdict.message = f"removed since {name} (its golden there has no cell here), {where}"
        elif verdict.verdict == CHANGED:
            verdict.message = f"changed since {name}, {where}"
    for cell_id, error in sorted(base_errors.items()):   # a base cell that no longer exists at head
        if cell_id not in judged:
            key = CellKey.parse(cell_id)
            report.verdicts.append(CellVerdict(kernel=key.kernel, case=key.case, target=key.target, verdict=ERROR,
                                               judged_by_scope=True,
                                               message=f"the cell does not compile at {name}: {error}"))
    report.base = base
    # The base is compiled in repositories that keep no goldens: then there are none to hold.
    if base["compared"] == "goldens" or head_goldens.keys():
        report.stale_goldens, problems = stale_goldens(results, head_goldens=head_goldens,
                                                       selected_targets=selected_targets, toolchain=toolchain)
        report.problems += [p for p in problems if p not in report.problems]
    return report


def stale_goldens(results: list[CellResult], *, head_goldens: GoldenSet, selected_targets: set[str],
                  toolchain: dict[str, str]) -> tuple[list[CellVerdict], list[str]]:
    """The head goldens that disagree with the head's compile (changed, missing, unused, corrupt, or made
    by another analyzer), and the whole-run problems found in them. A cell that fails to compile is
    reported once, by the comparison with the base."""
    head = build_report(results, {}, goldens=head_goldens, selected_targets=selected_targets, kernel_filters=None,
                        scopes=[], toolchain=toolchain, launches=False)   # the comparison with the base reports a cell that cannot launch
    stale = []
    for verdict in head.verdicts:
        if verdict.verdict == SAME or (verdict.verdict == ERROR and verdict.head is not None and not verdict.head.ok):
            continue
        if verdict.verdict == CHANGED:
            verdict.message = f"{verdict.golden_file} disagrees with this tree's compile (bless it and commit)"
        elif verdict.verdict == NEW:
            verdict.message = "no golden in this tree (bless it and commit)"
        elif verdict.verdict == UNUSED:
            verdict.message = f"{verdict.golden_file} has no cell in this tree (bless to remove it, and commit)"
        elif verdict.verdict == ERROR and not verdict.message and verdict.base is not None:   # another analyzer
            verdict.message = (f"{verdict.golden_file} was made by xisa's analyzer "
                               f"{verdict.base.data.get('analyzer', 1)}, so it is not compared (bless it and commit)")
        stale.append(verdict)
    return stale, head.problems
