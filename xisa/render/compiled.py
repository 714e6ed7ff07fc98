"""What `xisa compile` prints: its rich tables, its markdown table for a PR description, its JSON, and loops."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.text import Text

from xisa.analyze.backends import AMD, NVIDIA, backend_of_isa
from xisa.analyze.expect import Failure, measure
from xisa.compile.worker.result import CellResult
from xisa.compile.worker.toolchain import describe_toolchain
from xisa.golden.verdict import JSON_SCHEMA_VERSION
from xisa.names import CellKey
from xisa.render.formats import NO_ANALYSIS_ISA, fitted_table, show
from xisa.render.resolved import render_resolution

def compile_payload(results: list[CellResult], failures: dict[str, list[Failure]], *, backends: set[str]) -> dict[str, Any]:
    cells = []
    for result in results:
        entry = result.to_json()
        entry["expectations_failed"] = [str(f) for f in failures.get(result.id, [])]
        cells.append(entry)
    return {"schema": JSON_SCHEMA_VERSION, "kind": "compile", "toolchain": describe_toolchain(backends=backends),
            "cells": cells}


def _estimate_json(said: Any) -> Any:
    return said if isinstance(said, str) or said is None else said.to_json()


def loops_payload(loops: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """A cell's loops for JSON, each with llvm-mca's estimate (`estimate`: an object, a line why none, or null)."""
    return [{**loop.to_json(), "where": loop.where, "estimate": _estimate_json(said)} for loop, said in loops]


def render_loops_text(console: Console, found: dict[str, list[tuple[Any, Any]]], handlers: dict[str, Any]) -> None:
    """`xisa compile --loops`: per cell its loops, their counts per iteration, and llvm-mca's estimate."""
    for cell_id, loops in found.items():
        handler = handlers[CellKey.parse(cell_id).target]
        if not loops:
            console.print(Text(f"{cell_id}: no loops"))
        for loop, said in loops:
            figures = ", ".join(f"{k} {v}" for k, v in loop.shown(handler).items())
            console.print(Text(f"{cell_id}: {loop.where}: {figures}"))
            if said is not None:
                console.print(Text(f"  {said if isinstance(said, str) else said.text()}"))


def _fmt_occupancy(res: dict[str, Any]) -> str:
    ours = res.get("occupancy")
    llvm = res.get("llvm_occupancy")
    if llvm is None or llvm == ours:
        return str(ours)
    return f"{ours} (llvm {llvm})"


# Resource columns per ISA, with their units: AMD counts registers per wave and occupancy in waves
# per SIMD; NVIDIA registers per thread, memory per thread, occupancy in warps per SM.
COMPILE_COLUMNS: dict[str, tuple[tuple[str, Any], ...]] = {
    AMD.isa: (("V/A/SGPR", lambda r: f"{r.get('vgprs')}/{r.get('agprs')}/{r.get('sgprs')}"),
               ("spills V/S", lambda r: f"{r.get('vgpr_spills')}/{r.get('sgpr_spills')}"),
               ("LDS B", "lds_bytes"), ("scratch B", "scratch_bytes"), ("waves/SIMD", _fmt_occupancy)),
    NVIDIA.isa: (("regs/thread", "registers"), ("stack B", "stack_bytes"), ("local B", "local_bytes"),
             ("shared B", "lds_bytes"), ("warps/SM", _fmt_occupancy)),
}


def _isa_of_results(results: list[CellResult]) -> str:
    return next((r.analysis.isa for r in results if r.analysis is not None), NO_ANALYSIS_ISA)


def top_instructions(analysis, n: int) -> str:
    """The n most frequent base mnemonics: `v_fma_f32 812 · v_mov_b32 500 · ...`."""
    ranked = sorted(analysis.base_histogram.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return " · ".join(f"{m} {c}" for m, c in ranked)


def render_compile_table(console: Console, results: list[CellResult], failures: dict[str, list[Failure]], *,
                         counts: list[str], isa_of: dict[str, str] | None = None, top: int = 0) -> None:
    by_target: dict[str, list[CellResult]] = defaultdict(list)
    for result in results:
        by_target[result.target].append(result)
    for target in sorted(by_target):
        members = by_target[target]
        isa = (isa_of or {}).get(target) or _isa_of_results(members)
        resource_columns = COMPILE_COLUMNS[isa]
        columns = [("kernel:case", "left"), ("instr", "right"), *((p, "right") for p in counts),
                   *((header, "right") for header, _ in resource_columns), ("sha256", "left"), ("status", "left")]
        rows: list[list[Any]] = []
        for result in members:
            name = f"{result.kernel}:{result.case}"
            if not result.ok or result.analysis is None:
                rows.append([name, *[""] * (len(columns) - 2), Text("error", style="red")])
                continue
            a = result.analysis
            res = a.resources
            values = [show(res.get(get)) if isinstance(get, str) else get(res) for _, get in resource_columns]
            fails = failures.get(result.id, [])
            status = Text("failed", style="yellow") if fails else Text("ok", style="green")   # listed below
            if result.launch is not None and not result.launch.launchable:
                status = (Text("cannot launch", style="red") if result.launch.unexpected
                          else Text("cannot launch (expected)", style="yellow"))
            rows.append([name, str(a.instructions), *[show(measure(p, a)) for p in counts], *values,
                         a.sha256[:12], status])
        handler = backend_of_isa(isa)
        console.print(fitted_table(console, columns, rows,
                                    title=f"{target} ({handler.vendor}; occupancy in {handler.occupancy_unit})"))
        if top > 0:
            listing = [[f"{r.kernel}:{r.case}", top_instructions(r.analysis, top)] for r in members
                       if r.ok and r.analysis is not None]
            if listing:
                table = fitted_table(console, [("kernel:case", "left"), ("top", "left")], listing, box=None,
                                      show_header=False, title=f"{target}: top {top} instructions")
                console.print(table)
        for result in members:
            for failure in failures.get(result.id, []):
                console.print(Text(f"  {result.id}: {failure}", style="yellow"))
            if result.launch is not None and not result.launch.launchable:
                console.print(Text(f"  {result.id}: {result.launch}", style="red" if result.launch.unexpected else ""))
    render_resolution(console, results)


def render_compile_markdown(results: list[CellResult], *, counts: list[str]) -> str:
    """A case x target table like the seeds' PR tables: instructions / each --count / SHA-256 prefix."""
    targets = sorted({r.target for r in results})
    rows: dict[str, dict[str, str]] = {}
    for r in results:
        if r.ok and r.analysis is not None:
            values = [str(r.analysis.instructions), *(show(measure(p, r.analysis)) for p in counts)]
            text = " / ".join(values) + f" / `{r.analysis.sha256[:8]}`"
            if r.launch is not None and not r.launch.launchable:
                text += " / **cannot launch**" + (" (expected)" if not r.launch.unexpected else "")
        else:
            text = "error"
        rows.setdefault(f"{r.kernel}:{r.case}", {})[r.target] = text
    legend = " / ".join(["instructions", *(f"`{p}`" for p in counts), "SHA-256"])
    lines = [f"Each cell: {legend}.", "", "| case | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    for case in sorted(rows):
        lines.append(f"| `{case}` | " + " | ".join(rows[case].get(t, "–") for t in targets) + " |")
    return "\n".join(lines) + "\n"
