"""What each target resolved, per kernel and case: the autotuner config it applied and the platform facts its
module and heuristics read (`CellResult.resolved`), grouped by value, so a reviewer sees at a glance that gfx942
bound 304 SMs where sm_90 bound 132, or that one device fell off a tuning table onto another config. Notes on
launch options Triton rewrote for a target are listed per cell."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from rich.console import Console
from rich.text import Text

from xisa.compile.worker.result import CellResult


def _shown(value: Any) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def resolution_rows(results: Iterable[CellResult], *, differing_only: bool = False) -> list[tuple[str, str, list]]:
    """(kernel:case, what, [(value, [targets])]) for each config or platform fact a case's cells resolved; with
    `differing_only`, only what has more than one value among the case's targets."""
    table: dict[str, dict[str, dict[str, list[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for result in results:
        resolved = result.resolved or {}
        case = f"{result.kernel}:{result.case}"
        if resolved.get("config"):
            table[case]["config"][resolved["config"]].append(result.target)
        for fact, value in (resolved.get("platform") or {}).items():
            table[case][fact][_shown(value)].append(result.target)
    rows = []
    for case in sorted(table):
        for what in sorted(table[case], key=lambda w: (w != "config", w)):
            values = table[case][what]
            if differing_only and len(values) < 2:
                continue
            rows.append((case, what, sorted((value, sorted(targets)) for value, targets in values.items())))
    return rows


def resolution_lines(results: Iterable[CellResult], *, differing_only: bool = False) -> list[str]:
    """One line per row of `resolution_rows`, then one per note: 'gemm:big  multiprocessor_count: 304 (gfx942) ·
    132 (sm_90, sm_90-h100)'."""
    results = list(results)
    lines = [f"{case}  {what}: " + " · ".join(f"{value} ({', '.join(targets)})" for value, targets in values)
             for case, what, values in resolution_rows(results, differing_only=differing_only)]
    lines += [f"{result.id}: {note}" for result in results for note in (result.resolved or {}).get("notes", [])]
    return lines


def render_resolution(console: Console, results: Iterable[CellResult], *, differing_only: bool = False) -> None:
    lines = resolution_lines(results, differing_only=differing_only)
    if lines:
        console.print(Text("resolved per target" + (" (where targets differ)" if differing_only else "") + ":",
                           style="bold"))
        for line in lines:
            console.print(Text(f"  {line}"))
