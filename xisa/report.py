"""Render results: rich tables for people, JSON for machines. Data is built once, rendered per format."""

from __future__ import annotations

import re
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
        entry["expectations_failed"] = [str(f) for f in failures.get(result.id, [])]
        cells.append(entry)
    return {"schema": JSON_SCHEMA_VERSION, "kind": "compile", "toolchain": describe_toolchain(backends=backends),
            "cells": cells}


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


# ---------------------------------------------------------------- check / diff reports

_VERDICT_STYLE = {"same": "green", "changed": "yellow", "new": "cyan", "unused": "magenta", "error": "red",
                  "expectation-failed": "red"}


def summary_line(report) -> str:
    """`changed: gfx1100 (3 cells); byte-identical: gfx1200, gfx942 (12 cells)`."""
    by_verdict: dict[str, dict[str, int]] = {}
    for v in report.verdicts:
        label = "byte-identical" if v.verdict == "same" else v.verdict
        by_verdict.setdefault(label, {})
        by_verdict[label][v.target] = by_verdict[label].get(v.target, 0) + 1
    order = ["error", "expectation-failed", "changed", "new", "unused", "byte-identical"]
    parts = []
    for label in order:
        targets = by_verdict.get(label)
        if not targets:
            continue
        total = sum(targets.values())
        parts.append(f"{label}: {', '.join(sorted(targets))} ({total} cell{'s' if total != 1 else ''})")
    return "; ".join(parts) if parts else "no cells selected"


def judgement_line(report, *, code: str = "`") -> str:
    """What the verdicts were judged against: the base revision (for a PR gate) and the declared scope."""
    scopes = ", ".join(f"{code}{s}{code}" for s in report.scopes)
    scope = f"scope {scopes}" if scopes else "no scope (every cell must be unchanged)"
    if report.base:
        base = report.base
        how = "its kernels compiled" if base["compared"] == "compiled" else "its goldens"
        return f"judged against {code}{base['revision']}{code} ({code}{base['commit'][:12]}{code}, {how}), {scope}"
    return f"judged against the goldens, {scope}"


def _arrow(base: Any, head: Any) -> str:
    if base is None:
        return str(head)
    if head is None:
        return f"{base} → (none)"
    if base == head:
        return str(head)
    if isinstance(base, int) and isinstance(head, int):
        return f"{base} → {head} ({head - base:+d})"
    return f"{base} → {head}"


def _row_values(v, counts: list[str]) -> list[str]:
    head = v.head.analysis if v.head and v.head.analysis else None
    base = v.base.analysis() if v.base else None
    hres = head.resources if head else {}
    bres = base.resources if base else {}

    def pair(getter):
        return _arrow(getter(base) if base else None, getter(head) if head else None)

    cells = [pair(lambda a: a.instructions)]
    cells += [pair(lambda a, p=p: measure(p, a)) for p in counts]
    regs_key = "registers" if (hres or bres).get("registers") is not None else "vgprs"
    cells.append(_arrow(bres.get(regs_key) if base else None, hres.get(regs_key) if head else None))
    spill_key = "local_bytes" if regs_key == "registers" else "vgpr_spills"
    cells.append(_arrow(bres.get(spill_key) if base else None, hres.get(spill_key) if head else None))
    cells.append(_arrow(bres.get("lds_bytes") if base else None, hres.get("lds_bytes") if head else None))
    cells.append(_arrow(bres.get("occupancy") if base else None, hres.get("occupancy") if head else None))
    bsha = f"`{base.sha256[:12]}`" if base else "-"
    hsha = f"`{head.sha256[:12]}`" if head else "-"
    cells.append(hsha if bsha == hsha else f"{bsha} → {hsha}")
    return cells


