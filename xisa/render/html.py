"""Render a CheckReport as one self-contained HTML page: the isolation matrix, and per cell the
histogram, resource deltas and a side-by-side diff of the normalized instruction streams.

Pure: takes the report, returns text (`write_html` writes it atomically). No network, no external
assets: the CSS and JS are inline. Everything shown is escaped (html.escape in the page, JSON with
`<`, `>` and `&` escaped in the data blobs, `textContent` in the script).

Light with 1,000 cells: the matrix is one small table; each cell's details are a collapsed
<details> whose body is built by the script from a JSON blob only when it is opened. Only cells
whose streams differ carry a diff, and only its changed hunks with a few lines of context.
A `#open=<kernel:case@target>` fragment opens (and renders) that cell on load.
"""

from __future__ import annotations

import difflib
import html
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from xisa.analyze.backends import RESOURCE_ORDER
from xisa.analyze.lines import NO_LINE, split_loc
from xisa.fsio import write_atomic
from xisa.golden.verdict import (CANNOT_LAUNCH, CHANGED, ERROR, EXPECT_FAILED, NEW, SAME, UNUSED, CellVerdict,
                                 CheckReport)

HTML_SCHEMA_VERSION = 1
VERDICT_ORDER = (ERROR, CANNOT_LAUNCH, EXPECT_FAILED, CHANGED, NEW, UNUSED, SAME)
DIFF_CONTEXT = 3
MAX_DIFF_ROWS = 200            # per diff; beyond it the diff is cut with a note (the .isa files hold it all)
PAGE_DIFF_ROWS = 30_000        # per page: later cells get a note instead of a diff (the page stays a few MB)
HISTOGRAM_ROWS = 40
AUTO_OPEN_LIMIT = 5            # at most this many non-identical cells: open them on load
MATRIX_HINT = {SAME: "byte-identical", CHANGED: "changed", NEW: "new (no golden)", UNUSED: "unused golden",
               ERROR: "error", EXPECT_FAILED: "expectation failed", CANNOT_LAUNCH: "cannot launch"}
EXIT_LABEL = {0: "pass", 1: "regression", 2: "untrusted"}

# Register operands with their numbers abstracted, so a diff can align instructions whose registers
# were only renumbered: amdgcn v12 -> vN, s[4:5] -> s[N:N+1], a[0:15] -> a[N:N+15]; SASS R12 -> RN,
# UR4 -> URN, P0 -> PN, UP1 -> UPN, B0 -> BN (RZ, PT, URZ have no number and stay).
_REGISTER_RANGE = re.compile(r"\b(v|s|a|ttmp)\[(\d+):(\d+)\]")
_REGISTER = re.compile(r"\b(v|s|a|ttmp|UR|R|UP|P|B)\d+\b")


