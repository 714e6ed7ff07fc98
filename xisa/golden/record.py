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
from xisa.compile.worker.result import CellResult
from xisa.errors import GoldenError
from xisa.yamlio import parse_yaml

FORMAT = "xisa-golden/1"            # the full layout: the stream file beside the YAML, the source lines inside it
FORMAT_COMPACT = "xisa-golden/2"    # the compact layout: the same record, stream and lines named by their SHA-256
LAYOUTS = {"full": FORMAT, "compact": FORMAT_COMPACT}
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
    # A compact golden's stream and source lines, looked up by their SHA-256 when a review asks (a byte-identical
    # check never does): (stream by sha256, lines by lines_sha256), each None where this machine has none.
    material: tuple[Callable[[str], str | None], Callable[[str], list[dict[str, Any]] | None]] | None = \
        field(default=None, repr=False)
    _looked_up: bool = field(default=False, repr=False)

    @property
    def toolchain(self) -> dict[str, str]:
        return self.data["toolchain"]

    @property
    def compact(self) -> bool:
        return self.data.get("format") == FORMAT_COMPACT

    def _look_up(self) -> None:
        """Fill a compact golden's stream and lines from the material store, once; only what hashes to the
        golden's own fingerprints comes back (the store verifies), so a review never shows another stream."""
        if self._looked_up or self.material is None:
            return
        self._looked_up = True
        find_stream, find_lines = self.material
        self.stream_text = find_stream(self.data["sha256"])
        digest = self.data.get("lines_sha256")
        rows = find_lines(digest) if digest else None
        if rows is not None and _valid_lines(rows):
            self._lines = rows

    def review_stream(self) -> str | None:
        """The golden's stream text: its stream file's (full layout), the material store's (compact), or None."""
        self._look_up()
        return self.stream_text

    def missing_material(self) -> str | None:
        """Why a review of this golden shows no stream diff, or None when it can: a full golden without a stream
        file, or a compact golden whose stream this machine has not compiled (a fresh clone, an emptied cache)."""
        if self.review_stream() is not None:
            return None
        if not self.compact:
            return "the golden has no stream file (stream_files = false): no stream diff to show"
        return (f"no stream diff: this machine has not compiled the compact golden's stream "
                f"(sha256 {self.data['sha256'][:12]})")

    def source_lines(self) -> list[dict[str, Any]] | None:
        """The golden's source-line table (`lines:`, or a compact golden's from the material store), or None when
        it has none (blessed before xisa recorded them, or not on this machine). A malformed table is this
        golden's error."""
        self._look_up()
        if self._lines is None and self.lines_text is not None:
            rows = parse_yaml(self.lines_text, path=self.display, error=GoldenError).get("lines")
            if not _valid_lines(rows):
                raise GoldenError("not a list of source lines (loc, text, count, histogram: the histogram adding up "
                                  "to the count) (hand-edited?)", path=self.display, field="lines",
                                  fix="restore it from git, or delete the `lines:` block (it is optional)")
            self._lines = rows
        return self._lines

    def analysis(self) -> Analysis:
        return Analysis.from_record(self.data, self.review_stream() or "")


# The keys of a golden that are not its cell's compile result: the layout (`format`, `stream`), the toolchain (judged
# on its own: another toolchain is an untrusted run, not a changed cell) and the side tables that explain a change
# without deciding one (`stages`, `lines`). Every other key is the cell: if it differs, bless would rewrite the
# golden, so check may not call the cell the same (`cell_differences`).
NOT_THE_CELL = frozenset({"format", "toolchain", "stream", "stages", "lines", "lines_sha256", "generated_by"})


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


def parse_golden(path: Path, text: str, *, display: str, stream_name: str, read_stream: Callable[[], str],
                 material=None) -> Golden:
    """A golden's YAML text validated, its stream (`read_stream`, asked only when the YAML names one) checked
    against its SHA-256. `material`: where a compact golden's stream and lines are looked up (a `MaterialStore`:
    `stream(sha256)`, `lines(digest)`); None: nowhere."""
    conflict = _CONFLICT.search(text)
    if conflict:
        line = text.count("\n", 0, conflict.start()) + 1
        raise GoldenError(f"merge conflict markers at line {line}", path=display,
                          fix="resolve the conflict, or run `xisa bless` for this cell and review the result")
    blocks = _LINES_BLOCK.findall(text)
    if len(blocks) > 1:
        raise GoldenError("duplicate key `lines`", path=display, field="lines", fix="restore it from git or re-bless")
    lines_text = blocks[0] if blocks else None
    body = _LINES_BLOCK.sub("", text) if blocks else text
    data = material.parse(body, path=display, error=GoldenError) if material is not None else \
        parse_yaml(body, path=display, error=GoldenError)
    if not isinstance(data, dict):
        raise GoldenError("not a golden mapping (truncated or hand-edited?)", path=display, fix="restore it or re-bless")
    if data.get("format") not in (FORMAT, FORMAT_COMPACT):
        raise GoldenError(f"format {data.get('format')!r} is neither {FORMAT!r} nor {FORMAT_COMPACT!r}", path=display,
                          field="format", fix="re-bless with this xisa version")
    if data["format"] == FORMAT_COMPACT:
        _check_compact(data, has_lines_block=bool(blocks), display=display)
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
    if data.get("stream") and data["format"] == FORMAT:
        stream_text = read_stream()
        if hashlib.sha256(stream_text.encode("utf-8")).hexdigest() != data["sha256"]:
            raise GoldenError(f"stream file disagrees with the SHA-256 in {Path(display).name}",
                              path=str(Path(display).with_name(stream_name)),
                              fix="restore both files from git or re-bless")
    found = (material.stream, material.lines) if material is not None and data["format"] == FORMAT_COMPACT else None
    return Golden(path=path, data=data, stream_text=stream_text, lines_text=lines_text, display=display, material=found)


def _check_compact(data: dict[str, Any], *, has_lines_block: bool, display: str) -> None:
    """A compact golden names its stream and lines by fingerprint and holds neither."""
    if data.get("stream") is not None or has_lines_block:
        field_name = "stream" if data.get("stream") is not None else "lines"
        raise GoldenError(f"a compact golden ({FORMAT_COMPACT}) holds no `{field_name}` (hand-edited?)", path=display,
                          field=field_name, fix="restore it from git or re-bless")
    digest = data.get("lines_sha256")
    if digest is not None and not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise GoldenError("not a SHA-256", path=display, field="lines_sha256", fix="restore it from git or re-bless")


def _valid_lines(rows: Any) -> bool:
    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return isinstance(rows, list) and all(
        isinstance(row, dict) and isinstance(row.get("loc"), str) and isinstance(row.get("text"), str)
        and count(row.get("count")) and isinstance(row.get("histogram"), dict)
        and all(isinstance(k, str) and count(v) for k, v in row["histogram"].items())
        and sum(row["histogram"].values()) == row["count"] for row in rows
    )
