"""Every output format but HTML: rich tables for people, markdown for PR comments, JUnit XML, JSON for
machines. Data is built once, rendered per format."""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from xisa.analyze.backends import AMD, BACKENDS, NVIDIA, backend_of_isa
from xisa.analyze.stages import RECORD_COMMAND
from xisa.analyze.expect import Failure, measure
from xisa.compile.result import CellResult
from xisa.compile.toolchain import describe_toolchain
from xisa.golden.ab import largest_resource_changes, target_summaries
from xisa.golden.verdict import JSON_SCHEMA_VERSION, Verdict
from xisa.names import CellKey


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
# The check and diff tables: one register count, spills or private memory, LDS, occupancy (keys
# as `measure` reads them: scratch_bytes on NVIDIA is stack + local bytes).
CHECK_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    AMD.isa: (("VGPR", "vgprs"), ("VGPR spills", "vgpr_spills"), ("LDS B", "lds_bytes"),
               ("waves/SIMD", "occupancy")),
    NVIDIA.isa: (("regs/thread", "registers"), ("stack+local B", "scratch_bytes"), ("shared B", "lds_bytes"),
             ("warps/SM", "occupancy")),
}
TEXT_ERROR_LINES = 20     # a compile error's last lines in text output; --json has the whole text


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


# Whose columns a table of cells without any analysis (all errors) shows: they stay empty.
_NO_ANALYSIS_ISA = BACKENDS[0].isa


def _isa_of_results(results: list[CellResult]) -> str:
    return next((r.analysis.isa for r in results if r.analysis is not None), _NO_ANALYSIS_ISA)


def _fitted_table(console: Console, columns: list[tuple[str, str]], rows: list[list[Any]], **kw) -> Table:
    """A table whose values are never cut: each column is as wide as its longest value or header
    word (a header may wrap); the first column, the cell's name, takes the width left and folds
    over lines only when the terminal is too narrow to hold it on one."""
    def needed(i: int, header: str) -> int:
        words = max((len(word) for word in header.split()), default=0)
        return max([words, *(len(str(row[i])) for row in rows)])

    widths = [needed(i, header) for i, (header, _) in enumerate(columns)]
    room = console.width - (3 * len(columns) + 1) - sum(widths[1:])
    table = Table(title_justify="left", **kw)
    table.add_column(columns[0][0], overflow="fold", width=widths[0] if room >= widths[0] else max(room, 12))
    for (header, justify), width in zip(columns[1:], widths[1:]):
        table.add_column(header, justify=justify, overflow="fold", width=width)
    for row in rows:
        table.add_row(*row)
    return table


def error_block(prefix: str, message: str, *, max_lines: int = TEXT_ERROR_LINES) -> str:
    """`prefix: first line`, then the message's other lines indented as one block, so a Triton
    CompilationError's `^` still points at its column; long messages keep their last lines."""
    lines = message.splitlines() or [""]
    first, rest = lines[0], lines[1:]
    if len(rest) > max_lines:
        rest = [f"... {len(rest) - max_lines} more lines (--format json / --json has the whole text)",
                *rest[-max_lines:]]
    return "\n".join([f"{prefix}: {first}", *(f"    {line}" if line else "" for line in rest)])


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
            values = [_show(res.get(get)) if isinstance(get, str) else get(res) for _, get in resource_columns]
            fails = failures.get(result.id, [])
            status = Text("failed", style="yellow") if fails else Text("ok", style="green")   # listed below
            if result.launch is not None and not result.launch.launchable:
                status = (Text("cannot launch", style="red") if result.launch.unexpected
                          else Text("cannot launch (expected)", style="yellow"))
            rows.append([name, str(a.instructions), *[_show(measure(p, a)) for p in counts], *values,
                         a.sha256[:12], status])
        handler = backend_of_isa(isa)
        console.print(_fitted_table(console, columns, rows,
                                    title=f"{target} ({handler.vendor}; occupancy in {handler.occupancy_unit})"))
        if top > 0:
            listing = [[f"{r.kernel}:{r.case}", top_instructions(r.analysis, top)] for r in members
                       if r.ok and r.analysis is not None]
            if listing:
                table = _fitted_table(console, [("kernel:case", "left"), ("top", "left")], listing, box=None,
                                      show_header=False, title=f"{target}: top {top} instructions")
                console.print(table)
        for result in members:
            for failure in failures.get(result.id, []):
                console.print(Text(f"  {result.id}: {failure}", style="yellow"))
            if result.launch is not None and not result.launch.launchable:
                console.print(Text(f"  {result.id}: {result.launch}", style="red" if result.launch.unexpected else ""))


