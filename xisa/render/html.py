"""Render a CheckReport as one self-contained HTML page: the isolation matrix, and per cell the
histogram, resource deltas and a side-by-side diff of the normalized instruction streams.

Pure: takes the report, returns text (`write_html` writes it atomically). No network, no external
assets: the CSS and JS (this package's `page.css` and `page.js`) are inline. Everything shown is escaped (html.escape in the page, JSON with
`<`, `>` and `&` escaped in the data blobs, `textContent` in the script).

Light with 1,000 cells: the matrix is one small table; each cell's details are a collapsed
<details> whose body is built by the script from a JSON blob only when it is opened. Only cells
whose streams differ carry a diff, and only its changed hunks with a few lines of context.
A `#open=<kernel:case@target>` fragment opens (and renders) that cell on load.
"""

from __future__ import annotations

import functools
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from xisa.analyze.backends import RESOURCE_ORDER
from xisa.analyze.lines import NO_LINE, split_loc
from xisa.analyze.streamdiff import abstract_registers, stream_diff
from xisa.fsio import write_atomic
from xisa.golden.verdict import CHANGED, SAME, CellVerdict, CheckReport, Verdict
from xisa.render.resolved import resolution_rows

HTML_SCHEMA_VERSION = 1
PAGE_DIFF_ROWS = 30_000        # per page: later cells get a note instead of a diff (the page stays a few MB)
HISTOGRAM_ROWS = 40
AUTO_OPEN_LIMIT = 5            # at most this many non-identical cells: open them on load
MATRIX_HINT = {Verdict.SAME: "byte-identical", Verdict.CHANGED: "changed", Verdict.NEW: "new (no golden)",
               Verdict.UNUSED: "unused golden", Verdict.ERROR: "error", Verdict.EXPECT_FAILED: "expectation failed",
               Verdict.CANNOT_LAUNCH: "cannot launch"}
