"""A report's outcome in one sentence, as every renderer states it (`fail: 2 cells changed outside the declared scope
gfx942 (exit 1)`): the label and the exit code are the report's own (`CheckReport.exit_code`, where the verdict is
decided), so the HTML page, markdown, text and JSON of one run can never disagree with the command's exit code."""

from __future__ import annotations

from xisa.golden.verdict import CHANGED, ERROR, NEW, SAME, UNUSED, Verdict
from xisa.render.formats import plural

OUTCOME_LABEL = {0: "pass", 1: "fail", 2: "untrusted"}
OUTCOME_STYLE = {0: "green", 1: "bold red", 2: "bold red"}


def outcome_line(report) -> str:
    """The outcome as every renderer states it: `fail: 2 cells changed outside the declared scope gfx942 (exit 1)`."""
    return f"{outcome_sentence(report)} (exit {report.exit_code})"


def outcome_sentence(report) -> str:
    """The command's outcome and why, as one sentence: `pass: 13 changed cells, all in scope gfx942`,
    `fail: 2 cells changed outside the declared scope gfx942`, `untrusted: 1 cell could not be judged`. The
    outcome is the report's own exit code (`CheckReport.exit_code`, the one home of the verdict), which every
    command that judged the report exits with."""
    code = report.exit_code
    counts = report.counts()
    scopes = ", ".join(report.scopes)
    errors = counts.get(ERROR, 0) + sum(1 for v in report.stale_goldens if v.verdict == ERROR)
    untrusted = [part for n, part in (
        (errors, f"{plural(errors, 'cell')} could not be judged (error)"),
        (len(report.problems), f"{plural(len(report.problems), 'problem')} with the comparison itself"),
    ) if n]
    violations = report.isolation_violations
    failing = []
    if violations:
        failing.append(f"{plural(len(violations), 'cell')} changed outside the declared scope {scopes}" if scopes
                       else f"{plural(len(violations), 'cell')} changed and no scope is declared")
    others: dict[str, int] = {}
    outside = {v.id for v in violations}
    for v in report.verdicts:
        if v.is_regression and v.id not in outside:
            others[v.verdict] = others.get(v.verdict, 0) + 1
    words = {CHANGED: "changed", NEW: "new, without a golden", UNUSED: "unused goldens",
             Verdict.EXPECT_FAILED: "failing an expectation", Verdict.CANNOT_LAUNCH: "unable to launch"}
    for verdict in Verdict:
        if others.get(verdict):
            n = others[verdict]
            if verdict == CHANGED and getattr(report, "sides", None):
                failing.append(f"{plural(n, 'cell')} {'differs' if n == 1 else 'differ'} between the sides")
            elif verdict == UNUSED:
                failing.append(plural(n, "unused golden"))
            else:
                failing.append(f"{plural(n, 'cell')} {words.get(verdict, verdict)}")
    if report.stale_goldens and len(report.stale_goldens) > sum(1 for v in report.stale_goldens if v.verdict == ERROR):
        failing.append(plural(len(report.stale_goldens), "stale golden"))
    label = OUTCOME_LABEL.get(code, f"exit {code}")
    if code == 2 or (untrusted and code != 0):
        return f"{label}: {' and '.join(untrusted or failing or ['the result cannot be trusted'])}"
    if failing:
        return f"{label}: {'; '.join(failing)}"
    if code != 0:
        return f"{label}: exit code {code}"
    changed = sum(1 for v in report.verdicts if Verdict(v.verdict).scoped(v.judged_by_scope) and v.in_scope)
    total = len(report.verdicts)
    if changed:
        return f"{label}: {plural(changed, 'changed cell')}, all in scope {scopes}" if scopes else \
            f"{label}: {plural(changed, 'changed cell')}"
    if total and counts.get(SAME, 0) == total:
        return f"{label}: {'all ' if total > 1 else ''}{plural(total, 'cell')} byte-identical"
    return f"{label}: nothing changed" if total else f"{label}: no cells selected"


def markdown_outcome(report) -> str:
    sentence = outcome_sentence(report).replace("*", "\\*")
    return f"**{sentence}** (exit {report.exit_code})"
