"""Render results: rich tables for people, JSON for machines. Data is built once, rendered per format."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from xisa.expect import Failure, measure
from xisa.result import CellResult
from xisa.toolchain import describe_toolchain

JSON_SCHEMA_VERSION = 1


def compile_payload(results: list[CellResult], failures: dict[str, list[Failure]], *, backends: set[str]) -> dict[str, Any]:
    cells = []
    for result in results:
        entry = result.to_json()
        entry["expectations"] = [str(f) for f in failures.get(result.id, [])]
        cells.append(entry)
    return {"schema": JSON_SCHEMA_VERSION, "toolchain": describe_toolchain(backends=backends), "cells": cells}


def _fmt_occupancy(res: dict[str, Any]) -> str:
    ours = res.get("occupancy")
    llvm = res.get("llvm_occupancy")
    if llvm is None or llvm == ours:
        return str(ours)
    return f"{ours} (llvm {llvm})"


def render_compile_table(console: Console, results: list[CellResult], failures: dict[str, list[Failure]], *,
                         counts: list[str]) -> None:
    by_target: dict[str, list[CellResult]] = defaultdict(list)
    for result in results:
        by_target[result.target].append(result)
    for target in sorted(by_target):
        table = Table(title=target, title_justify="left")
        table.add_column("kernel:case")
        table.add_column("instr", justify="right")
        for pattern in counts:
            table.add_column(pattern, justify="right")
        for column in ("VGPR", "AGPR", "SGPR", "spills", "LDS", "scratch", "occupancy"):
            table.add_column(column, justify="right")
        table.add_column("sha256")
        table.add_column("status")
        for result in by_target[target]:
            name = f"{result.kernel}:{result.case}"
            if not result.ok or result.analysis is None:
                table.add_row(name, *[""] * (len(counts) + 8), Text("error", style="red"))
                continue
            a = result.analysis
            res = a.resources
            if a.isa == "sass":
                regs = (str(res.get("registers", 0)), "-", "-")
                spills = str(res.get("local_bytes", 0))
                scratch = str(res.get("stack_bytes", 0))
            else:
                regs = (str(res["vgprs"]), str(res["agprs"]), str(res["sgprs"]))
                spills = f"{res['vgpr_spills']}/{res['sgpr_spills']}"
                scratch = str(res["scratch_bytes"])
            fails = failures.get(result.id, [])
            status = Text("expect failed", style="yellow") if fails else Text("ok", style="green")
            table.add_row(name, str(a.instructions), *[str(measure(p, a)) for p in counts], *regs, spills,
                          str(res.get("lds_bytes", 0)), scratch, _fmt_occupancy(res), a.sha256[:16], status)
        console.print(table)
        for result in by_target[target]:
            for failure in failures.get(result.id, []):
                console.print(Text(f"  {result.id}: {failure}", style="yellow"))
