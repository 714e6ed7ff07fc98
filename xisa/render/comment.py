"""The markdown report held under a size: GitHub refuses a PR comment over 65,536 characters (about 270 cells of
the full markdown), so a report that would be longer is written as its top changes instead, then a line saying
how many cells are left out and where the whole report is.

The full markdown (`xisa.render.review.render_markdown`) is kept whenever it fits. Otherwise: the title, the
verdict, the judgement, the problems, the isolation violations and the stale goldens (each list cut to a share
of the room, with its count), the bless commands (as many as fit), the counts of every target, then a table of
the cells that are not byte-identical, most important first (outside the scope before inside it; errors,
failed expectations, changes by the size of their instruction change), as many rows as fit, and the footer.
The result is never longer than `max_chars`.
"""

from __future__ import annotations

from xisa.render.outcome import markdown_outcome
from xisa.render.review import judgement_line, render_markdown, summary_line, verdict_label

# GitHub's limit is 65,536 characters; the default leaves room for a line a workflow appends (the artifact's link).
MARKDOWN_MAX_CHARS = 60000
MIN_CHARS = 2000          # below this not even the verdict and the footer fit
LIST_SHARE = 0.15         # of the room, for each list of cell ids in the head
ORDER = {"error": 0, "expect-failed": 1, "cannot-launch": 2, "changed": 3, "new": 4, "unused": 5}


def bounded_markdown(report, *, counts: list[str], title: str, accept: list[str] | None = None,
                     max_chars: int = MARKDOWN_MAX_CHARS, full_report: str = "the HTML report") -> str:
    """The markdown report, or its top changes when the whole would be longer than `max_chars`."""
    if max_chars < MIN_CHARS:
        raise ValueError(f"max_chars {max_chars} is below {MIN_CHARS}")
    full = render_markdown(report, counts=counts, title=title, accept=accept)
    if len(full) <= max_chars:
        return full
    shown = [v for v in report.verdicts if v.verdict != "same"]
    shown.sort(key=_importance)
    footer_room = 400
    lines = _head(report, title=title, accept=accept, room=max_chars - footer_room)
    rows = 0
    table = ["| cell | verdict | instructions | SHA-256 |", "|---|---|---|---|"]
    used = _size(lines) + _size(table)
    for v in shown:
        row = _row(v)
        if used + len(row) + 1 > max_chars - footer_room:
            break
        table.append(row)
        used += len(row) + 1
        rows += 1
    if rows:
        lines += [f"#### Top {rows} of {len(shown)} cells that are not byte-identical", "", *table, ""]
    same = len(report.verdicts) - len(shown)
    lines.append(f"_{len(shown) - rows} more cells that are not byte-identical and {same} byte-identical cells are "
                 f"not shown: the whole report ({len(full):,} characters) is over this comment's limit of "
                 f"{max_chars:,}. Every cell is in {full_report}._")
    text = "\n".join(lines).rstrip() + "\n"
    return text if len(text) <= max_chars else text[:max_chars - 2].rsplit("\n", 1)[0] + "\n…\n"


def _importance(v) -> tuple:
    """Outside the scope first, then by kind of verdict, then the largest instruction change."""
    change = 0
    if v.base is not None and v.head is not None and v.head.analysis is not None:
        change = abs(v.head.analysis.instructions - int(v.base.data.get("instructions") or 0))
    return (bool(v.in_scope), ORDER.get(v.verdict, 9), -change, v.id)


def _row(v) -> str:
    head = v.head.analysis if v.head is not None and v.head.analysis is not None else None
    base = v.base.data if v.base is not None else None
    before = base.get("instructions") if base else None
    after = head.instructions if head else None
    instructions = f"{before if before is not None else '-'} → {after if after is not None else '-'}"
    bsha, hsha = (base or {}).get("sha256"), head.sha256 if head else None
    sha = f"`{(bsha or '-')[:12]}` → `{(hsha or '-')[:12]}`" if bsha != hsha else f"`{(hsha or '-')[:12]}`"
    return f"| `{v.id}` | {verdict_label(v)} | {instructions} | {sha} |"


def _ids_line(label: str, ids: list[str], room: int) -> list[str]:
    if not ids:
        return []
    words, size = [], len(label) + 40
    for cid in ids:
        if size + len(cid) + 4 > room:
            break
        words.append(f"`{cid}`")
        size += len(cid) + 4
    rest = f" and {len(ids) - len(words)} more" if len(words) < len(ids) else ""
    return [f"**{label}** ({len(ids)}): " + ", ".join(words) + rest, ""]


def _head(report, *, title: str, accept: list[str] | None, room: int) -> list[str]:
    share = int(room * LIST_SHARE)
    lines = [f"### {title}", "", markdown_outcome(report), "", f"**{summary_line(report)}**", "",
             f"_{judgement_line(report)}_", ""]
    for problem in report.problems[:5]:
        lines += [f"> :warning: {problem[:share // 5]}", ""]
    if len(report.problems) > 5:
        lines += [f"> :warning: and {len(report.problems) - 5} more problems", ""]
    lines += _ids_line("isolation violated", [v.id for v in report.isolation_violations], share)
    lines += _ids_line("goldens that disagree with this tree's compile (bless them and commit)",
                       [v.id for v in report.stale_goldens], share)
    if accept:
        kept, size = [], 0
        for command in accept:
            if size + len(command) + 1 > share:
                break
            kept.append(command)
            size += len(command) + 1
        more = [f"# and {len(accept) - len(kept)} more commands (xisa check prints them all)"] if len(kept) < len(accept) else []
        lines += ["To accept these goldens:", "", "```sh", *kept, *more, "```", ""]
    return lines


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