OUTCOME_CELLS = 12   # cells out of scope linked in the outcome line; the matrix shows them all


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _json_blob(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no `</script>`, no `<!--`."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _resources(v: CellVerdict) -> list[list[Any]]:
    base = dict(v.base.data.get("resources", {})) if v.base else {}
    head = dict(v.head.analysis.resources) if v.head and v.head.analysis else {}
    keys = [k for k in RESOURCE_ORDER if k in base or k in head]
    keys += sorted(k for k in set(base) | set(head) if k not in RESOURCE_ORDER and not isinstance(
        base.get(k, head.get(k)), (dict, list)))
    return [[k, base.get(k) if v.base else None, head.get(k) if head else None] for k in keys]


def _histogram(v: CellVerdict) -> list[list[Any]]:
    if v.delta is not None:
        return [[m, b, h] for m, b, h in v.delta.histogram[:HISTOGRAM_ROWS]]
    head = v.head.analysis.histogram if v.head and v.head.analysis else None
    base = v.base.data.get("histogram") if v.base else None
    if head is not None and base is None:
        return [[m, None, n] for m, n in sorted(head.items(), key=lambda kv: (-kv[1], kv[0]))[:HISTOGRAM_ROWS]]
    if base is not None and head is None:
        return [[m, n, None] for m, n in sorted(base.items(), key=lambda kv: (-kv[1], kv[0]))[:HISTOGRAM_ROWS]]
    return []


def _instructions(v: CellVerdict) -> tuple[int | None, int | None]:
    base = v.base.data.get("instructions") if v.base else None
    head = v.head.analysis.instructions if v.head and v.head.analysis else None
    return base, head


class _DiffBudget:
    """Diff rows the page may still hold; cells past it get a note instead of a diff."""

    def __init__(self, rows: int):
        self.left = rows

    def take(self, rows: int) -> bool:
        if rows > self.left:
            self.left = 0       # keep the order of the page: no later, smaller diff jumps the queue
            return False
        self.left -= rows
        return True


def _left_out(v: CellVerdict) -> str:
    return (f"diff left out: this page holds at most {PAGE_DIFF_ROWS} diff rows; "
            f"`xisa report --html FILE --arch {v.target} --kernel {v.kernel}:{v.case}` makes a page with this "
            "cell's diff")


SOURCE_ROWS = 400             # per cell: the source lines shown beside its diff, the largest counts kept


def source_table(v: CellVerdict, siblings: list[CellVerdict]) -> dict[str, Any] | None:
    """A changed cell's kernel source lines (those the line information names) with their instruction counts on
    every target of the same kernel case (`siblings`, this cell included), and this cell's change per line."""
    if v.verdict != CHANGED or not (v.head and v.head.analysis and v.head.analysis.lines):
        return None
    targets = [s.target for s in siblings]
    counts: dict[str, dict[str, int]] = {}
    texts: dict[str, str] = {}
    for sibling in siblings:
        rows = sibling.head.analysis.lines if sibling.head and sibling.head.analysis else \
            (sibling.base.source_lines() or [] if sibling.base else [])
        for row in rows:
            counts.setdefault(row["loc"], {})[sibling.target] = int(row["count"])
            texts.setdefault(row["loc"], row["text"])
    changes = {c.head_loc: c for c in v.lines or [] if c.head_loc}
    removed = [c for c in v.lines or [] if not c.head_loc]
    order = sorted(counts, key=lambda loc: (split_loc(loc)[0] == NO_LINE, split_loc(loc)))
    if len(order) > SOURCE_ROWS:
        keep = set(sorted(order, key=lambda loc: -counts[loc].get(v.target, 0))[:SOURCE_ROWS]) | set(changes)
        order = [loc for loc in order if loc in keep]
    rows = [[loc, texts[loc], [counts[loc].get(t) for t in targets],
             changes[loc].delta if loc in changes else 0, changes[loc].summary() if loc in changes else ""]
            for loc in order]
    rows += [[c.base_loc, c.text, [None] * len(targets), c.delta, c.summary() + " (line gone)"] for c in removed]
    return {"targets": targets, "this": v.target, "rows": rows, "known": v.lines is not None}


def _cell_data(v: CellVerdict, budget: _DiffBudget | None = None,
               estimates: dict[tuple[str, str, str], str] | None = None,
               siblings: list[CellVerdict] | None = None) -> dict[str, Any]:
    base_n, head_n = _instructions(v)
    data: dict[str, Any] = {
        "id": v.id, "verdict": v.verdict, "in_scope": v.in_scope, "message": v.message, "golden": v.golden_file,
        "instructions": [base_n, head_n],
        "base_sha256": v.base.data.get("sha256") if v.base else None,
        "head_sha256": v.head.analysis.sha256 if v.head and v.head.analysis else None,
        "expectations": [str(f) for f in v.expectations],
        # `cannot launch: lds_bytes 98304 > 65536 per workgroup (targets/gfx942.yaml)`, expected or not
        "launch": str(v.launch) if v.launch is not None and not v.launch.launchable else None,
        "resources": _resources(v),
        "histogram": _histogram(v),
        "histogram_kind": "delta" if v.delta is not None else ("head" if v.base is None else "base"),
        "binding": [[key, b, h] for key, b, h in v.delta.binding] if v.delta else [],
        "stages": v.stages.verdict_text() if v.stages is not None else None,   # where the change started
        "source": source_table(v, siblings or [v]),   # per source line, every target; beside the diff
        # The loops whose counts changed: [where, [[figure, base, head], ...], [[mnemonic, base, head], ...],
        # llvm-mca's estimate of the head loop or null (`loop_estimates`)].
        "loops": [[c.where, [[k, b, h] for k, (b, h) in c.figures.items()], [list(r) for r in c.histogram[:HISTOGRAM_ROWS]],
                   (estimates or {}).get((v.id, c.head.function, c.head.header)) if c.head else None]
                  for c in (v.delta.loops if v.delta else ())],
        "diff": None, "register_diff": None,
    }
    base_stream = v.base.review_stream() if v.base else None
    head_stream = v.head.analysis.stream_text if v.head and v.head.analysis else None
    if base_stream is not None and head_stream is not None and base_stream != head_stream and budget \
            and not budget.left:
        data["diff_note"] = _left_out(v)
    elif base_stream is not None and head_stream is not None and base_stream != head_stream:
        exact = stream_diff(base_stream, head_stream)
        aligned = stream_diff(base_stream, head_stream, key=abstract_registers)
        if not aligned["renamed"]:
            aligned = None          # no line differs only in register numbers: the exact diff says it all
        budget = budget or _DiffBudget(PAGE_DIFF_ROWS)
        if budget.take(len(exact["rows"]) + (len(aligned["rows"]) if aligned else 0)):
            data["diff"], data["register_diff"] = exact, aligned
        else:
            data["diff_note"] = _left_out(v)
    elif v.verdict == CHANGED and base_stream is None and v.base is not None:
        data["diff_note"] = v.review_note or v.base.missing_material()
    return data


def _expected_no_launch(v: CellVerdict) -> bool:
    """A cell the spec expects not to launch on its target: its verdict is about its code, and the page
    still marks it."""
    return v.launch is not None and not v.launch.launchable and not v.launch.unexpected


def _dom_id(index: int) -> str:
    return f"cell-{index}"


def _fmt_delta(base: int | None, head: int | None) -> str:
    if base is None or head is None or base == head:
        return ""
    return f"{head - base:+d}"


def render_html(report: CheckReport, *, title: str = "xisa report", exit_note: str = "",
                accept: list[str] | None = None, loop_estimates: dict[tuple[str, str, str], str] | None = None) -> str:
    """The page states the report's own exit code (`CheckReport.exit_code`), the one the command exits with;
    `exit_note` says what the sides are (an A/B), `accept` how to bless; `loop_estimates`: (cell id, function,
    header) -> llvm-mca's text for a changed loop (`xisa.compile.tools.mca`)."""
    verdicts = list(report.verdicts)
    counts = report.counts()
    return "".join([
        _page_head(title),
        _page_header(report, title=title, exit_note=exit_note, accept=accept),
        _filter_bar(counts),
        _matrix(verdicts),
        _resolved(verdicts),
        _details(verdicts, loop_estimates),
        f"<footer>generated by <code>xisa report</code> · self-contained, no network · "
        f"html schema {HTML_SCHEMA_VERSION}</footer>\n",
        f"<script>{_asset('page.js')}</script>\n</body>\n</html>\n",
    ])


def _resolved(verdicts: list[CellVerdict]) -> str:
    """What each target resolved per kernel and case (`xisa.render.resolved`): the config, the platform facts,
    each value with the targets that bound it; notes on options Triton rewrote. Empty when nothing was read."""
    results = [v.head for v in verdicts if v.head is not None]
    rows = resolution_rows(results)
    notes = [(r.id, note) for r in results for note in (r.resolved or {}).get("notes", [])]
    if not rows and not notes:
        return ""
    out = ["<section id=\"resolved\"><h2>Resolved per target</h2>\n<table class=\"resolved\">"
           "<tr><th>kernel:case</th><th>what</th><th>value (targets)</th></tr>\n"]
    for case, what, values in rows:
        shown = " · ".join(f"<code>{_e(value)}</code> ({_e(', '.join(targets))})" for value, targets in values)
        row = "<tr class=\"differs\">" if len(values) > 1 else "<tr>"
        out.append(f"{row}<td>{_e(case)}</td><td>{_e(what)}</td><td>{shown}</td></tr>\n")
    out.append("</table>\n")
    out += [f"<p class=\"note\">{_e(cell)}: {_e(note)}</p>\n" for cell, note in notes]
    out.append("</section>\n")
    return "".join(out)


def _page_head(title: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
            f"<meta name=\"generator\" content=\"xisa report (html schema {HTML_SCHEMA_VERSION})\">\n"
            f"<title>{_e(title)}</title>\n<style>{_asset('page.css')}</style>\n</head>\n<body>\n")


def _page_header(report: CheckReport, *, title: str, exit_note: str, accept: list[str] | None) -> str:
    """The title; one line with the command's outcome and why (the cells outside the scope linked in it);
    the summary; the exit code and what it rests on; the sides of an A/B; what cannot be trusted; and the
    commands that accept the goldens."""
    from xisa.render.outcome import outcome_sentence
    from xisa.render.review import summary_line

    # One line: the outcome and why (colour of the exit code), the cells out of scope linked after it.
    code = report.exit_code
    out = [f"<header><h1>{_e(title)}</h1>\n",
           f"<p class=\"outcome exit-{code}\" id=\"outcome\">{_e(outcome_sentence(report))}"]
    if report.isolation_violations:
        shown = report.isolation_violations[:OUTCOME_CELLS]
        more = len(report.isolation_violations) - len(shown)
        out.append(": <span id=\"isolation\">"
                   + ", ".join(f"<a href=\"#open={_e(v.id)}\">{_e(v.id)}</a>" for v in shown)
                   + (f" and {more} more" if more else "") + "</span>")
    out.append("</p>\n")
    out.append(f"<p class=\"summary\" id=\"summary\">{_e(summary_line(report))}</p>\n")
    out.append(f"<p class=\"meta\">exit code <b id=\"exit-code\">{code}</b>"
               + (f" <span id=\"exit-note\">({_e(exit_note)})</span>" if exit_note else "")
               + " · toolchain "
               + ", ".join(f"{_e(k)} <code>{_e(val)}</code>" for k, val in sorted(report.toolchain.items()))
               + (" · scopes " + ", ".join(f"<code>{_e(s)}</code>" for s in report.scopes) if report.scopes else
                  " · no scope declared")
               + (f" · shard {report.shard[0]}/{report.shard[1]}" if report.shard else "")
               + f" · {len(report.verdicts)} cells</p>\n")
    for side in getattr(report, "sides", None) or []:   # an A/B: "golden" below is side A, "head" side B
        out.append(f"<p class=\"meta side\" id=\"side-{_e(side.label.lower())}\">{_e(side.describe())}</p>\n")
    out += [f"<p class=\"problem\">untrusted: {_e(problem)}</p>\n" for problem in report.problems]
    if accept:
        out.append("<div class=\"accept\" id=\"accept\">to accept these goldens: "
                   + "".join(f"<pre>{_e(command)}</pre>" for command in accept) + "</div>\n")
    out.append("</header>\n")
    return "".join(out)


def _filter_bar(counts: dict[str, int]) -> str:
    out = ["<nav class=\"filters\"><input id=\"filter\" type=\"search\" placeholder=\"filter: kernel, case, target, "
           "mnemonic…\" aria-label=\"filter\"> <select id=\"verdict-filter\" aria-label=\"verdict\">"
           "<option value=\"\">all verdicts</option><option value=\"not-same\">anything but same</option>"]
    out += [f"<option value=\"{_e(verdict)}\">{_e(verdict)} ({counts.get(verdict, 0)})</option>"
            for verdict in Verdict]
    out.append("</select> <span class=\"chips\">")
    out += [f"<button type=\"button\" class=\"chip v-{_e(verdict)}\" data-verdict=\"{_e(verdict)}\">"
            f"{_e(verdict)} {counts[verdict]}</button>" for verdict in Verdict if counts.get(verdict)]
    out.append("</span> <span id=\"shown\"></span></nav>\n")
    return "".join(out)


def _matrix(verdicts: list[CellVerdict]) -> str:
    """The isolation matrix: a row per kernel case, a column per target, each cell's instruction count."""
    targets = sorted({v.target for v in verdicts})
    by_key = {(v.kernel, v.case, v.target): v for v in verdicts}
    out = ["<section><h2>Isolation matrix</h2>\n<div class=\"matrix-wrap\"><table id=\"matrix\" class=\"matrix\">"
           "<thead><tr><th>kernel:case</th>"]
    out += [f"<th>{_e(target)}</th>" for target in targets]
    out.append("</tr></thead>\n<tbody>\n")
    for kernel, case in sorted({(v.kernel, v.case) for v in verdicts}):
        row_verdicts = [by_key.get((kernel, case, t)) for t in targets]
        present = " ".join(sorted({v.verdict for v in row_verdicts if v}))
        out.append(f"<tr data-key=\"{_e(kernel)}:{_e(case)}\" data-verdicts=\"{_e(present)}\">"
                   f"<th>{_e(kernel)}:{_e(case)}</th>")
        out += [_matrix_cell(v) for v in row_verdicts]
        out.append("</tr>\n")
    out.append("</tbody></table></div>\n<p class=\"legend\">")
    out += [f"<span class=\"swatch v-{_e(verdict)}\"></span>{_e(verdict)} " for verdict in Verdict]
    out.append("· numbers are instruction counts (head; the golden's for unused cells) and their change</p></section>\n")
    return "".join(out)


def _matrix_cell(v: CellVerdict | None) -> str:
    if v is None:
        return "<td class=\"none\" title=\"not compiled for this target\">·</td>"
    base_n, head_n = _instructions(v)
    shown = head_n if head_n is not None else base_n
    delta = _fmt_delta(base_n, head_n)
    label = MATRIX_HINT.get(v.verdict, v.verdict)
    if v.verdict == CHANGED:
        label += " (in scope)" if v.in_scope else " (outside the scope)"
    if _expected_no_launch(v):
        label += "; cannot launch (expected)"
    tip = f"{v.id}: {label}" + (f"; instructions {base_n} → {head_n}" if delta else "") + \
          (f"; {v.message}" if v.message and v.verdict != SAME else "")
    text = "err" if shown is None else str(shown)
    scope_cls = " in-scope" if v.verdict == CHANGED and v.in_scope else ""
    scope_cls += " no-launch" if _expected_no_launch(v) else ""
    return (f"<td class=\"cell v-{_e(v.verdict)}{scope_cls}\" data-cell=\"{_e(v.id)}\" data-verdict=\"{_e(v.verdict)}\" "
            f"title=\"{_e(tip)}\"><a href=\"#open={_e(v.id)}\">{_e(text)}"
            + (f"<small>{_e(delta)}</small>" if delta else "") + "</a></td>")


def _details(verdicts: list[CellVerdict], loop_estimates: dict[tuple[str, str, str], str] | None) -> str:
    """Each cell's collapsed details, worst first: its data as a JSON blob the script renders when opened."""
    budget = _DiffBudget(PAGE_DIFF_ROWS)
    index = {v.id: i for i, v in enumerate(verdicts)}
    siblings: dict[tuple[str, str], list[CellVerdict]] = {}
    for v in sorted(verdicts, key=lambda v: v.target):
        siblings.setdefault((v.kernel, v.case), []).append(v)
    not_same = [v for v in verdicts if v.verdict != SAME]
    auto_open = {v.id for v in not_same} if len(not_same) <= AUTO_OPEN_LIMIT else set()

    def group(label: str, members: list[CellVerdict], *, open_: bool, sid: str) -> str:
        if not members:
            return ""
        return (f"<details class=\"group\" id=\"{sid}\"{' open' if open_ else ''}><summary><h2>{_e(label)} "
                f"({len(members)})</h2></summary>\n"
                + "".join(_cell_detail(v, index[v.id], v.id in auto_open,
                                       _cell_data(v, budget, loop_estimates, siblings[(v.kernel, v.case)]))
                          for v in members)
                + "</details>\n")

    rank = {verdict: i for i, verdict in enumerate(Verdict)}   # worst first
    ordered = sorted(not_same, key=lambda v: (rank.get(v.verdict, 99), v.target, v.kernel, v.case))
    return ("<section id=\"details\">\n" + group("Cells that differ or fail", ordered, open_=True, sid="group-differ")
            + group("Byte-identical cells", [v for v in verdicts if v.verdict == SAME], open_=False, sid="group-same")
            + "</section>\n")


def _cell_detail(v: CellVerdict, i: int, opened: bool, data: dict[str, Any]) -> str:
    base_n, head_n = _instructions(v)
    counts_text = (f"{base_n} → {head_n}" if base_n is not None and head_n is not None and base_n != head_n
                   else str(head_n if head_n is not None else base_n if base_n is not None else "-"))
    extra = " in scope" if v.verdict == CHANGED and v.in_scope else ""
    extra += ", cannot launch (expected)" if _expected_no_launch(v) else ""
    return (f"<details class=\"cell-detail\" id=\"{_dom_id(i)}\" data-cell=\"{_e(v.id)}\" "
            f"data-verdict=\"{_e(v.verdict)}\"{' open' if opened else ''}>"
            f"<summary><span class=\"tag v-{_e(v.verdict)}\">{_e(v.verdict)}{_e(extra)}</span> "
            f"<code>{_e(v.id)}</code> <span class=\"muted\">{_e(counts_text)} instructions</span>"
            + (f" <span class=\"muted\">— {_e(v.message.splitlines()[0])}</span>"
               if v.message and v.verdict != SAME else "")
            + f"</summary><div class=\"body\"></div>"
            f"<script type=\"application/json\" class=\"cell-data\">{_json_blob(data)}</script>"
            f"</details>\n")


def write_html(path: Path, text: str) -> None:
    """Write through a temp file in the same folder and os.replace: never a half-written page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=0o666)      # a report is for sharing


@functools.cache
def _asset(name: str) -> str:
    """The page's stylesheet or script, a data file of this package (`page.css`, `page.js`)."""
    return resources.files("xisa.render").joinpath(name).read_text(encoding="utf-8")
