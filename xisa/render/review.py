"""Check, diff and A/B reports for people: rich text, markdown for a PR comment, JUnit XML; the summary lines,
the `xisa bless` commands that accept a report, and the commit message of a toolchain upgrade. Data is
built once (`xisa.golden.verdict.CheckReport`), rendered here per format."""

from __future__ import annotations

import fnmatch
import re
import shlex

from rich.console import Console
from rich.text import Text

from xisa.analyze.backends import AMD, NVIDIA
from xisa.analyze.expect import measure
from xisa.analyze.stages import RECORD_COMMAND
from xisa.golden.ab import largest_resource_changes, target_summaries
from xisa.golden.store import golden_files
from xisa.golden.verdict import Verdict
from xisa.render.outcome import OUTCOME_STYLE, markdown_outcome, outcome_line
from xisa.render.formats import NO_ANALYSIS_ISA, arrow, cells_phrase, error_block, fitted_table, grouped_by_message, plural
from xisa.render.resolved import render_resolution

# The check and diff tables: one register count, spills or private memory, LDS, occupancy (keys
# as `measure` reads them: scratch_bytes on NVIDIA is stack + local bytes).
CHECK_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    AMD.isa: (("VGPR", "vgprs"), ("VGPR spills", "vgpr_spills"), ("LDS B", "lds_bytes"),
               ("waves/SIMD", "occupancy")),
    NVIDIA.isa: (("regs/thread", "registers"), ("stack+local B", "scratch_bytes"), ("shared B", "lds_bytes"),
             ("warps/SM", "occupancy")),
}


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


def summary_line(report) -> str:
    """Each target once: `gfx1100: 1 changed, 14 byte-identical; byte-identical: gfx1200, gfx942 (30 cells)`;
    targets with the same counts once together (`gfx1100, sm_90: 2 error each`: one spec error on 13 targets
    is one part, not 13)."""
    per_target: dict[str, dict[str, int]] = {}
    for v in report.verdicts:
        counts = per_target.setdefault(v.target, {})
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    alike: dict[str, list[str]] = {}
    for target in sorted(per_target):
        counts = per_target[target]
        if set(counts) != {"same"}:
            alike.setdefault(", ".join(f"{counts[verdict]} {'byte-identical' if verdict == 'same' else verdict}"
                                       for verdict in Verdict if counts.get(verdict)), []).append(target)
    parts = [f"{', '.join(targets)}: {counts}" + (" each" if len(targets) > 1 else "")
             for counts, targets in alike.items()]
    identical = sorted(t for t, counts in per_target.items() if set(counts) == {"same"})
    if identical:
        total = sum(per_target[t]["same"] for t in identical)
        parts.append(f"byte-identical: {', '.join(identical)} ({plural(total, 'cell')})")
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
        commands.append(shlex.join(["rm", "-f", *(p for path in removals for p in golden_files(path))]))
    return commands


def _selects_whole_kernel(kernel: str, kernel_filters: list[str] | None) -> bool:
    """Whether the check selected every case of `kernel` (no filter, or a filter with no case part)."""
    if not kernel_filters:
        return True
    return any(fnmatch.fnmatchcase(kernel, kpat) and cpat in ("", "*")
               for kpat, _, cpat in (f.partition(":") for f in kernel_filters))


def _isa_of_verdicts(verdicts) -> str:
    for v in verdicts:
        if v.head is not None and v.head.analysis is not None:
            return v.head.analysis.isa
        if v.base is not None and v.base.data.get("isa"):
            return v.base.data["isa"]
    return NO_ANALYSIS_ISA


def _row_values(v, counts: list[str], isa: str) -> list[str]:
    head = v.head.analysis if v.head and v.head.analysis else None
    base = v.base.analysis() if v.base else None

    def pair(key: str) -> str:
        return arrow(measure(key, base) if base else None, measure(key, head) if head else None)

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
    lines = [f"### {title}", "", markdown_outcome(report), "", f"**{summary_line(report)}**", "",
             f"_{judgement_line(report)}_", ""]
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
    # A message several cells share (a spec problem, once per target) is written once, after the targets' tables.
    explained = [v for v in report.verdicts if v.message and Verdict(v.verdict).explained]
    shared = [(ids, message) for ids, message in grouped_by_message([(v.id, v.message) for v in explained])
              if len(ids) > 1]
    shared_messages = {message for _, message in shared}
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
                if v.review_note:
                    lines.append(f"- `{v.kernel}:{v.case}`: {v.review_note}")
                if v.message and Verdict(v.verdict).explained:
                    if v.message in shared_messages:
                        lines.append(f"- `{v.kernel}:{v.case}`: {v.verdict}, the problem below that several cells share")
                        continue
                    lines += _markdown_message(f"`{v.kernel}:{v.case}`", v.message)
            lines += _markdown_where_table(rows)
            lines.append("")
    if shared:
        lines += ["#### Shared by several cells", ""]
        for ids, message in shared:
            lines += _markdown_message(cells_phrase(ids), message)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _markdown_message(who: str, message: str) -> list[str]:
    first, *rest = message.splitlines() or [""]
    return [f"- {who}: {first}", *(["", "  ```", *(f"  {line}" for line in rest), "  ```"] if rest else [])]


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
    if v.review_note:   # a compact golden this machine never compiled: no stream, no lines
        return [f"{v.id}: {v.review_note}"]
    if v.lines is None and v.base is not None and v.base.compact:
        return [f"{v.id}: source lines unknown (this machine's cache has not the compact golden's table; "
                "`xisa diff --base HEAD --compile-base` shows them)"]
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
            console.print(fitted_table(console, [(h, "left") for h in header], lines, title=target))
        for v in report.verdicts:
            if v.delta and v.verdict in ("changed", "expectation-failed", "cannot-launch"):
                top = ", ".join(f"{m} {b}->{h}" for m, b, h in v.delta.histogram[:8])
                res = ", ".join(f"{k} {b}->{h}" for k, (b, h) in v.delta.resources.items())
                console.print(Text(f"{v.id}: instructions {arrow(*v.delta.instructions)}"
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
        render_resolution(console, [v.head for v in report.verdicts if v.head is not None], differing_only=True)
    explained = [v for v in report.verdicts if v.message and (Verdict(v.verdict).explained or v.verdict == Verdict.NEW)]
    for verdict in dict.fromkeys(v.verdict for v in explained):   # one block per verdict and message
        for ids, message in grouped_by_message([(v.id, v.message) for v in explained if v.verdict == verdict]):
            console.print(Text(error_block(f"{verdict}: {cells_phrase(ids)}", message),
                               style=_VERDICT_STYLE.get(verdict, "")))
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
    console.print(Text(f"outcome: {outcome_line(report)}", style=OUTCOME_STYLE.get(report.exit_code, "")))


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
        line = f"{summary.target}: {counts} ({plural(summary.cells, 'cell')})"
        if summary.instructions != (0, 0):
            line += f"; instructions {arrow(*summary.instructions)}"
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
                     f"{summary.counts.get('changed', 0)} | {other} | {arrow(*summary.instructions)} | "
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
        lines += [f"- {cell_id}: {key} {arrow(old_value, new_value)}" for cell_id, key, old_value, new_value in largest]
    changed = [v.id for v in upgrade.report.verdicts if v.verdict == "changed"]
    if changed:
        lines += ["", f"Changed cells ({len(changed)}): " + ", ".join(changed[:40])
                  + (f", and {len(changed) - 40} more" if len(changed) > 40 else "")]
    return "\n".join(lines) + "\n"