# ---------------------------------------------------------------- check / diff reports

_VERDICT_STYLE = {Verdict.SAME: "green", Verdict.CHANGED: "yellow", Verdict.NEW: "cyan", Verdict.UNUSED: "magenta",
                  Verdict.ERROR: "red", Verdict.EXPECT_FAILED: "red", Verdict.CANNOT_LAUNCH: "red"}


def verdict_label(v) -> str:
    """The verdict as tables show it: `changed (in scope)`; a cell the spec expects not to launch says so
    (`same, cannot launch (expected)`), so every output shows a cell that would not run."""
    label = v.verdict + (" (in scope)" if v.verdict == "changed" and v.in_scope else "")
    launch = v.launch
    if launch is not None and not launch.launchable and not launch.unexpected:
        label += ", cannot launch (expected)"
    return label


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary_line(report) -> str:
    """Each target once: `gfx1100: 1 changed, 14 byte-identical; byte-identical: gfx1200, gfx942 (30 cells)`."""
    per_target: dict[str, dict[str, int]] = {}
    for v in report.verdicts:
        counts = per_target.setdefault(v.target, {})
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    parts = []
    for target in sorted(per_target):
        counts = per_target[target]
        if set(counts) == {"same"}:
            continue
        parts.append(f"{target}: " + ", ".join(
            f"{counts[verdict]} {'byte-identical' if verdict == 'same' else verdict}"
            for verdict in Verdict if counts.get(verdict)))
    identical = sorted(t for t, counts in per_target.items() if set(counts) == {"same"})
    if identical:
        total = sum(per_target[t]["same"] for t in identical)
        parts.append(f"byte-identical: {', '.join(identical)} ({_plural(total, 'cell')})")
    return "; ".join(parts) if parts else "no cells selected"


def judgement_line(report, *, code: str = "`") -> str:
    """What the verdicts were judged against: the base revision (for a PR gate) and the declared scope;
    for an A/B, its two sides."""
    sides = getattr(report, "sides", None)
    if sides:
        return " vs ".join(side.describe() for side in sides)
    scopes = ", ".join(f"{code}{s}{code}" for s in report.scopes)
    scope = f"scope {scopes}" if scopes else "no scope (every cell must be unchanged)"
    if report.base:
        base = report.base
        how = "its kernels compiled" if base["compared"] == "compiled" else "its goldens"
        return f"judged against {code}{base['revision']}{code} ({code}{base['commit'][:12]}{code}, {how}), {scope}"
    return f"judged against the goldens, {scope}"


def accept_commands(report, *, kernel_filters: list[str] | None = None, extra_args: list[str] | tuple = (),
                    kernels: set[str] | None = None) -> list[str]:
    """The `xisa bless` commands that accept exactly the changed, new and unused cells, and nothing
    else: targets whose every selected cell is to be accepted are named with the check's own
    --kernel filters (the same selection, so bless touches nothing more); otherwise each kernel:case
    is named. None when the result cannot be trusted. An unused golden whose kernel no longer exists
    (`kernels` lists those that do) cannot be named to bless: outside a whole target it gets `rm`."""
    if report.problems:
        return []
    wanted: dict[str, set[str]] = {}
    selected: dict[str, set[str]] = {}
    orphans: dict[tuple[str, str], str] = {}   # (kernel:case, target) -> its golden file
    for v in report.verdicts:
        name = f"{v.kernel}:{v.case}"
        selected.setdefault(v.target, set()).add(name)
        if Verdict(v.verdict).acceptable:
            wanted.setdefault(v.target, set()).add(name)
            if v.verdict == "unused" and kernels is not None and v.kernel not in kernels:
                orphans[(name, v.target)] = v.golden_file
    groups: dict[frozenset[str], list[str]] = {}
    for target in sorted(wanted):
        groups.setdefault(frozenset(wanted[target]), []).append(target)
    commands, removals = [], []
    for cases, targets in groups.items():
        words = ["xisa", "bless", *extra_args]
        for target in targets:
            words += ["--arch", target]
        if report.shard is None and all(selected[t] == cases for t in targets):
            for flt in kernel_filters or []:
                words += ["--kernel", flt]
        else:
            names = set(cases)
            # A kernel whose every selected case is to be accepted, and which the check selected whole:
            # `--kernel KERNEL` is the same cells in fewer words (and removes its unused goldens too).
            for kernel in sorted({c.partition(":")[0] for c in cases}):
                if report.shard is None and (kernels is None or kernel in kernels) and \
                        _selects_whole_kernel(kernel, kernel_filters) and all(
                        {c for c in selected[t] if c.partition(":")[0] == kernel} <= cases for t in targets):
                    names = {c for c in names if c.partition(":")[0] != kernel} | {kernel}
            named = sorted(c for c in names if not all((c, t) in orphans for t in targets))
            removals += [orphans[(c, t)] for c in sorted(names) for t in targets if (c, t) in orphans]
            if not named:
                continue
            for name in named:
                words += ["--kernel", name]
        commands.append(shlex.join(words))
    if removals:
        commands.append(shlex.join(["rm", "-f", *(p for path in removals for p in (path, path[:-len(".yaml")] + ".isa"))]))
    return commands