def render_markdown(report, *, counts: list[str], title: str) -> str:
    lines = [f"### {title}", "", f"**{summary_line(report)}**", "", f"_{judgement_line(report)}_", ""]
    for problem in report.problems:
        lines += [f"> :warning: {problem}", ""]
    if report.isolation_violations:
        lines += ["**isolation violated**: " + ", ".join(f"`{v.id}`" for v in report.isolation_violations), ""]
    if report.stale_goldens:
        lines += ["**goldens that disagree with this tree's compile** (bless them and commit): "
                  + ", ".join(f"`{v.id}`" for v in report.stale_goldens), ""]
    header = ["case", "instructions", *[f"`{c}`" for c in counts], "VGPR", "spills", "LDS", "occupancy", "SHA-256",
              "verdict"]
    targets = sorted({v.target for v in report.verdicts})
    for target in targets:
        rows = [v for v in report.verdicts if v.target == target]
        identical = all(v.verdict == "same" for v in rows)
        table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for v in rows:
            verdict = v.verdict + (" (in scope)" if v.verdict == "changed" and v.in_scope else "")
            table.append("| " + " | ".join([f"`{v.kernel}:{v.case}`", *_row_values(v, counts), verdict]) + " |")
        if identical:
            lines += [f"<details><summary>{target}: byte-identical ({len(rows)} cells)</summary>", "", *table, "",
                      "</details>", ""]
        else:
            lines += [f"#### {target}", "", *table, ""]
            for v in rows:
                if v.delta and v.delta.histogram:
                    top = ", ".join(f"`{m}` {b}→{h}" for m, b, h in v.delta.histogram[:8])
                    lines.append(f"- `{v.kernel}:{v.case}`: {top}")
                if v.message and v.verdict in ("error", "expectation-failed", "unused"):
                    lines.append(f"- `{v.kernel}:{v.case}`: {v.message}")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_check_text(console: Console, report, *, counts: list[str], quiet: bool = False) -> None:
    if not quiet:
        for target in sorted({v.target for v in report.verdicts}):
            table = Table(title=target, title_justify="left")
            for column in ("kernel:case", "instructions", *counts, "VGPR", "spills", "LDS", "occupancy", "sha256",
                           "verdict"):
                table.add_column(column)
            for v in (x for x in report.verdicts if x.target == target):
                label = v.verdict + (" (in scope)" if v.verdict == "changed" and v.in_scope else "")
                values = [s.replace("`", "") for s in _row_values(v, counts)]
                table.add_row(f"{v.kernel}:{v.case}", *values, Text(label, style=_VERDICT_STYLE.get(v.verdict, "")))
            console.print(table)
        for v in report.verdicts:
            if v.delta and v.verdict in ("changed", "expectation-failed"):
                top = ", ".join(f"{m} {b}->{h}" for m, b, h in v.delta.histogram[:8])
                res = ", ".join(f"{k} {b}->{h}" for k, (b, h) in v.delta.resources.items())
                console.print(Text(f"{v.id}: instructions {_arrow(*v.delta.instructions)}"
                                   + (f"; {top}" if top else "") + (f"; {res}" if res else "")))
    for v in report.verdicts:
        if v.message and v.verdict in ("error", "expectation-failed", "new", "unused"):
            console.print(Text(f"{v.verdict}: {v.id}: {v.message}", style=_VERDICT_STYLE.get(v.verdict, "")))
    for v in report.stale_goldens:
        console.print(Text(f"stale golden: {v.id}: {v.message}", style="red"))
    for problem in report.problems:
        console.print(Text(f"untrusted: {problem}", style="red"))
    if report.isolation_violations:
        console.print(Text("isolation violated: " + ", ".join(v.id for v in report.isolation_violations),
                           style="bold red"))
    if report.base or report.scopes:
        console.print(Text(judgement_line(report, code="")))
    console.print(Text(summary_line(report)))


# Characters XML 1.0 cannot hold, even escaped (C0 controls but tab, newline and carriage return;
# surrogates; U+FFFE and U+FFFF). A compiler message may carry any of them (an ANSI colour code).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(text: str) -> str:
    """`text` with each character XML cannot hold written as a visible escape (`\\x1b`)."""
    return _NOT_XML.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)


def render_junit(report) -> str:
    from xml.etree import ElementTree as ET

    suite = ET.Element("testsuite", name="xisa", tests=str(len(report.verdicts)))
    failures = errors = 0
    for v in report.verdicts:
        case = ET.SubElement(suite, "testcase", classname=f"xisa.{v.target}", name=f"{v.kernel}:{v.case}")
        message = _xml_safe(v.message)
        if v.verdict == "error":
            errors += 1
            ET.SubElement(case, "error", message=message[:500]).text = message
        elif v.is_regression:
            failures += 1
            detail = v.message
            if v.delta:
                detail += "\n" + "\n".join(f"{m}: {b} -> {h}" for m, b, h in v.delta.histogram[:20])
            ET.SubElement(case, "failure", message=f"{v.verdict}: {message}"[:500]).text = _xml_safe(detail)
    for v in report.stale_goldens:
        failures += 1
        case = ET.SubElement(suite, "testcase", classname=f"xisa.{v.target}", name=f"{v.kernel}:{v.case} (golden)")
        message = _xml_safe(v.message)
        ET.SubElement(case, "failure", message=f"stale golden: {message}"[:500]).text = message
    for problem in report.problems:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname="xisa", name="toolchain")
        problem = _xml_safe(problem)
        ET.SubElement(case, "error", message=problem[:500]).text = problem
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode") + "\n"


def render_compile_markdown(results: list[CellResult], *, counts: list[str]) -> str:
    """A case x target table like the seeds' PR tables: instructions / each --count / SHA-256 prefix."""
    targets = sorted({r.target for r in results})
    rows: dict[str, dict[str, str]] = {}
    for r in results:
        if r.ok and r.analysis is not None:
            values = [str(r.analysis.instructions), *(str(measure(p, r.analysis)) for p in counts)]
            text = " / ".join(values) + f" / `{r.analysis.sha256[:8]}`"
        else:
            text = "error"
        rows.setdefault(f"{r.kernel}:{r.case}", {})[r.target] = text
    legend = " / ".join(["instructions", *(f"`{p}`" for p in counts), "SHA-256"])
    lines = [f"Each cell: {legend}.", "", "| case | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    for case in sorted(rows):
        lines.append(f"| `{case}` | " + " | ".join(rows[case].get(t, "–") for t in targets) + " |")
    return "\n".join(lines) + "\n"
