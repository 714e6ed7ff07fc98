"""Review material: the instruction streams and source-line tables that a compact golden (`xisa-golden/2`) names
by fingerprint instead of holding, kept on this machine beside xisa's cache.

A compact golden holds every field a verdict judges (the stream's `sha256`, the code object's `code_sha256`, the
counts, ...) but not the stream text nor the source-line table, which only explain a change. Every compile
xisa judges or blesses puts both here, named by their own SHA-256, so the review of a later change shows the
stream diff, the loops and the lines of the golden's compile whenever this machine (or a restored CI cache)
compiled it once. What is read back is hashed again: a file that does not hash to its name is not the
golden's, and the review then says the material is missing, never shows another stream's diff.
Entries are content-addressed, so writing one twice writes the same bytes; each is written through a temp
file and `os.replace`, so an interrupted write leaves no half entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from xisa.compile.incremental.cache import REVIEW, REVIEW_LINES, REVIEW_PARSED, REVIEW_STREAMS, check_cache_subfolder
from xisa.compile.worker.result import CellResult
from xisa.fsio import write_atomic
from xisa.yamlio import parse_yaml

FOLDER = REVIEW       # under the cache folder; its entries count towards the cache's size limit
_STREAMS, _LINES = REVIEW_STREAMS, REVIEW_LINES


def lines_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """The canonical text of a source-line table: what `lines_sha256` fingerprints and the store keeps."""
    return json.dumps([dict(row) for row in rows], sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"


def lines_digest(rows: Iterable[Mapping[str, Any]]) -> str:
    return hashlib.sha256(lines_text(rows).encode("utf-8")).hexdigest()


class MaterialStore:
    """Streams (`streams/<sha256>.isa`) and source-line tables (`lines/<sha256>.json`) under `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.wrote = False   # an entry was written (`xisa.api.workspace.trim_written` trims after the command)
        self._trusted = False

    def _trust(self) -> None:
        """Refuse, as the result cache does, a store someone else could write (read by `check --no-cache` and the
        PR gate, which open no result cache): once a store."""
        if not self._trusted:
            for folder in (self.folder, *(self.folder / kind for kind in (_STREAMS, _LINES, REVIEW_PARSED))):
                check_cache_subfolder(folder)
            self._trusted = True

    @classmethod
    def in_cache(cls, cache_dir: Path) -> "MaterialStore":
        return cls(cache_dir / FOLDER)

    def _path(self, kind: str, digest: str, suffix: str) -> Path:
        return self.folder / kind / digest[:2] / f"{digest}{suffix}"

    def _read(self, path: Path, digest: str) -> str | None:
        self._trust()
        if any(os.path.islink(p) for p in (self.folder, path.parent.parent, path.parent, path)):
            return None      # never read through a link
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            return None      # damaged or not ours: not the golden's material
        with contextlib.suppress(OSError):
            os.utime(path)   # used: the cache's least-recently-used trim keeps it longer
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def _put(self, path: Path, text: str) -> bool:
        """Write an entry unless it is there already, whole (a damaged one, of another size, is replaced);
        whether it was written."""
        data = text.encode("utf-8")
        with contextlib.suppress(OSError):
            if path.stat().st_size == len(data) and not path.is_symlink():
                return False
        if any(os.path.islink(p) for p in (self.folder, path.parent.parent, path.parent, path)):
            return False
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, data, mode=0o644)
        self.wrote = True
        return True

    def stream(self, sha256: str) -> str | None:
        """The stream text whose SHA-256 is `sha256`, or None when this machine has none."""
        return self._read(self._path(_STREAMS, sha256, ".isa"), sha256)

    def lines(self, digest: str) -> list[dict[str, Any]] | None:
        """The source-line table whose canonical text hashes to `digest`, or None."""
        text = self._read(self._path(_LINES, digest, ".json"), digest)
        if text is None:
            return None
        try:
            rows = json.loads(text)
        except ValueError:
            return None
        return rows if isinstance(rows, list) else None

    def put_stream(self, text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self._put(self._path(_STREAMS, digest, ".isa"), text)
        return digest

    def put_lines(self, rows: Iterable[Mapping[str, Any]]) -> str:
        text = lines_text(rows)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self._put(self._path(_LINES, digest, ".json"), text)
        return digest

    def parse(self, text: str, *, path: str, error) -> Any:
        """`parse_yaml(text)` of a golden, from what it gave for the same text before (JSON parses ~20x faster than
        YAML is constructed, most of a warm check of thousands of cells). Kept only where the JSON reads back equal,
        types included (not int mapping keys, not NaN), so the answer is the parse's own; a bad text raises as ever."""
        digest = hashlib.sha256(f"{_parser_identity()}\0{text}".encode("utf-8")).hexdigest()
        entry = self._path(REVIEW_PARSED, digest, ".json")
        kept = self._read_parsed(entry)
        if kept is not _NONE:
            return kept
        data = parse_yaml(text, path=path, error=error)
        with contextlib.suppress(OSError, TypeError, ValueError):
            if _same(json.loads(json.dumps(data, ensure_ascii=False)), data):
                self._put(entry, json.dumps({"parsed": data, "sha256": _parsed_digest(digest, _canonical(data))},
                                            ensure_ascii=False, separators=(",", ":")))
        return data

    def _read_parsed(self, path: Path) -> Any:
        """An entry whose parse hashes, with its name, to the digest it holds: one rewritten or damaged is no
        parse of the golden's text (the text is parsed again)."""
        self._trust()
        if any(os.path.islink(p) for p in (self.folder, path.parent.parent, path.parent, path)):
            return _NONE     # never read through a link
        try:
            kept = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return _NONE
        if not isinstance(kept, dict) or set(kept) != {"parsed", "sha256"}:
            return _NONE
        try:
            if kept["sha256"] != _parsed_digest(path.name.partition(".")[0], _canonical(kept["parsed"])):
                return _NONE
        except (TypeError, ValueError):
            return _NONE
        with contextlib.suppress(OSError):
            os.utime(path)
        return kept["parsed"]

    def remember(self, results: Iterable[CellResult]) -> None:
        """Keep the stream of every compiled result, and its source lines where the stream is new here (a warm
        check of unchanged cells then costs a `stat` per cell, not a table's serialization; `bless` keeps the
        lines of every golden it writes). Best effort: a full disk or a read-only cache costs only the material
        (the review then says it is missing), never the run."""
        for result in results:
            analysis = result.analysis
            if not result.ok or analysis is None or not analysis.stream_text:
                continue
            with contextlib.suppress(OSError):
                if self._put(self._path(_STREAMS, analysis.sha256, ".isa"), analysis.stream_text) and analysis.lines:
                    self.put_lines(analysis.lines)

    def clear(self) -> int:
        """Remove the store; the number of streams it held."""
        if os.path.islink(self.folder):
            self.folder.unlink()
            return 0
        if not self.folder.is_dir():
            return 0
        count = sum(1 for _ in (self.folder / _STREAMS).rglob("*.isa"))
        shutil.rmtree(self.folder)
        return count


_NONE = object()


@functools.lru_cache(maxsize=1)
def _parser_identity() -> str:
    """What turns a golden's text into its data: xisa's strict loader (its source) and PyYAML (its version, with or
    without libyaml). Part of every parsed entry's name, so a parser that reads a text otherwise never gets an old
    parse."""
    import yaml

    from xisa import yamlio

    digest = hashlib.sha256(Path(yamlio.__file__).read_bytes())
    digest.update(f"{yaml.__version__} {getattr(yaml, '__with_libyaml__', False)}".encode())
    return digest.hexdigest()[:16]


def _canonical(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _parsed_digest(text_digest: str, canonical: str) -> str:
    """What a parsed entry holds beside its parse: the digest of the golden text it is named by and of the parse."""
    return hashlib.sha256(f"{text_digest}\0{canonical}".encode("utf-8")).hexdigest()


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (`1 == 1.0 == True` for `==` alone)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
