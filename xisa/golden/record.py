"""What a golden records, apart from where it lies: its format, the `Golden` as read back and validated
(`parse_golden`), and the cell's own record, whose differences from a compile make the cell changed
(`cell_differences`: exactly when `xisa bless` would rewrite the golden). Where goldens lie and how
they are read and written is `xisa.golden.store`'s.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.analyze.model import Analysis
from xisa.compile.result import CellResult
from xisa.errors import GoldenError
from xisa.yamlio import parse_yaml

FORMAT = "xisa-golden/1"
# `generated_by` (the bless command) is no longer written: a golden is a function of its cell's result
# alone. Goldens that still carry it are read as before.
_REQUIRED = {"format": str, "toolchain": dict, "kernel": str, "case": str, "target": str,
             "binding": dict, "options": dict, "sha256": str, "instructions": int, "blocks": int, "isa": str,
             "histogram": dict, "base_histogram": dict, "classes": dict, "resources": dict}
_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)
# The top-level `lines:` key and its block (items `- ` at column 0, their fields indented), as `dump_yaml` writes it.
_LINES_BLOCK = re.compile(r"^lines:.*\n(?:[ -].*\n)*", re.MULTILINE)


@dataclass
class Golden:
    path: Path
    data: dict[str, Any]              # everything but the source-line table
    stream_text: str | None
    # The `lines:` block's YAML text, parsed only when asked (`source_lines`): a changed cell's attribution
    # and bless need it, a byte-identical check does not, and parsing it would double a warm check's reads.
    lines_text: str | None = None
    display: str = ""
    _lines: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def toolchain(self) -> dict[str, str]:
        return self.data["toolchain"]

    def source_lines(self) -> list[dict[str, Any]] | None:
        """The golden's source-line table (`lines:`), or None when it has none (blessed before xisa recorded
        them). A malformed table is this golden's error."""
        if self._lines is None and self.lines_text is not None:
            rows = parse_yaml(self.lines_text, path=self.display, error=GoldenError).get("lines")
            if not _valid_lines(rows):
                raise GoldenError("not a list of source lines (loc, text, count, histogram: the histogram adding up "
                                  "to the count) (hand-edited?)", path=self.display, field="lines",
                                  fix="restore it from git, or delete the `lines:` block (it is optional)")
            self._lines = rows
        return self._lines

    def analysis(self) -> Analysis:
        return Analysis.from_record(self.data, self.stream_text or "")


# The keys of a golden that are not its cell's compile result: the layout (`format`, `stream`), the toolchain (judged
# on its own: another toolchain is an untrusted run, not a changed cell) and the side tables that explain a change
# without deciding one (`stages`, `lines`). Every other key is the cell: if it differs, bless would rewrite the
# golden, so check may not call the cell the same (`cell_differences`).
NOT_THE_CELL = frozenset({"format", "toolchain", "stream", "stages", "lines", "generated_by"})


def cell_record(result: CellResult) -> dict[str, Any]:
    """What a golden of `result` records about the cell itself: the golden's data minus `NOT_THE_CELL`, with
    values as its YAML reads back (lists, not tuples)."""
    return {k: _as_read_back(v) for k, v in cell_fields(result).items() if k not in NOT_THE_CELL}


def cell_fields(result: CellResult) -> dict[str, Any]:
    analysis = result.analysis
    assert analysis is not None
    return {"kernel": result.kernel, "case": result.case, "target": result.target,
            "binding": result.binding, "options": result.options, **analysis.to_record()}


