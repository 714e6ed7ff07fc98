"""What every output format shares: a value or a change as text, a table whose values are never cut, an error
message as one block. The formats themselves: `compiled.py` (what `xisa compile` prints), `review.py` (check,
diff and A/B reports: text, markdown, JUnit), `reports.py` (which renderer for which report and format),
`html.py` (the page); JSON is `xisa.golden.report_json`'s and `compiled.compile_payload`'s."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from xisa.analyze.backends import BACKENDS

TEXT_ERROR_LINES = 20     # a compile error's last lines in text output; --json has the whole text


def show(value: Any) -> str:
    return "-" if value is None else str(value)


# Whose columns a table of cells without any analysis (all errors) shows: they stay empty.
NO_ANALYSIS_ISA = BACKENDS[0].isa


def fitted_table(console: Console, columns: list[tuple[str, str]], rows: list[list[Any]], **kw) -> Table:
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


def cells_phrase(ids: list[str]) -> str:
    """Cell ids (`kernel:case@target`) as one phrase: the id itself when one, else each kernel:case once with
    its targets, and cases on the same targets together: `k:c on 13 targets (gfx1100, gfx1151, ...)`,
    `a:x@gfx942; b:y on 2 targets (gfx90a, gfx942)`, `k:big, k:small on 13 targets (...)`."""
    by_case: dict[str, list[str]] = {}
    for cell_id in ids:
        head, _, target = cell_id.rpartition("@")
        by_case.setdefault(head, []).append(target)
    by_targets: dict[tuple[str, ...], list[str]] = {}
    for head, targets in by_case.items():
        by_targets.setdefault(tuple(targets), []).append(head)
    parts = [f"{heads[0]}@{targets[0]}" if len(targets) == 1 and len(heads) == 1
             else f"{', '.join(heads)} on {targets[0]}" if len(targets) == 1
             else f"{', '.join(heads)} on {len(targets)} targets ({', '.join(targets)})"
             for targets, heads in by_targets.items()]
    return "; ".join(parts)


def grouped_by_message(pairs: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """(cell id, message) pairs as one (cell ids, message) per distinct message, in the order each message was
    first seen: a problem shared by several cells (a spec error, once per target) is printed once."""
    groups: dict[str, list[str]] = {}
    for cell_id, message in pairs:
        groups.setdefault(message, []).append(cell_id)
    return [(ids, message) for message, ids in groups.items()]


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def arrow(base: Any, head: Any) -> str:
    if base is None:
        return show(head)
    if head is None:
        return f"{base} → (none)"
    if base == head:
        return str(head)
    if isinstance(base, int) and isinstance(head, int):
        return f"{base} → {head} ({head - base:+d})"
    return f"{base} → {head}"