def _selects_whole_kernel(kernel: str, kernel_filters: list[str] | None) -> bool:
    """Whether the check selected every case of `kernel` (no filter, or a filter with no case part)."""
    if not kernel_filters:
        return True
    return any(fnmatch.fnmatchcase(kernel, kpat) and cpat in ("", "*")
               for kpat, _, cpat in (f.partition(":") for f in kernel_filters))


def _arrow(base: Any, head: Any) -> str:
    if base is None:
        return _show(head)
    if head is None:
        return f"{base} → (none)"
    if base == head:
        return str(head)
    if isinstance(base, int) and isinstance(head, int):
        return f"{base} → {head} ({head - base:+d})"
    return f"{base} → {head}"


def _isa_of_verdicts(verdicts) -> str:
    for v in verdicts:
        if v.head is not None and v.head.analysis is not None:
            return v.head.analysis.isa
        if v.base is not None and v.base.data.get("isa"):
            return v.base.data["isa"]
    return _NO_ANALYSIS_ISA


def _row_values(v, counts: list[str], isa: str) -> list[str]:
    head = v.head.analysis if v.head and v.head.analysis else None
    base = v.base.analysis() if v.base else None

    def pair(key: str) -> str:
        return _arrow(measure(key, base) if base else None, measure(key, head) if head else None)

    cells = [pair("instructions"), *(pair(p) for p in counts), *(pair(key) for _, key in CHECK_COLUMNS[isa])]
    bsha = f"`{base.sha256[:12]}`" if base else "-"
    hsha = f"`{head.sha256[:12]}`" if head else "-"
    cells.append(hsha if bsha == hsha else f"{bsha} → {hsha}")
    return cells


def _check_header(counts: list[str], isa: str, *, code: bool) -> list[str]:
    quote = (lambda c: f"`{c}`") if code else (lambda c: c)
    return ["kernel:case", "instructions", *[quote(c) for c in counts], *(h for h, _ in CHECK_COLUMNS[isa]),
            "SHA-256", "verdict"]


MARKDOWN_LOOPS = 3     # changed loops per cell in a PR comment; the HTML report has them all


def render_markdown(report, *, counts: list[str], title: str, accept: list[str] | None = None) -> str:
    lines = [f"### {title}", "", f"**{summary_line(report)}**", "", f"_{judgement_line(report)}_", ""]
    if getattr(report, "sides", None):
        lines += [*target_summary_table(report), ""]
    for problem in report.problems:
        lines += [f"> :warning: {problem}", ""]
    if report.isolation_violations:
        lines += ["**isolation violated**: " + ", ".join(f"`{v.id}`" for v in report.isolation_violations), ""]
    if report.stale_goldens:
        lines += ["**goldens that disagree with this tree's compile** (bless them and commit): "
                  + ", ".join(f"`{v.id}`" for v in report.stale_goldens), ""]
    if accept:
        lines += ["To accept these goldens:", "", "```sh", *accept, "```", ""]
    targets = sorted({v.target for v in report.verdicts})
    for target in targets:
        rows = [v for v in report.verdicts if v.target == target]
        header = _check_header(counts, _isa_of_verdicts(rows), code=True)
        identical = all(v.verdict == "same" for v in rows)
        table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for v in rows:
            verdict = verdict_label(v)
            table.append("| " + " | ".join([f"`{v.kernel}:{v.case}`", *_row_values(v, counts, _isa_of_verdicts(rows)),
                                            verdict]) + " |")
        if identical:
            lines += [f"<details><summary>{target}: byte-identical ({len(rows)} cells)</summary>", "", *table, "",
                      "</details>", ""]
        else:
            lines += [f"#### {target}", "", *table, ""]
            for v in rows:
                if v.delta and v.delta.histogram:
                    top = ", ".join(f"`{m}` {b}→{h}" for m, b, h in v.delta.histogram[:8])
                    lines.append(f"- `{v.kernel}:{v.case}`: {top}")
                if v.delta and v.delta.binding:
                    moved = ", ".join(f"`{key}` {b} → {h}" for key, b, h in v.delta.binding[:8])
                    lines.append(f"- `{v.kernel}:{v.case}` binding: {moved}")
                if v.stages is not None:
                    lines.append(f"- `{v.kernel}:{v.case}` stages: {v.stages.phrase()}")
                if v.message and Verdict(v.verdict).explained:
                    first, *rest = v.message.splitlines() or [""]
                    lines.append(f"- `{v.kernel}:{v.case}`: {first}")
                    if rest:
                        lines += ["", "  ```", *(f"  {line}" for line in rest), "  ```"]
            lines += _markdown_where_table(rows)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# Source lines shown per changed target in markdown (a PR comment stays short: the rest is in the HTML report),