def abstract_registers(line: str) -> str:
    line = _REGISTER_RANGE.sub(lambda m: f"{m.group(1)}[N:N+{int(m.group(3)) - int(m.group(2))}]", line)
    return _REGISTER.sub(lambda m: f"{m.group(1)}N", line)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _json_blob(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no `</script>`, no `<!--`."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _lines(text: str | None) -> list[str]:
    return text.splitlines() if text else []


def _identical(n: int, renamed: int = 0) -> str:
    text = f"{n} identical line{'s' if n != 1 else ''}"
    return text + (f" ({renamed} differ only in register numbers)" if renamed else "")


MAX_EDIT_DISTANCE = 500       # Myers' search stops here: a larger change is aligned by difflib instead


def _myers(a: list[int], b: list[int], max_d: int) -> list[tuple[str, int, int, int, int]] | None:
    """Opcodes of a shortest edit script (Myers 1986, as git diffs): on repetitive code, where
    difflib's longest-block matching pairs the wrong copies of a line, it keeps a two-line change
    two lines. None when more than `max_d` lines must change."""
    n, m = len(a), len(b)
    if not n or not m:
        return [("insert" if m else "delete", 0, n, 0, m)] if n + m <= max_d else None
    v = {1: 0}
    trace = []
    for d in range(max_d + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _opcodes_from_trace(trace, n, m)
    return None


def _opcodes_from_trace(trace: list[dict[int, int]], n: int, m: int) -> list[tuple[str, int, int, int, int]]:
    steps = []              # (kind, i, j) backwards: kind "=" (a[i] == b[j]), "-" (a[i] gone), "+" (b[j] new)
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v, k = trace[d], x - y
        prev_k = k + 1 if k == -d or (k != d and v[k - 1] < v[k + 1]) else k - 1
        prev_x = v[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            steps.append(("=", x, y))
        if d > 0:
            steps.append(("+", x, prev_y) if x == prev_x else ("-", prev_x, y))
            x, y = prev_x, prev_y
    steps.reverse()
    opcodes: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    for kind, _, _ in steps:
        equal = kind == "="
        di, dj = (1, 1) if equal else ((1, 0) if kind == "-" else (0, 1))
        tag = "equal" if equal else "replace"
        if opcodes and (opcodes[-1][0] == "equal") == equal:
            t, i1, _, j1, _ = opcodes[-1]
            opcodes[-1] = (t, i1, i + di, j1, j + dj)
        else:
            opcodes.append((tag, i, i + di, j, j + dj))
        i, j = i + di, j + dj
    return [(("delete" if j1 == j2 else "insert" if i1 == i2 else tag), i1, i2, j1, j2)
            for tag, i1, i2, j1, j2 in opcodes]


def _diff_opcodes(a: list[str], b: list[str], *, fallback: bool = True) -> list[tuple[str, int, int, int, int]] | None:
    """Opcodes as difflib's: the common head and tail as they are, the middle by Myers when at most
    MAX_EDIT_DISTANCE lines change (each line that has no copy on the other side must), else by
    difflib, or None without `fallback`."""
    n, m = len(a), len(b)
    head = 0
    while head < min(n, m) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and a[n - 1 - tail] == b[m - 1 - tail]:
        tail += 1
    mid_a, mid_b = a[head:n - tail], b[head:m - tail]
    unmatched = Counter(mid_a)
    unmatched.subtract(Counter(mid_b))
    ops = None
    if sum(abs(count) for count in unmatched.values()) <= MAX_EDIT_DISTANCE:
        ids: dict[str, int] = {}
        ops = _myers([ids.setdefault(line, len(ids)) for line in mid_a],
                     [ids.setdefault(line, len(ids)) for line in mid_b], MAX_EDIT_DISTANCE)
    if ops is None:
        if not fallback:
            return None
        ops = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes()
    ops = [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in ops if i1 != i2 or j1 != j2]
    if head:
        ops.insert(0, ("equal", 0, head, 0, head))
    if tail:
        ops.append(("equal", n - tail, n, m - tail, m))
    merged: list[tuple[str, int, int, int, int]] = []
    for op in ops:
        if merged and merged[-1][0] == op[0] == "equal":
            merged[-1] = ("equal", merged[-1][1], op[2], merged[-1][3], op[4])
        else:
            merged.append(op)
    return merged or [("equal", 0, 0, 0, 0)]


def _score(opcodes, base: list[str], head: list[str]) -> tuple[int, int]:
    changed = sum(i2 - i1 + j2 - j1 for tag, i1, i2, j1, j2 in opcodes if tag != "equal")
    renamed = sum(base[i] != head[j] for tag, i1, i2, j1, j2 in opcodes if tag == "equal"
                  for i, j in zip(range(i1, i2), range(j1, j2)))
    return changed, renamed


def _realign(opcodes, base_keys: list[str], head_keys: list[str]):
    """Within each changed block of the exact diff, align again by the lines' keys: lines equal as
    written stay anchors, so a repeated line is never paired with the wrong copy of itself."""
    out: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in opcodes:
        pieces = [(tag, i1, i2, j1, j2)]
        sub = _diff_opcodes(base_keys[i1:i2], head_keys[j1:j2], fallback=False) if tag == "replace" else None
        if sub is not None:       # else the block stays as the exact diff has it: too large a change to realign
            pieces = [(t, i1 + a1, i1 + a2, j1 + b1, j1 + b2) for t, a1, a2, b1, b2 in sub if a1 != a2 or b1 != b2]
        for piece in pieces:
            if out and out[-1][0] == piece[0] == "equal":
                out[-1] = ("equal", out[-1][1], piece[2], out[-1][3], piece[4])
            else:
                out.append(piece)
    return out


def _grouped(opcodes: list[tuple[str, int, int, int, int]], context: int):
    """Changed hunks with `context` equal lines around them (difflib's get_grouped_opcodes)."""
    codes = list(opcodes)
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def stream_diff(base_text: str | None, head_text: str | None, *, context: int = DIFF_CONTEXT,
                max_rows: int = MAX_DIFF_ROWS, key: Callable[[str], str] | None = None) -> dict[str, Any]:
    """Side-by-side rows of the changed hunks: [tag, base_no, base_line, head_no, head_line]; tag is
    `eq` (head_line is null: the same text), `ren` (equal under `key`, e.g. registers abstracted,
    but not as written), `chg`, `del`, `ins` or `gap` (a run of equal lines left out).
    With `key` the lines are aligned by their keys: a renumbering costs no changed line."""
    base, head = _lines(base_text), _lines(head_text)
    opcodes = _diff_opcodes(base, head)
    if key is not None:
        # Two alignments by key: inside the exact diff's changed blocks (exact matches stay anchors, so a
        # repeated line is not paired with the wrong copy), or over the whole stream (when renumbering
        # left only chance exact matches). The one with fewer changed lines, then fewer renamed, wins.
        base_keys, head_keys = [key(line) for line in base], [key(line) for line in head]
        whole = _diff_opcodes(base_keys, head_keys, fallback=False)
        candidates = [_realign(opcodes, base_keys, head_keys)] + ([whole] if whole is not None else [])
        opcodes = min(candidates, key=lambda ops: _score(ops, base, head))
    renamed_total = 0
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal" and key is not None:
            renamed_total += sum(base[i] != head[j] for i, j in zip(range(i1, i2), range(j1, j2)))
    rows: list[list[Any]] = []
    added = removed = 0
    last_base = last_head = 0
    truncated = False

    def gap(i1: int, i2: int, j1: int) -> None:
        renamed = sum(base[i] != head[j] for i, j in zip(range(i1, i2), range(j1, j1 + i2 - i1)))
        rows.append(["gap", None, _identical(i2 - i1, renamed), None, ""])

    for group in _grouped(opcodes, context):
        first_base = group[0][1]
        if first_base > last_base:
            gap(last_base, first_base, last_head)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2)):
                    rows.append(["eq", i + 1, base[i], j + 1, None] if base[i] == head[j] else
                                ["ren", i + 1, base[i], j + 1, head[j]])
            elif tag == "replace":
                removed += i2 - i1
                added += j2 - j1
                for k in range(max(i2 - i1, j2 - j1)):
                    i, j = i1 + k, j1 + k
                    rows.append(["chg", i + 1 if i < i2 else None, base[i] if i < i2 else "",
                                 j + 1 if j < j2 else None, head[j] if j < j2 else ""])
            elif tag == "delete":
                removed += i2 - i1
                rows.extend(["del", i + 1, base[i], None, ""] for i in range(i1, i2))
            else:
                added += j2 - j1
                rows.extend(["ins", None, "", j + 1, head[j]] for j in range(j1, j2))
        last_base, last_head = group[-1][2], group[-1][4]
        if len(rows) > max_rows:
            truncated = True
            rows = rows[:max_rows]
            break
    if not truncated and rows and last_base < len(base):
        gap(last_base, len(base), last_head)
    return {"rows": rows, "added": added, "removed": removed, "renamed": renamed_total, "truncated": truncated,
            "base_lines": len(base), "head_lines": len(head)}


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
    base_stream = v.base.stream_text if v.base else None
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
    elif v.verdict == CHANGED and base_stream is None:
        data["diff_note"] = "the golden has no stream file (stream_files = false): no diff to show"
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


def render_html(report: CheckReport, *, title: str = "xisa report", exit_code: int | None = None,
                exit_note: str = "", accept: list[str] | None = None,
                loop_estimates: dict[tuple[str, str, str], str] | None = None) -> str:
    """`exit_code` is what the command exits with (the report's own verdict unless the command's
    policy differs, as a comparison with --base does); `exit_note` says why, `accept` how to bless;
    `loop_estimates`: (cell id, function, header) -> llvm-mca's text for a changed loop (`xisa.compile.mca`)."""
    verdicts = list(report.verdicts)
    code = report.exit_code if exit_code is None else exit_code
    budget = _DiffBudget(PAGE_DIFF_ROWS)
    index = {v.id: i for i, v in enumerate(verdicts)}
    targets = sorted({v.target for v in verdicts})
    rows = sorted({(v.kernel, v.case) for v in verdicts})
    by_key = {(v.kernel, v.case, v.target): v for v in verdicts}
    siblings: dict[tuple[str, str], list[CellVerdict]] = {}
    for v in sorted(verdicts, key=lambda v: v.target):
        siblings.setdefault((v.kernel, v.case), []).append(v)
    counts = report.counts()
    not_same = [v for v in verdicts if v.verdict != SAME]
    auto_open = {v.id for v in not_same} if len(not_same) <= AUTO_OPEN_LIMIT else set()

    out: list[str] = []
    w = out.append
    w("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
    w("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
    w("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n")
    w(f"<meta name=\"generator\" content=\"xisa report (html schema {HTML_SCHEMA_VERSION})\">\n")
    w(f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n")
    w(f"<header><h1>{_e(title)}</h1>\n")
    from xisa.render.formats import summary_line

    w(f"<p class=\"summary\" id=\"summary\">{_e(summary_line(report))}</p>\n")
    exit_label = EXIT_LABEL.get(code, str(code))
    w(f"<p class=\"meta\">exit code <b id=\"exit-code\" class=\"exit-{code}\">{code} "
      f"({_e(exit_label)})</b>" + (f" <span id=\"exit-note\">({_e(exit_note)})</span>" if exit_note else "")
      + " · toolchain "
      + ", ".join(f"{_e(k)} <code>{_e(val)}</code>" for k, val in sorted(report.toolchain.items()))
      + (" · scopes " + ", ".join(f"<code>{_e(s)}</code>" for s in report.scopes) if report.scopes else
         " · no scope declared")
      + (f" · shard {report.shard[0]}/{report.shard[1]}" if report.shard else "")
      + f" · {len(verdicts)} cells</p>\n")
    for side in getattr(report, "sides", None) or []:   # an A/B: "golden" below is side A, "head" side B
        w(f"<p class=\"meta side\" id=\"side-{_e(side.label.lower())}\">{_e(side.describe())}</p>\n")
    for problem in report.problems:
        w(f"<p class=\"problem\">untrusted: {_e(problem)}</p>\n")
    if report.isolation_violations:
        w("<p class=\"problem\" id=\"isolation\">isolation violated: "
          + ", ".join(f"<a href=\"#open={_e(v.id)}\">{_e(v.id)}</a>" for v in report.isolation_violations)
          + "</p>\n")
    if accept:
        w("<div class=\"accept\" id=\"accept\">to accept these goldens: "
          + "".join(f"<pre>{_e(command)}</pre>" for command in accept) + "</div>\n")
    w("</header>\n")

    # filter bar
    w("<nav class=\"filters\"><input id=\"filter\" type=\"search\" placeholder=\"filter: kernel, case, target, "
      "mnemonic…\" aria-label=\"filter\"> <select id=\"verdict-filter\" aria-label=\"verdict\">"
      "<option value=\"\">all verdicts</option><option value=\"not-same\">anything but same</option>")
    for verdict in VERDICT_ORDER:
        w(f"<option value=\"{_e(verdict)}\">{_e(verdict)} ({counts.get(verdict, 0)})</option>")
    w("</select> <span class=\"chips\">")
    for verdict in VERDICT_ORDER:
        if counts.get(verdict):
            w(f"<button type=\"button\" class=\"chip v-{_e(verdict)}\" data-verdict=\"{_e(verdict)}\">"
              f"{_e(verdict)} {counts[verdict]}</button>")
    w("</span> <span id=\"shown\"></span></nav>\n")

    # matrix
    w("<section><h2>Isolation matrix</h2>\n<div class=\"matrix-wrap\"><table id=\"matrix\" class=\"matrix\">"
      "<thead><tr><th>kernel:case</th>")
    for target in targets:
        w(f"<th>{_e(target)}</th>")
    w("</tr></thead>\n<tbody>\n")
    for kernel, case in rows:
        row_verdicts = [by_key.get((kernel, case, t)) for t in targets]
        present = " ".join(sorted({v.verdict for v in row_verdicts if v}))
        w(f"<tr data-key=\"{_e(kernel)}:{_e(case)}\" data-verdicts=\"{_e(present)}\"><th>{_e(kernel)}:{_e(case)}</th>")
        for target, v in zip(targets, row_verdicts):
            if v is None:
                w("<td class=\"none\" title=\"not compiled for this target\">·</td>")
                continue
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
            w(f"<td class=\"cell v-{_e(v.verdict)}{scope_cls}\" data-cell=\"{_e(v.id)}\" data-verdict=\"{_e(v.verdict)}\" "
              f"title=\"{_e(tip)}\"><a href=\"#open={_e(v.id)}\">{_e(text)}"
              + (f"<small>{_e(delta)}</small>" if delta else "") + "</a></td>")
        w("</tr>\n")
    w("</tbody></table></div>\n<p class=\"legend\">")
    for verdict in VERDICT_ORDER:
        w(f"<span class=\"swatch v-{_e(verdict)}\"></span>{_e(verdict)} ")
    w("· numbers are instruction counts (head; the golden's for unused cells) and their change</p></section>\n")

    # details, worst first
    def section(label: str, members: list[CellVerdict], *, open_: bool, sid: str) -> None:
        if not members:
            return
        w(f"<details class=\"group\" id=\"{sid}\"{' open' if open_ else ''}><summary><h2>{_e(label)} "
          f"({len(members)})</h2></summary>\n")
        for v in members:
            i = index[v.id]
            base_n, head_n = _instructions(v)
            counts_text = (f"{base_n} → {head_n}" if base_n is not None and head_n is not None and base_n != head_n
                           else str(head_n if head_n is not None else base_n if base_n is not None else "-"))
            extra = " in scope" if v.verdict == CHANGED and v.in_scope else ""
            extra += ", cannot launch (expected)" if _expected_no_launch(v) else ""
            w(f"<details class=\"cell-detail\" id=\"{_dom_id(i)}\" data-cell=\"{_e(v.id)}\" "
              f"data-verdict=\"{_e(v.verdict)}\"{' open' if v.id in auto_open else ''}>"
              f"<summary><span class=\"tag v-{_e(v.verdict)}\">{_e(v.verdict)}{_e(extra)}</span> "
              f"<code>{_e(v.id)}</code> <span class=\"muted\">{_e(counts_text)} instructions</span>"
              + (f" <span class=\"muted\">— {_e(v.message.splitlines()[0])}</span>"
                 if v.message and v.verdict != SAME else "")
              + f"</summary><div class=\"body\"></div>"
              f"<script type=\"application/json\" class=\"cell-data\">{_json_blob(_cell_data(v, budget, loop_estimates, siblings[(v.kernel, v.case)]))}</script>"
              f"</details>\n")
        w("</details>\n")

    ordered = sorted(not_same, key=lambda v: (VERDICT_ORDER.index(v.verdict) if v.verdict in VERDICT_ORDER else 99,
                                              v.target, v.kernel, v.case))
    w("<section id=\"details\">\n")
    section("Cells that differ or fail", ordered, open_=True, sid="group-differ")
    section("Byte-identical cells", [v for v in verdicts if v.verdict == SAME], open_=False, sid="group-same")
    w("</section>\n")
    w(f"<footer>generated by <code>xisa report</code> · self-contained, no network · "
      f"html schema {HTML_SCHEMA_VERSION}</footer>\n")
    w(f"<script>{_JS}</script>\n</body>\n</html>\n")
    return "".join(out)


def write_html(path: Path, text: str) -> None:
    """Write through a temp file in the same folder and os.replace: never a half-written page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text, mode=0o666)      # a report is for sharing


_CSS = """
:root{--same:#d8f0d8;--changed:#ffe08a;--new:#bfe3ff;--unused:#ecd0f5;--error:#ff9c9c;--expect:#ffb870;
--border:#ccc;--muted:#666;font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:14px}
body{margin:0 1.5em 2em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:.6em 0 .2em}h2{font-size:1.1em;display:inline;margin:0}
code,pre,.diff{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.summary{font-weight:600;margin:.2em 0}.meta{color:var(--muted);margin:.2em 0}
.problem{background:#ffe5e5;border-left:4px solid #c00;padding:.3em .6em;margin:.3em 0}
.exit-0{color:#176317}.exit-1{color:#a05a00}.exit-2{color:#b00000}
.filters{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid var(--border);z-index:2}
.filters input{width:28em;padding:.3em}.chip{border:1px solid var(--border);border-radius:1em;padding:.1em .7em;
cursor:pointer;margin-right:.2em}.chip.active{outline:2px solid #333}#shown{color:var(--muted)}
section{margin-top:1em}.matrix-wrap{overflow:auto;max-height:70vh}
table.matrix{border-collapse:collapse}.matrix th,.matrix td{border:1px solid var(--border);padding:2px 8px;
text-align:right;white-space:nowrap}.matrix thead th{position:sticky;top:0;background:#f4f4f4}
.matrix tbody th{text-align:left;font-weight:500;font-family:ui-monospace,monospace;font-size:12px}
.matrix td a{color:inherit;text-decoration:none;display:block}.matrix td small{margin-left:.4em;font-weight:700}
.matrix td.none{color:#bbb;text-align:center}.matrix td.in-scope{box-shadow:inset 0 0 0 2px #c9a100}
.v-same{background:var(--same)}.v-changed{background:var(--changed)}.v-new{background:var(--new)}
.v-unused{background:var(--unused)}.v-error{background:var(--error)}.v-expectation-failed{background:var(--expect)}
.v-cannot-launch{background:var(--error);background-image:repeating-linear-gradient(45deg,transparent 0 4px,#fff6 4px 8px)}
.matrix td.no-launch{box-shadow:inset 0 0 0 2px #b00000}
.legend .swatch{display:inline-block;width:1em;height:1em;border:1px solid var(--border);vertical-align:middle;
margin:0 .3em 0 .8em}.legend{color:var(--muted)}
details.group{margin:.6em 0}details.group>summary{cursor:pointer;padding:.3em 0}
details.cell-detail{border:1px solid var(--border);border-radius:4px;margin:.3em 0;padding:.2em .5em}
details.cell-detail>summary{cursor:pointer}.tag{padding:0 .4em;border-radius:3px;font-size:12px}
.muted{color:var(--muted)}.body{padding:.4em 0}.cols{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start}
table.res,table.hist{border-collapse:collapse;margin:.3em 0}.res td,.res th,.hist td,.hist th{padding:1px 8px;
border-bottom:1px solid #eee;text-align:right}.res td:first-child,.hist td:first-child{text-align:left}
.res tr.moved td{background:#fff3c4;font-weight:600}.up{color:#b00000}.down{color:#176317}
.bar{display:block;height:7px;margin:1px 0}.bar.base{background:#9aa7b8}.bar.head{background:#e08a1e}
.hist td.bars{width:260px;text-align:left}
.side-by-side{display:flex;gap:1em;align-items:flex-start}.side-by-side>*{flex:1 1 0;min-width:0}
.source-lines td.code{font-family:ui-monospace,monospace;white-space:pre-wrap}.source-lines .this{font-weight:bold}
.source-lines td.code,.source-lines td.no,.source-lines td.what{text-align:left}
.source-lines tr.chg td{background:#fff3c4}
table.diff{border-collapse:collapse;width:100%;table-layout:fixed;margin-top:.4em}
.diff td{padding:0 6px;white-space:pre-wrap;word-break:break-all;vertical-align:top}
.diff col.no{width:3.5em}.diff td.no{color:#999;text-align:right;user-select:none}
.diff tr.chg td.l,.diff tr.del td.l{background:#ffd7d5}.diff tr.chg td.r,.diff tr.ins td.r{background:#ccf5d3}
.diff tr.gap td{background:#f0f3f8;color:#667;text-align:center;font-style:italic}
.diff th{background:#f4f4f4;text-align:left;padding:2px 6px}
.diff tr.ren td.l,.diff tr.ren td.r{background:#f6f1ff;color:#555}
.tabs{margin:.4em 0 0}.tab{border:1px solid var(--border);background:#f4f4f4;padding:.2em .7em;cursor:pointer;
margin-right:.3em;border-radius:3px 3px 0 0}.tab.active{background:#fff;border-bottom-color:#fff;font-weight:600}
pre.message{background:#fff5f5;border-left:4px solid #c00;padding:.3em .6em;white-space:pre;overflow:auto}
.accept{margin:.3em 0}.accept pre{display:inline-block;margin:.1em .4em;padding:.1em .5em;background:#f4f4f4;
border:1px solid var(--border);border-radius:3px;white-space:pre-wrap}
.hidden{display:none!important}footer{margin-top:2em;color:var(--muted);font-size:12px}
"""

_JS = r"""
(function(){
"use strict";
function el(tag, cls, text){var e=document.createElement(tag);if(cls)e.className=cls;
  if(text!==undefined&&text!==null)e.textContent=String(text);return e;}
function fmt(v){return v===null||v===undefined?"–":String(v);}
function dataOf(d){var s=d.querySelector("script.cell-data");return s?JSON.parse(s.textContent):null;}
function renderResources(data){
  var t=el("table","res");var h=t.insertRow();["resource","golden","head","Δ"].forEach(function(x){h.appendChild(el("th",null,x));});
  data.resources.forEach(function(r){var tr=t.insertRow();var moved=r[1]!==r[2]&&!(r[1]===null&&data.verdict==="new");
    if(moved&&data.verdict!=="new")tr.className="moved";
    tr.appendChild(el("td",null,r[0]));tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));
    var d=el("td");if(typeof r[1]==="number"&&typeof r[2]==="number"&&r[1]!==r[2]){var n=r[2]-r[1];
      d.textContent=(n>0?"+":"")+n;d.className=(r[0]==="occupancy"?(n<0?"up":"down"):(n>0?"up":"down"));}
    tr.appendChild(d);});
  return t;}
function renderHistogram(data){
  var wrap=el("div");var label={delta:"histogram: golden vs head, largest changes first",
    head:"histogram (head, no golden): most frequent first",base:"histogram (golden only): most frequent first"};
  wrap.appendChild(el("div","muted",label[data.histogram_kind]||"histogram"));
  if(!data.histogram.length){wrap.appendChild(el("div","muted","no mnemonic count changed"));return wrap;}
  var max=1;data.histogram.forEach(function(r){max=Math.max(max,r[1]||0,r[2]||0);});
  var t=el("table","hist");var h=t.insertRow();["mnemonic","golden","head","Δ",""].forEach(function(x){h.appendChild(el("th",null,x));});
  data.histogram.forEach(function(r){var tr=t.insertRow();tr.appendChild(el("td",null,r[0]));
    tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));
    var d=el("td");if(r[1]!==null&&r[2]!==null){var n=r[2]-r[1];d.textContent=(n>0?"+":"")+n;d.className=n>0?"up":"down";}
    tr.appendChild(d);var bars=el("td","bars");
    if(r[1]!==null){var b=el("span","bar base");b.style.width=(100*r[1]/max)+"%";b.title="golden "+r[1];bars.appendChild(b);}
    if(r[2]!==null){var c=el("span","bar head");c.style.width=(100*r[2]/max)+"%";c.title="head "+r[2];bars.appendChild(c);}
    tr.appendChild(bars);});
  wrap.appendChild(t);return wrap;}
function renderDiffTable(diff){
  var wrap=el("div","diff-wrap");
  var t=el("table","diff");var cg=el("colgroup");["no","","no",""].forEach(function(c){var col=el("col");if(c)col.className=c;cg.appendChild(col);});
  t.appendChild(cg);var h=t.insertRow();h.appendChild(el("th",null,""));h.appendChild(el("th",null,"golden"));
  h.appendChild(el("th",null,""));h.appendChild(el("th",null,"head"));
  diff.rows.forEach(function(r){var tr=t.insertRow();tr.className=r[0];
    if(r[0]==="gap"){var g=el("td",null,"… "+r[2]+" …");g.colSpan=4;tr.appendChild(g);return;}
    tr.appendChild(el("td","no",r[1]===null?"":r[1]));tr.appendChild(el("td","l",r[2]));
    tr.appendChild(el("td","no",r[3]===null?"":r[3]));tr.appendChild(el("td","r",r[4]===null?r[2]:r[4]));});
  if(diff.truncated)wrap.appendChild(el("div","muted","cut after the first "+diff.rows.length+" rows"));
  wrap.insertBefore(t,wrap.firstChild);return wrap;}
function diffSummary(diff){return diff.removed+" lines removed, "+diff.added+" added ("+diff.base_lines+" → "+
  diff.head_lines+" lines)"+(diff.renamed?"; "+diff.renamed+" more differ only in register numbers":"");}
function renderDiffs(data){
  var wrap=el("div","diffs");var views=[];
  if(data.register_diff)views.push({key:"registers",label:"registers abstracted: "+diffSummary(data.register_diff),diff:data.register_diff});
  views.push({key:"exact",label:"exact: "+diffSummary(data.diff),diff:data.diff});
  var bar=el("div","tabs");wrap.appendChild(bar);var bodies=[];
  views.forEach(function(v,i){var b=el("button","tab"+(i===0?" active":""),v.label);b.type="button";b.dataset.view=v.key;bar.appendChild(b);
    var body=renderDiffTable(v.diff);body.dataset.view=v.key;if(i>0)body.classList.add("hidden");bodies.push(body);wrap.appendChild(body);
    b.addEventListener("click",function(){Array.prototype.forEach.call(bar.children,function(x){x.classList.toggle("active",x===b);});
      bodies.forEach(function(x){x.classList.toggle("hidden",x.dataset.view!==v.key);});});});
  wrap.insertBefore(el("div","muted","normalized instruction stream, golden vs head"+(views.length>1?
    " (registers abstracted: v12 → vN, s[4:5] → s[N:N+1], R12 → RN, so renumbered registers align)":"")),bar);
  return wrap;}
function renderBinding(data){
  var wrap=el("div");wrap.appendChild(el("div","muted","launch binding: golden vs head (what differs)"));
  var t=el("table","res binding");var h=t.insertRow();["field","golden","head"].forEach(function(x){h.appendChild(el("th",null,x));});
  data.binding.forEach(function(r){var tr=t.insertRow();tr.className="moved";tr.appendChild(el("td",null,r[0]));
    tr.appendChild(el("td",null,r[1]===null?"(none)":JSON.stringify(r[1])));tr.appendChild(el("td",null,r[2]===null?"(none)":JSON.stringify(r[2])));});
  wrap.appendChild(t);return wrap;}
function renderLoops(data){
  var wrap=el("div");wrap.appendChild(el("div","muted","loops whose counts changed: golden vs head (a loop's counts include its inner loops)"));
  data.loops.forEach(function(l){var t=el("table","res loop");var cap=t.createCaption();cap.textContent=l[0];
    var h=t.insertRow();["per iteration","golden","head"].forEach(function(x){h.appendChild(el("th",null,x));});
    l[1].concat(l[2]).forEach(function(r){var tr=t.insertRow();if(r[1]!==r[2])tr.className="moved";
      tr.appendChild(el("td",null,r[0]));tr.appendChild(el("td",null,fmt(r[1])));tr.appendChild(el("td",null,fmt(r[2])));});
    wrap.appendChild(t);if(l[3])wrap.appendChild(el("pre","muted",l[3]));});
  return wrap;}
function render(d){
  if(d.dataset.rendered)return;var data=dataOf(d);if(!data)return;d.dataset.rendered="1";
  var body=d.querySelector(".body");
  var info=el("div","muted","instructions "+fmt(data.instructions[0])+" → "+fmt(data.instructions[1])+
    " · golden "+(data.golden||"–")+" · sha256 "+(data.base_sha256?data.base_sha256.slice(0,16):"–")+" → "+
    (data.head_sha256?data.head_sha256.slice(0,16):"–"));
  body.appendChild(info);
  if(data.message)body.appendChild(el(data.message.indexOf("\n")>=0?"pre":"p","message",data.message));
  data.expectations.forEach(function(x){body.appendChild(el("p","problem","expectation failed: "+x));});
  if(data.launch)body.appendChild(el("p",data.verdict==="cannot-launch"?"problem":"muted",data.launch));
  if(data.stages)body.appendChild(el("p","stages",data.stages));
  if(data.verdict==="same"){body.appendChild(el("p","muted","byte-identical to the golden"));}
  var cols=el("div","cols");
  if(data.resources.length)cols.appendChild(renderResources(data));
  if(data.binding.length)cols.appendChild(renderBinding(data));
  if(data.verdict!=="same"&&(data.histogram.length||data.histogram_kind==="delta"))cols.appendChild(renderHistogram(data));
  if(data.loops.length)cols.appendChild(renderLoops(data));
  body.appendChild(cols);
  var side=el("div","side-by-side");
  if(data.source)side.appendChild(renderSource(data.source));
  if(data.diff)side.appendChild(renderDiffs(data));
  else if(data.diff_note)side.appendChild(el("p","muted",data.diff_note));
  body.appendChild(side);
}
function renderSource(src){
  var wrap=el("div","source");
  wrap.appendChild(el("div","muted","kernel source: instructions per line on each target"+
    (src.known?" (change on "+src.this+")":" (the golden has no source-line table)")));
  var t=el("table","res source-lines");var h=t.insertRow();
  ["line","source"].concat(src.targets).concat(["change"]).forEach(function(x){var th=el("th",null,x);
    if(x===src.this)th.className="this";h.appendChild(th);});
  src.rows.forEach(function(r){var tr=t.insertRow();if(r[4])tr.className="chg";
    tr.appendChild(el("td","no",r[0]));tr.appendChild(el("td","code",r[1]));
    r[2].forEach(function(n,i){var td=el("td","num"+(src.targets[i]===src.this?" this":""),n===null?"·":String(n));tr.appendChild(td);});
    tr.appendChild(el("td","what",r[3]?((r[3]>0?"+":"")+r[3]+": "+r[4]):(r[4]||"")));});
  wrap.appendChild(t);return wrap;}
var details=Array.prototype.slice.call(document.querySelectorAll("details.cell-detail"));
details.forEach(function(d){d.addEventListener("toggle",function(){if(d.open)render(d);});if(d.open)render(d);});
function openCell(id,scroll){
  var d=null;for(var i=0;i<details.length;i++){if(details[i].dataset.cell===id){d=details[i];break;}}
  if(!d)return false;var g=d.closest("details.group");if(g)g.open=true;render(d);d.open=true;
  if(scroll)d.scrollIntoView({block:"start"});return true;}
function hashParams(){var out={};(location.hash||"").replace(/^#/,"").split("&").forEach(function(p){
  var i=p.indexOf("=");if(i>0)out[p.slice(0,i)]=decodeURIComponent(p.slice(i+1));});return out;}
function fromHash(){var p=hashParams();
  if(p.filter!==undefined||p.verdict!==undefined){box.value=p.filter||"";sel.value=p.verdict||"";apply();}
  if(p.open)p.open.split(",").forEach(function(id,i){openCell(id,i===0&&p.scroll!=="0");});}
var box=document.getElementById("filter"),sel=document.getElementById("verdict-filter"),shown=document.getElementById("shown");
var rows=Array.prototype.slice.call(document.querySelectorAll("#matrix tbody tr"));
function hasVerdict(list,want){if(!want)return true;if(want==="not-same")return list.some(function(v){return v&&v!=="same";});
  return list.indexOf(want)>=0;}
function apply(){
  var q=box.value.trim().toLowerCase(),want=sel.value,n=0;
  rows.forEach(function(tr){var ok=(!q||tr.textContent.toLowerCase().indexOf(q)>=0||tr.dataset.key.toLowerCase().indexOf(q)>=0||
      Array.prototype.some.call(tr.querySelectorAll("td.cell"),function(td){return td.dataset.cell.toLowerCase().indexOf(q)>=0;}))&&
      hasVerdict(tr.dataset.verdicts.split(" "),want);
    tr.classList.toggle("hidden",!ok);if(ok)n++;});
  var m=0;details.forEach(function(d){var text=d.dataset.cell.toLowerCase();
    var ok=(!q||text.indexOf(q)>=0||(d.dataset.rendered&&d.textContent.toLowerCase().indexOf(q)>=0))&&
      hasVerdict([d.dataset.verdict],want);d.classList.toggle("hidden",!ok);if(ok)m++;});
  shown.textContent=(q||want)?(n+" rows, "+m+" cells shown"):"";
  Array.prototype.forEach.call(document.querySelectorAll(".chip"),function(c){c.classList.toggle("active",c.dataset.verdict===want);});}
box.addEventListener("input",apply);sel.addEventListener("change",apply);
Array.prototype.forEach.call(document.querySelectorAll(".chip"),function(c){c.addEventListener("click",function(){
  sel.value=sel.value===c.dataset.verdict?"":c.dataset.verdict;apply();});});
window.addEventListener("hashchange",fromHash);fromHash();
document.body.dataset.ready="1";
})();
"""
