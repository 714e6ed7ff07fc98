"""Instruction counts per kernel source line, and how two cells' counts differ line by line.

The compiler's line information (amdgcn `.loc`, nvdisasm's `//## File "...", line N`) gives each
instruction a source location (`Instruction.loc`). A cell's line table is a side table: never part of the
fingerprint or of what the analyzer counts, so a line moved by an edit above it moves neither the
SHA-256 nor the verdict, only the table's line numbers. Its counts add up to the cell's `instructions`;
instructions without a line (line 0, none given) are one explicit `NO_LINE` row.

Rows are plain mappings (as a golden and the result cache keep them): `loc` (`FILE:LINE`, FILE as
`xisa.compile.cell.SourceFiles` names it: from its top package's folder, else relative to the project), `text` (the source line, stripped),
`count` and `histogram` (base mnemonics). Two cells' tables are matched by the lines' text, in order per
file (a sequence diff), so inserting a line above a kernel shifts every number but changes nothing.

Pure: a stream or rows in, rows or changes out; reading the source files is the caller's.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xisa.analyze.model import Stream

# The row of the instructions the line information gives no source line.
NO_LINE = "(no line)"

Row = dict[str, Any]

# Triton's own @jit library (`tl.sum`, `tl.max`, `tl.cdiv`: triton/language/standard.py ...): an instruction the
# line information places there is attributed to the kernel line that called it, the innermost frame of its
# inlining chain outside the library, so each `tl.sum` of a kernel is its own row. A kernel's own @jit helpers
# keep their lines.
_TRITON_LIBRARY = re.compile(r"(?:^|/)triton/language/")


def in_triton_library(path: str) -> bool:
    return bool(_TRITON_LIBRARY.search(path))


def attributed_location(frames: list[tuple[str, int]]) -> str:
    """`FILE:LINE` of an instruction whose inlining chain is `frames` (innermost first; line 0: no line): the
    innermost frame outside Triton's library (the innermost frame when all are), or "" for none."""
    frames = [(path, line) for path, line in frames if line]
    if not frames:
        return ""
    path, line = next((f for f in frames if not in_triton_library(f[0])), frames[0])
    return f"{path}:{line}"


def split_loc(loc: str) -> tuple[str, int]:
    """`kernels/k.py:12` -> (`kernels/k.py`, 12); the no-line row -> (NO_LINE, 0)."""
    path, _, line = loc.rpartition(":")
    if not path or not line.isdigit():
        return NO_LINE, 0
    return path, int(line)


def count_by_line(stream: Stream) -> list[Row]:
    """One row per source location of `stream` (as the compiler wrote it; `text` empty), sorted, the no-line
    row last; counts and histograms as the analysis counts them (a dual-issue pair once)."""
    by_loc: dict[str, Counter] = {}
    for ins in stream.instructions():
        by_loc.setdefault(ins.loc or NO_LINE, Counter())[ins.histogram_keys()[1]] += 1
    return _rows((loc, "", counts) for loc, counts in by_loc.items())


def _rows(entries: Iterable[tuple[str, str, Counter]]) -> list[Row]:
    merged: dict[str, tuple[str, Counter]] = {}
    for loc, text, counts in entries:
        old_text, old = merged.get(loc, (text, Counter()))
        merged[loc] = (old_text or text, old + counts)

    def order(loc: str):
        path, line = split_loc(loc)
        return (path == NO_LINE, path, line)

    return [{"loc": loc, "text": text, "count": sum(counts.values()), "histogram": dict(sorted(counts.items()))}
            for loc, (text, counts) in sorted(merged.items(), key=lambda item: order(item[0]))]


def resolve(rows: Iterable[Row], *, path_of: Callable[[str], str], text_of: Callable[[str, int], str]) -> list[Row]:
    """The rows with each compiler path made `path_of(path)` (rows that meet are merged) and each line's
    text `text_of(compiler path, line)`."""
    entries = []
    for row in rows:
        path, line = split_loc(row["loc"])
        if path == NO_LINE:
            entries.append((NO_LINE, "", Counter(row["histogram"])))
        else:
            entries.append((f"{path_of(path)}:{line}", text_of(path, line), Counter(row["histogram"])))
    return _rows(entries)


def total(rows: Iterable[Row]) -> int:
    return sum(int(row["count"]) for row in rows)