# and per changed cell in text.
MARKDOWN_LINE_ROWS = 3
TEXT_LINE_ROWS = 10


def _markdown_where_table(rows) -> list[str]:
    """Where a target's changed cells changed, as one short table: the changed loops (at most
    MARKDOWN_LOOPS per cell), then the source lines that explain the most of the change (MARKDOWN_LINE_ROWS
    for the target); the rest is in the HTML report."""
    table = ["", "| cell | where | change |", "|---|---|---|"]
    for v in rows:
        for change in (v.delta.loops[:MARKDOWN_LOOPS] if v.delta else ()):
            where, _, what = change.phrase(top=2).partition(": ")
            table.append(f"| `{v.kernel}:{v.case}` | {_md_cell(where)} | {_md_cell(what)} |")
    changes = [(v, c) for v in rows if v.lines for c in v.lines]
    changes.sort(key=lambda vc: (vc[1].rank(), vc[0].id))
    for v, change in changes[:MARKDOWN_LINE_ROWS]:
        text = f" `{_md_code(change.text)}`" if change.text else ""
        table.append(f"| `{v.kernel}:{v.case}` | `{change.loc}`{text} | {_md_cell(change.summary())} |")
    if len(changes) > MARKDOWN_LINE_ROWS:
        table.append(f"| | … {len(changes) - MARKDOWN_LINE_ROWS} more source lines (HTML report) | |")
    return table if len(table) > 3 else []


def _md_code(text: str, limit: int = 60) -> str:
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("`", "'").replace("|", "\\|")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def line_change_lines(v, limit: int = TEXT_LINE_ROWS) -> list[str]:
    """A changed cell's changes by source line, in `LineChange.rank` order, one line each (text output)."""
    if v.lines is None:
        return [f"{v.id}: source lines unknown (a side has no source-line table; record it with `{RECORD_COMMAND}`)"]
    if not v.lines:
        return []
    out = [f"{v.id}: by source line:"]
    out += [f"  {change.describe()}" for change in v.lines[:limit]]
    if len(v.lines) > limit:
        out.append(f"  ... {len(v.lines) - limit} more source lines (--format json or the HTML report)")
    return out


def render_check_text(console: Console, report, *, counts: list[str], quiet: bool = False,
                      accept: list[str] | None = None) -> None:
    if not quiet:
        for target in sorted({v.target for v in report.verdicts}):
            rows = [x for x in report.verdicts if x.target == target]
            isa = _isa_of_verdicts(rows)
            header = _check_header(counts, isa, code=False)
            lines = []
            for v in rows:
                label = verdict_label(v)
                values = [s.replace("`", "") for s in _row_values(v, counts, isa)]
                lines.append([f"{v.kernel}:{v.case}", *values, Text(label, style=_VERDICT_STYLE.get(v.verdict, ""))])
            console.print(_fitted_table(console, [(h, "left") for h in header], lines, title=target))
        for v in report.verdicts:
            if v.delta and v.verdict in ("changed", "expectation-failed", "cannot-launch"):
                top = ", ".join(f"{m} {b}->{h}" for m, b, h in v.delta.histogram[:8])
                res = ", ".join(f"{k} {b}->{h}" for k, (b, h) in v.delta.resources.items())
                console.print(Text(f"{v.id}: instructions {_arrow(*v.delta.instructions)}"
                                   + (f"; {top}" if top else "") + (f"; {res}" if res else "")))
                for key, b, h in v.delta.binding:
                    console.print(Text(f"  binding {key}: {b} -> {h}"))
                for change in v.delta.loops:
                    console.print(Text(f"  {change.phrase()}"))
            if v.stages is not None:
                console.print(Text(f"{v.id}: {v.stages.verdict_text()}"))
            if v.stages is not None:   # a changed cell: where its instructions changed, by source line
                for line in line_change_lines(v):
                    console.print(Text(line))
    for v in report.verdicts:
        if v.message and (Verdict(v.verdict).explained or v.verdict == Verdict.NEW):
            console.print(Text(error_block(f"{v.verdict}: {v.id}", v.message), style=_VERDICT_STYLE.get(v.verdict, "")))
    for v in report.stale_goldens:
        console.print(Text(f"stale golden: {v.id}: {v.message}", style="red"))
    for problem in report.problems:
        console.print(Text(f"untrusted: {problem}", style="red"))
    if report.isolation_violations:
        console.print(Text("isolation violated: " + ", ".join(v.id for v in report.isolation_violations),
                           style="bold red"))
    if report.base or report.scopes or getattr(report, "sides", None):
        console.print(Text(judgement_line(report, code="")))
    console.print(Text(summary_line(report)))
    if getattr(report, "sides", None):
        for line in target_summary_lines(report):
            console.print(Text(line))
    for command in accept or []:
        console.print(Text(f"to accept: {command}"))


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
            values = [str(r.analysis.instructions), *(_show(measure(p, r.analysis)) for p in counts)]
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


