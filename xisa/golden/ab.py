"""`xisa ab`: one selection compiled two ways (two Triton installations, a codegen knob, or the goldens as
they are against a compile), compared cell by cell with the verdicts of `xisa check`.

Side A plays the part the goldens play in a check (a verdict's `base`), side B the compile's (`head`):
a compiled side A is judged as the goldens `xisa bless` would write for it (`GoldenSet.of_results`, in
memory), so every renderer of check and diff shows an A/B as it shows a check. Verdicts: `same`, `changed`, `error` (a side
failed to compile the cell: it cannot be compared), and with the goldens as side A also `new` (no golden)
and `unused` (a golden without a cell). Expectations are not judged (`xisa check` under a side does).

Pure: takes results and goldens read beforehand, returns an `AbReport`; compiling, processes and rendering live
elsewhere.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from xisa.compile.worker.result import CellResult
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import (CHANGED, ERROR, JSON_SCHEMA_VERSION, NEW, RESOURCE_DELTA_KEYS, SAME, UNUSED,
                                 CellVerdict, CheckReport, build_report)

SIDE_PAYLOAD_KIND = "ab-side"


@dataclass
class Side:
    """One side of an A/B: the goldens as they are, or a compile by this Python or another one, with its
    own codegen knobs. `toolchain` is filled in once known (the facts of every backend it compiled for)."""

    label: str                                   # "A" or "B"
    golden: bool = False
    python: str | None = None                    # another interpreter with its own Triton; None: this process
    knobs: dict[str, str] = field(default_factory=dict)
    toolchain: dict[str, str] = field(default_factory=dict)
    golden_dir: str | None = None                # shown for a golden side

    @property
    def kind(self) -> str:
        return "golden" if self.golden else "python" if self.python else "this-python"

    def compiles_like(self, other: "Side") -> bool:
        """Both sides would compile the same way: nothing could differ."""
        return (not self.golden and not other.golden and self.python == other.python
                and self.knobs == other.knobs)

    def describe(self) -> str:
        """`A = golden/ (triton 3.8.0)`, `B = /venv/bin/python (triton 3.9.0, ptxas 12.9) with X=1`."""
        what = (f"the goldens in {self.golden_dir or 'golden/'}" if self.golden
                else self.python if self.python else "this Python")
        facts = ", ".join(f"{key} {value}" for key, value in sorted(self.toolchain.items()))
        knobs = " ".join(f"{name}={value}" for name, value in sorted(self.knobs.items()))
        return f"{self.label} = {what}" + (f" ({facts})" if facts else "") + (f" with {knobs}" if knobs else "")

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "python": self.python, "knobs": dict(self.knobs),
                "toolchain": dict(self.toolchain), "golden": self.golden_dir if self.golden else None}


@dataclass
class AbReport(CheckReport):
    """A check report whose `base` side is A and `head` side B, with the two sides described."""

    kind: ClassVar[str] = "ab"
    sides: list[Side] = field(default_factory=list)

    @property
    def isolation_violations(self) -> list[CellVerdict]:
        return []      # an A/B has no scope: a changed cell is its finding (exit 1), not an isolation breach


def judge_ab(b_results: list[CellResult], *, a_goldens: GoldenSet, a_errors: dict[str, str], a_is_goldens: bool,
             selected_targets: set[str], kernel_filters: list[str] | None,
             sides: list[Side], selection: dict[str, Any] | None = None) -> AbReport:
    """Side B's results against side A's goldens (`a_goldens`: the real ones, or side A's compile as goldens).
    `a_errors` maps a cell id to why side A could not compile it: such a cell is an error, never `new`."""
    a_side = sides[0]
    report = build_report(b_results, {}, goldens=a_goldens, selected_targets=selected_targets,
                          kernel_filters=kernel_filters, scopes=[], launches=False,
                          toolchain={"triton": a_side.toolchain["triton"]} if "triton" in a_side.toolchain else {})
    for verdict in report.verdicts:
        head_failed = verdict.head is not None and not verdict.head.ok
        if verdict.id in a_errors:
            verdict.verdict = ERROR
            verdict.message = (f"side A failed: {a_errors[verdict.id]}" if not head_failed else
                               f"both sides failed. side A: {a_errors[verdict.id]}\nside B: {verdict.head.error}")
        elif head_failed:
            verdict.message = f"side B failed: {verdict.message}"
        elif verdict.verdict == CHANGED:
            _, said, why = verdict.message.partition(": ")    # the code bytes changed, the stream did not
            verdict.message = "changed from A to B" + (f": {why}" if said else "")
        elif verdict.verdict == NEW:
            verdict.message = f"side A has no golden for this cell ({verdict.golden_file})"
        elif verdict.verdict == UNUSED:
            verdict.message = f"side A has a golden ({verdict.golden_file}) but side B no such cell"
        if not a_is_goldens:
            verdict.golden_file = ""
    return AbReport(verdicts=report.verdicts, toolchain=dict(sides[1].toolchain),
                    golden_toolchains=report.golden_toolchains if a_is_goldens else {}, scopes=[],
                    problems=report.problems, selection=selection, sides=sides)


# ------------------------------------------------------------------------ what changed, per target

@dataclass
class TargetSummary:
    """One target's cells of a comparison: verdict counts, the instructions of the cells both sides compiled,
    and per resource how many cells went up and down (and by how much in all)."""

    target: str
    counts: dict[str, int]
    instructions: tuple[int, int] = (0, 0)                        # A's and B's totals over compared cells
    resources: dict[str, tuple[int, int, int]] = field(default_factory=dict)   # key -> (cells up, down, net)

    @property
    def cells(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "cells": self.cells, "counts": dict(self.counts),
                "instructions": list(self.instructions),
                "resources": {key: {"up": up, "down": down, "net": net}
                              for key, (up, down, net) in self.resources.items()}}


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def target_summaries(report: CheckReport) -> list[TargetSummary]:
    by_target: dict[str, TargetSummary] = {}
    for verdict in report.verdicts:
        summary = by_target.setdefault(verdict.target, TargetSummary(verdict.target, {}))
        summary.counts[verdict.verdict] = summary.counts.get(verdict.verdict, 0) + 1
        if verdict.verdict not in (SAME, CHANGED) or verdict.base is None or verdict.head is None \
                or verdict.head.analysis is None:
            continue
        a, b = summary.instructions
        summary.instructions = (a + int(verdict.base.data["instructions"]), b + verdict.head.analysis.instructions)
        for key, (old, new) in (verdict.delta.resources.items() if verdict.delta else ()):
            old, new = _number(old), _number(new)
            if old is None or new is None or key not in RESOURCE_DELTA_KEYS:
                continue
            up, down, net = summary.resources.get(key, (0, 0, 0))
            summary.resources[key] = (up + (new > old), down + (new < old), net + new - old)
    return [by_target[target] for target in sorted(by_target)]


def largest_resource_changes(report: CheckReport, *, limit: int = 10) -> list[tuple[str, str, int, int]]:
    """The cells' resource changes, largest relative change first: (cell id, resource, A's value, B's)."""
    rows = []
    for verdict in report.verdicts:
        for key, (old, new) in (verdict.delta.resources.items() if verdict.delta else ()):
            old, new = _number(old), _number(new)
            if old is not None and new is not None and old != new:
                rows.append((verdict.id, key, old, new))
    rows.sort(key=lambda row: (-abs(row[3] - row[2]) / max(abs(row[2]), 1), row[0], row[1]))
    return rows[:limit]


def majority_toolchain(toolchains: list[dict[str, str]]) -> dict[str, str]:
    """Each fact's most common value over many cells' toolchains (goldens may disagree; a report names one)."""
    counts: dict[str, Counter] = {}
    for toolchain in toolchains:
        for key, value in toolchain.items():
            counts.setdefault(key, Counter())[str(value)] += 1
    return {key: counter.most_common(1)[0][0] for key, counter in sorted(counts.items())}


# ------------------------------------------------------------------------ a side compiled elsewhere

def side_payload(results: list[CellResult], toolchain: dict[str, str],
                 toolchains: dict[str, dict[str, str]]) -> dict[str, Any]:
    """What a side compiled by another Python hands back (`xisa ab-side`): every result whole (analysis and
    stream, as the result cache keeps it), the toolchain of the run and of each target."""
    return {"schema": JSON_SCHEMA_VERSION, "kind": SIDE_PAYLOAD_KIND, "toolchain": toolchain,
            "toolchains": toolchains, "results": [{**r.to_cache(), "cached": r.cached} for r in results]}


def read_side_payload(data: Any) -> tuple[list[CellResult], dict[str, str], dict[str, dict[str, str]]]:
    if not isinstance(data, dict) or data.get("kind") != SIDE_PAYLOAD_KIND or data.get("schema") != JSON_SCHEMA_VERSION:
        raise ValueError("not an ab-side payload of this xisa")
    results = []
    for record in data["results"]:
        result = CellResult.from_cache(record)
        result.cached = bool(record.get("cached"))
        results.append(result)
    return results, dict(data["toolchain"]), {k: dict(v) for k, v in data["toolchains"].items()}
