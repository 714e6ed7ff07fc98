"""A side-by-side diff of two normalized instruction streams: the changed hunks with a few lines of context.

The alignment is Myers' shortest edit script (as git diffs) for the middle of two streams, difflib beyond
MAX_EDIT_DISTANCE changed lines; with a `key` (`abstract_registers`) lines whose registers were only
renumbered align and show as renamed, not changed.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

DIFF_CONTEXT = 3
MAX_DIFF_ROWS = 200            # per diff; beyond it the diff is cut with a note (the .isa files hold it all)

# Register operands with their numbers abstracted, so a diff can align instructions whose registers
# were only renumbered: amdgcn v12 -> vN, s[4:5] -> s[N:N+1], a[0:15] -> a[N:N+15]; SASS R12 -> RN,
# UR4 -> URN, P0 -> PN, UP1 -> UPN, B0 -> BN (RZ, PT, URZ have no number and stay).
_REGISTER_RANGE = re.compile(r"\b(v|s|a|ttmp)\[(\d+):(\d+)\]")
_REGISTER = re.compile(r"\b(v|s|a|ttmp|UR|R|UP|P|B)\d+\b")


def abstract_registers(line: str) -> str:
    """The line with its register numbers abstracted (a diff key: a renumbering aligns)."""
    line = _REGISTER_RANGE.sub(lambda m: f"{m.group(1)}[N:N+{int(m.group(3)) - int(m.group(2))}]", line)
    return _REGISTER.sub(lambda m: f"{m.group(1)}N", line)


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


def diff_opcodes(a: list[str], b: list[str], *, fallback: bool = True) -> list[tuple[str, int, int, int, int]] | None:
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
        sub = diff_opcodes(base_keys[i1:i2], head_keys[j1:j2], fallback=False) if tag == "replace" else None
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
    opcodes = diff_opcodes(base, head)
    if key is not None:
        # Two alignments by key: inside the exact diff's changed blocks (exact matches stay anchors, so a
        # repeated line is not paired with the wrong copy), or over the whole stream (when renumbering
        # left only chance exact matches). The one with fewer changed lines, then fewer renamed, wins.
        base_keys, head_keys = [key(line) for line in base], [key(line) for line in head]
        whole = diff_opcodes(base_keys, head_keys, fallback=False)
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
