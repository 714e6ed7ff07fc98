"""The cache folder's bound: a size limit, least recently used entries removed first, and what `xisa cache info` says.

Every entry is one file (`cache.EntryStore`) touched when it answers a cell, so its time is its last use. After a run
that added entries, a cache over its limit loses its least recently used entries until it holds at most
`LOW_WATER` of the limit (so the next runs do not trim again at once). An entry is removed by one unlink: a reader
that opened it reads it whole, one that comes after finds no entry and compiles (a miss, never half an entry).
Triton's own cache is one folder per run in the temp folder, removed when the run ends; a Triton cache folder an
older xisa kept here is removed first.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from xisa.compile.incremental.cache import (BACKEND, FRONTEND, LOADS, RESULTS, REVIEW, REVIEW_LINES, REVIEW_PARSED, REVIEW_STREAMS, STATS,
                               legacy_triton_folder, write_private)
from xisa.spec.project import DEFAULT_CACHE_SIZE, cache_size_from_environment

LOW_WATER = 0.8   # a trim leaves the cache at this share of its limit


def default_limit() -> int:
    """XISA_CACHE_SIZE, else the default (`[tool.xisa] cache_size` reaches a run through its options)."""
    return cache_size_from_environment() or DEFAULT_CACHE_SIZE


@dataclass
class RunCounts:
    """Where a run's cells came from."""

    cells: int = 0
    results: int = 0     # answered by the result cache (nothing loaded)
    backend: int = 0     # loaded; the back end's work found in the store (after a front-end pass, or ...
    front_end: int = 0   # ... of those, without one: the front end's inputs were ones seen before)
    compiled: int = 0    # compiled whole
    errors: int = 0

    @classmethod
    def of(cls, results) -> "RunCounts":
        counts = cls(cells=len(results))
        for result in results:
            if not result.ok:
                counts.errors += 1
            elif result.cached:
                counts.results += 1
            elif result.reused_backend:
                counts.backend += 1
                counts.front_end += result.skipped_front_end
            else:
                counts.compiled += 1
        return counts

    def write(self, cache_dir: Path) -> None:
        if cache_dir.is_dir():
            write_private(cache_dir / STATS, json.dumps(asdict(self), sort_keys=True))

    @classmethod
    def read(cls, cache_dir: Path) -> "RunCounts | None":
        try:
            data = json.loads((cache_dir / STATS).read_text(encoding="utf-8"))
            return cls(**{key: int(data[key]) for key in asdict(cls())})
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _trimmable(cache_dir: Path) -> list[tuple[float, int, Path]]:
    """Every entry the size limit counts: results, the back-end, front-end and load stores, and the review store's
    streams, lines and parsed goldens."""
    review = cache_dir / REVIEW
    reviewed = [] if review.is_symlink() else (_entries(review / REVIEW_STREAMS, suffix=".isa")
                                               + _entries(review / REVIEW_LINES)
                                               + _entries(review / REVIEW_PARSED))   # never through a link
    return (_entries(cache_dir / RESULTS) + _entries(cache_dir / BACKEND) + _entries(cache_dir / FRONTEND)
            + _entries(cache_dir / LOADS) + reviewed)


def _entries(folder: Path, suffix: str = ".json") -> list[tuple[float, int, Path]]:
    """(last use, size, path) of each entry under `folder` (`<xx>/<key>.json`), links and temp files left out."""
    found = []
    if not folder.is_dir() or folder.is_symlink():
        return found
    for sub in os.scandir(folder):
        if not sub.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(sub.path):
            if entry.name.endswith(suffix) and not entry.name.startswith(".tmp-") \
                    and entry.is_file(follow_symlinks=False):
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue   # removed meanwhile by another run's trim
                found.append((info.st_mtime, info.st_size, Path(entry.path)))
    return found


def _folder_size(folder: Path) -> int:
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                pass
    return total


def trim_cache(cache_dir: Path, limit: int) -> int:
    """Remove an older xisa's Triton cache, then the least recently used entries while the cache is over `limit`;
    the number of entries removed."""
    if not cache_dir.is_dir():
        return 0
    for child in cache_dir.iterdir():
        if legacy_triton_folder(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
    entries = _trimmable(cache_dir)
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    removed = 0
    for _, size, path in sorted(entries, key=lambda entry: entry[0]):
        if total <= limit * LOW_WATER:
            break
        try:
            path.unlink()
        except FileNotFoundError:
            pass   # another run removed it
        except OSError:
            continue
        total -= size
        removed += 1
    return removed


@dataclass
class CacheInfo:
    """What `xisa cache info` reports."""

    folder: str
    size: int                  # bytes in the cache folder
    limit: int
    results: int               # result entries
    backend: int               # back-end store entries
    last_run: RunCounts | None
    front_end: int = 0         # front-end store entries (the front end's inputs -> its output's back-end key)
    loads: int = 0             # load store entries (code objects, source blocks)

    def to_json(self) -> dict:
        data = asdict(self)
        data["last_run"] = asdict(self.last_run) if self.last_run else None
        return data


def cache_info(cache_dir: Path, limit: int) -> CacheInfo:
    size = _folder_size(cache_dir) if cache_dir.is_dir() and not cache_dir.is_symlink() else 0
    return CacheInfo(folder=str(cache_dir), size=size, limit=limit, results=len(_entries(cache_dir / RESULTS)),
                     backend=len(_entries(cache_dir / BACKEND)), last_run=RunCounts.read(cache_dir),
                     front_end=len(_entries(cache_dir / FRONTEND)), loads=len(_entries(cache_dir / LOADS)))