@dataclass
class LineChange:
    """One source line whose instructions differ between two cells (base, head)."""

    base_loc: str | None       # None: the line has no instructions on that side
    head_loc: str | None
    text: str                  # the head's text (the base's where the head has none)
    base_count: int
    head_count: int
    histogram: list[tuple[str, int, int]] = field(default_factory=list)   # (mnemonic, base, head), largest first
    # How many of the cell's net added or removed instructions this line's change accounts for (per mnemonic,
    # the part of its change in the direction of the cell's net change). A line the compiler only traded
    # instructions with another line (one -2 s_mov, the other +2) explains none: a reviewer wants the edit first.
    explains: int = 0
    # The line's own text differs between the sides (paired rows): the line the author edited. Such lines
    # come first; a one-instruction edit otherwise hides behind the register allocator's ripples elsewhere.
    edited: bool = False

    @property
    def loc(self) -> str:
        return self.head_loc or self.base_loc or NO_LINE

    @property
    def delta(self) -> int:
        return self.head_count - self.base_count

    @property
    def size(self) -> int:
        """How much changed: the instructions added and removed, mnemonic by mnemonic."""
        return sum(abs(h - b) for _, b, h in self.histogram)

    def rank(self) -> tuple:
        """The order a reviewer reads changed lines in (smallest first): edited lines, then those that explain
        the most of the cell's net change, then the largest."""
        return (not self.edited, -self.explains, -self.size, -abs(self.delta), self.loc)

    def summary(self, mnemonics: int = 3) -> str:
        """`+40 v_cvt_f32_fp8, -8 v_and_b32` (the largest mnemonic changes), or `moved` when none."""
        parts = [f"{h - b:+d} {m}" for m, b, h in self.histogram[:mnemonics]]
        more = len(self.histogram) - mnemonics
        return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "") if parts else "no change"

    def describe(self) -> str:
        """`decode.py:123 `k = tl.load(...)`: +40 v_cvt_f32_fp8 (120 -> 160)`."""
        text = f" `{self.text}`" if self.text else ""
        moved = f" (was :{split_loc(self.base_loc)[1]})" if (
            self.base_loc and self.head_loc and self.base_loc != self.head_loc
            and split_loc(self.base_loc)[0] == split_loc(self.head_loc)[0]) else ""
        return f"{self.loc}{moved}{text}: {self.summary()} ({self.base_count} -> {self.head_count})"

    def to_json(self) -> dict[str, Any]:
        return {"loc": self.loc, "base_loc": self.base_loc, "head_loc": self.head_loc, "text": self.text,
                "base": self.base_count, "head": self.head_count, "delta": self.delta, "explains": self.explains,
                "edited": self.edited,
                "histogram": [{"mnemonic": m, "base": b, "head": h} for m, b, h in self.histogram]}


def match_rows(base: list[Row], head: list[Row]) -> list[tuple[Row | None, Row | None]]:
    """Pairs of rows that are the same source line on both sides: per file, the rows in line order matched by
    their text (a sequence diff), a replaced run paired in order, or by line number where the runs differ in
    length (an edited line stays itself); the no-line rows together. A row with no partner is paired with None."""
    def by_file(rows: list[Row]) -> dict[str, list[Row]]:
        files: dict[str, list[Row]] = {}
        for row in rows:
            files.setdefault(split_loc(row["loc"])[0], []).append(row)
        for rows_of_file in files.values():
            rows_of_file.sort(key=lambda r: split_loc(r["loc"])[1])
        return files

    base_files, head_files = by_file(base), by_file(head)
    pairs: list[tuple[Row | None, Row | None]] = []
    for path in sorted(set(base_files) | set(head_files)):
        old, new = base_files.get(path, []), head_files.get(path, [])
        if path == NO_LINE:
            pairs.append((old[0] if old else None, new[0] if new else None))
            continue
        matcher = difflib.SequenceMatcher(None, [r["text"] for r in old], [r["text"] for r in new], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                pairs.extend(zip(old[i1:i2], new[j1:j2]))
            else:   # runs of unequal length: a row keeps the partner at its own line number (edited in place)
                unpaired = {row["loc"]: row for row in new[j1:j2]}
                pairs.extend((row, unpaired.pop(row["loc"], None)) for row in old[i1:i2])
                pairs.extend((None, row) for row in unpaired.values())
    return pairs


def line_changes(base: list[Row], head: list[Row], *,
                 is_filler: Callable[[str], bool] = lambda mnemonic: False) -> list[LineChange]:
    """The source lines whose instruction counts differ: the edited ones (text changed) first, then those that
    explain most of the cell's net change, then the largest (instructions merely moved between lines, e.g. by
    the scheduler, come last).
    `is_filler`: mnemonics the ranking does not count (waits and delay hints, which the scheduler hangs on
    any nearby line); they are still listed."""
    changes = []
    for old, new in match_rows(base, head):
        old_hist: Mapping[str, int] = old["histogram"] if old else {}
        new_hist: Mapping[str, int] = new["histogram"] if new else {}
        hist = [(m, int(old_hist.get(m, 0)), int(new_hist.get(m, 0))) for m in set(old_hist) | set(new_hist)]
        hist = sorted((row for row in hist if row[1] != row[2]), key=lambda row: (-abs(row[2] - row[1]), row[0]))
        if not hist:
            continue
        changes.append(LineChange(base_loc=old["loc"] if old else None, head_loc=new["loc"] if new else None,
                                  text=(new or old or {}).get("text", ""), base_count=int(old["count"]) if old else 0,
                                  head_count=int(new["count"]) if new else 0, histogram=hist,
                                  edited=bool(old and new and old.get("text") != new.get("text"))))
    net: Counter = Counter()
    for change in changes:
        for m, b, h in change.histogram:
            net[m] += h - b
    for change in changes:
        change.explains = sum(min(abs(h - b), abs(net[m])) for m, b, h in change.histogram
                              if (h - b) * net[m] > 0 and not is_filler(m))
    changes.sort(key=LineChange.rank)
    return changes