# ---------------------------------------------------------------- A/B and toolchain upgrades

def _resource_movement(summary) -> str:
    """`vgprs 3 up, 1 down (+24); scratch_bytes 1 up (+512)`: per resource, cells up and down, net change."""
    parts = []
    for key, (up, down, net) in summary.resources.items():
        moved = ", ".join(f"{n} {word}" for n, word in ((up, "up"), (down, "down")) if n)
        parts.append(f"{key} {moved} ({net:+d})")
    return "; ".join(parts)


def target_summary_lines(report) -> list[str]:
    """One line per target: verdict counts, instructions of the compared cells A → B, resources that moved."""
    lines = []
    for summary in target_summaries(report):
        counts = ", ".join(f"{summary.counts[v]} {'same' if v == 'same' else v}" for v in Verdict
                           if summary.counts.get(v))
        line = f"{summary.target}: {counts} ({_plural(summary.cells, 'cell')})"
        if summary.instructions != (0, 0):
            line += f"; instructions {_arrow(*summary.instructions)}"
        movement = _resource_movement(summary)
        lines.append(line + (f"; {movement}" if movement else ""))
    return lines


def target_summary_table(report) -> list[str]:
    """The per-target summary as a markdown table (the PR comment, the README)."""
    lines = ["| target | cells | same | changed | error | instructions A → B | resources (cells up/down, net) |",
             "|---|---|---|---|---|---|---|"]
    for summary in target_summaries(report):
        other = sum(n for v, n in summary.counts.items() if v not in ("same", "changed"))
        lines.append(f"| {summary.target} | {summary.cells} | {summary.counts.get('same', 0)} | "
                     f"{summary.counts.get('changed', 0)} | {other} | {_arrow(*summary.instructions)} | "
                     f"{_resource_movement(summary) or '-'} |")
    return lines


def upgrade_commit_message(upgrade, *, limit: int = 10) -> str:
    """The commit message `xisa bless` suggests when it rewrites goldens of another toolchain: the toolchains,
    per target what changed, and the largest resource changes."""
    old = ", ".join(f"{k} {v}" for k, v in sorted(upgrade.old.items()))
    new = ", ".join(f"{k} {v}" for k, v in sorted(upgrade.new.items()))
    subject = (f"goldens: Triton {upgrade.old.get('triton')} -> {upgrade.new.get('triton')}"
               if upgrade.old.get("triton") != upgrade.new.get("triton") else f"goldens: {old} -> {new}")
    lines = [subject, "", f"Re-blessed with {new} (the goldens were made with {old}).",
             f"{summary_line(upgrade.report)}", ""]
    lines += [f"- {line}" for line in target_summary_lines(upgrade.report)]
    largest = largest_resource_changes(upgrade.report, limit=limit)
    if largest:
        lines += ["", "Largest resource changes:"]
        lines += [f"- {cell_id}: {key} {_arrow(old_value, new_value)}" for cell_id, key, old_value, new_value in largest]
    changed = [v.id for v in upgrade.report.verdicts if v.verdict == "changed"]
    if changed:
        lines += ["", f"Changed cells ({len(changed)}): " + ", ".join(changed[:40])
                  + (f", and {len(changed) - 40} more" if len(changed) > 40 else "")]
    return "\n".join(lines) + "\n"