def _as_read_back(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_read_back(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _as_read_back(v) for k, v in value.items()}
    return value


def cell_differences(golden_data: Mapping[str, Any], result: CellResult) -> list[str]:
    """The keys of the cell's record in which a golden and a compile differ (sorted): empty exactly when bless would
    leave the golden's cell as it is."""
    head = cell_record(result)
    base = {k: v for k, v in golden_data.items() if k not in NOT_THE_CELL}
    return sorted(k for k in set(head) | set(base) if head.get(k) != base.get(k))


def parse_golden(path: Path, text: str, *, display: str, stream_name: str, read_stream: Callable[[], str]) -> Golden:
    """A golden's YAML text validated, its stream (`read_stream`, asked only when the YAML names one) checked
    against its SHA-256."""
    conflict = _CONFLICT.search(text)
    if conflict:
        line = text.count("\n", 0, conflict.start()) + 1
        raise GoldenError(f"merge conflict markers at line {line}", path=display,
                          fix="resolve the conflict, or run `xisa bless` for this cell and review the result")
    blocks = _LINES_BLOCK.findall(text)
    if len(blocks) > 1:
        raise GoldenError("duplicate key `lines`", path=display, field="lines", fix="restore it from git or re-bless")
    lines_text = blocks[0] if blocks else None
    data = parse_yaml(_LINES_BLOCK.sub("", text) if blocks else text, path=display, error=GoldenError)
    if not isinstance(data, dict):
        raise GoldenError("not a golden mapping (truncated or hand-edited?)", path=display, fix="restore it or re-bless")
    if data.get("format") != FORMAT:
        raise GoldenError(f"format {data.get('format')!r} is not {FORMAT!r}", path=display, field="format",
                          fix="re-bless with this xisa version")
    for key, kind in _REQUIRED.items():
        value = data.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise GoldenError(f"missing or not a {kind.__name__} (truncated or hand-edited?)", path=display,
                              field=key, fix="restore it from git or re-bless")
    if not re.fullmatch(r"[0-9a-f]{64}", data["sha256"]):
        raise GoldenError("not a SHA-256", path=display, field="sha256")
    # Absent in goldens of analyzer 1: `check` reports those as made by another analyzer.
    if data.get("code_sha256") is not None and not re.fullmatch(r"[0-9a-f]{64}", str(data["code_sha256"])):
        raise GoldenError("not a SHA-256", path=display, field="code_sha256")
    sections = data.get("code_sections")   # absent in goldens of analyzer 1 and 2
    if sections is not None and not (isinstance(sections, dict) and all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]+", v) for k, v in sections.items())):
        raise GoldenError("not a mapping of code-object sections to digests (hand-edited?)", path=display,
                          field="code_sections", fix="restore it from git or re-bless")
    analyzer = data.get("analyzer", 1)
    if not isinstance(analyzer, int) or isinstance(analyzer, bool) or analyzer < 1:
        raise GoldenError("not a positive integer (hand-edited?)", path=display, field="analyzer",
                          fix="restore it from git or re-bless")
    stages = data.get("stages")   # absent in goldens blessed before xisa recorded stage fingerprints
    if stages is not None and not (isinstance(stages, dict) and stages and all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in stages.items())):
        raise GoldenError("not a mapping of stage names to SHA-256 fingerprints (hand-edited?)", path=display,
                          field="stages", fix="restore it from git, or delete the `stages:` block (it is optional)")
    if sum(v for v in data["histogram"].values() if isinstance(v, int)) != data["instructions"]:
        raise GoldenError("histogram does not add up to `instructions` (hand-edited?)", path=display,
                          field="histogram", fix="restore it from git or re-bless")
    stream_text = None
    if data.get("stream"):
        stream_text = read_stream()
        if hashlib.sha256(stream_text.encode("utf-8")).hexdigest() != data["sha256"]:
            raise GoldenError(f"stream file disagrees with the SHA-256 in {Path(display).name}",
                              path=str(Path(display).with_name(stream_name)),
                              fix="restore both files from git or re-bless")
    return Golden(path=path, data=data, stream_text=stream_text, lines_text=lines_text, display=display)


def _valid_lines(rows: Any) -> bool:
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return isinstance(rows, list) and all(
        isinstance(row, dict) and isinstance(row.get("loc"), str) and isinstance(row.get("text"), str)
        and count(row.get("count")) and isinstance(row.get("histogram"), dict)
        and all(isinstance(k, str) and count(v) for k, v in row["histogram"].items())
        and sum(row["histogram"].values()) == row["count"] for row in rows
    )
