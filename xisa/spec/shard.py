"""Sharding for CI matrices: every cell in exactly one shard, the same split on every machine.

Without recorded timings a cell's shard is a hash of its id (balanced by count only). With a timings file
(`{cell id: seconds}`, the format of the `timings.json` xisa records in its cache) the cells are split
longest-first: sorted by (weight descending, id), each given to the shard with the least weight so far
(ties: the lowest shard). Weights are whole milliseconds, so the split is integer arithmetic on sorted
strings: the same checkout and timings file give the same split on every runner and Python, whatever
PYTHONHASHSEED. A cell the file does not know weighs the median of the known ones of the selection.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from xisa.errors import UsageError

TIMINGS_FIX = "pass the timings.json xisa records in its cache folder (XISA_CACHE_DIR), or a file of {cell id: seconds}"
UNKNOWN_WEIGHT_MS = 1000   # a selection of which no cell has a recorded time: every cell alike


def shard_of(cell_id: str, count: int) -> int:
    """A stable shard for a cell id: the same on every machine and Python run (no PYTHONHASHSEED)."""
    return int(hashlib.sha256(cell_id.encode()).hexdigest()[:8], 16) % count


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not (1 <= int(match.group(1)) <= int(match.group(2))):
        raise UsageError(f"shard {text!r} is not I/N with 1 <= I <= N", field="--shard", fix="e.g. --shard 2/3")
    return int(match.group(1)), int(match.group(2))


BUILDKITE_JOB, BUILDKITE_COUNT = "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"


def shard_from_environment(environ: Mapping[str, str]) -> str | None:
    """The `I/N` of a Buildkite step with `parallelism: N` (its job index is 0-based, --shard's 1-based), or None
    outside one. A half-set or malformed pair is refused: a job that checked every cell would hide its split."""
    job, count = environ.get(BUILDKITE_JOB), environ.get(BUILDKITE_COUNT)
    if job is None and count is None:
        return None
    if job is None or count is None:
        missing = BUILDKITE_JOB if job is None else BUILDKITE_COUNT
        raise UsageError(f"{missing} is not set while its pair is", field=missing,
                         fix="set both (Buildkite's `parallelism` does), or pass --shard I/N")
    if not (job.strip().isdigit() and count.strip().isdigit() and int(job) < int(count)):
        raise UsageError(f"{BUILDKITE_JOB}={job!r} and {BUILDKITE_COUNT}={count!r} are not a job 0 to N-1 of N",
                         field=BUILDKITE_JOB, fix="pass --shard I/N instead")
    return f"{int(job) + 1}/{int(count)}"


def read_timings(path: Path) -> dict[str, float]:
    """A timings file, strictly: a JSON object of cell id -> finite seconds >= 0 (one line naming what is wrong)."""
    stat = _stat(path)
    return dict(_read_timings(str(path), stat.st_mtime_ns, stat.st_size))


def _stat(path: Path):
    try:
        return path.stat()
    except OSError as exc:
        raise UsageError(f"cannot read the timings file: {exc.strerror}", path=str(path), field="--timings",
                         fix=TIMINGS_FIX) from None


@lru_cache(maxsize=4)   # one read per file version per process: the plan described and the one applied agree
def _read_timings(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, float], ...]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"not a JSON file: {exc}", path=path, field="--timings", fix=TIMINGS_FIX) from None
    if not isinstance(data, dict):
        raise UsageError(f"is a JSON {type(data).__name__}, not an object of cell id -> seconds", path=path,
                         field="--timings", fix=TIMINGS_FIX)
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{json.dumps(value)[:40]} is not a number of seconds >= 0", path=path, field=key,
                             fix=TIMINGS_FIX)
    return tuple(sorted(data.items()))


def cell_weights(cell_ids: list[str], timings: dict[str, float]) -> dict[str, int]:
    """Each cell's weight in whole milliseconds; cells without a recorded time weigh the median known one."""
    known = sorted(round(timings[cid] * 1000) for cid in cell_ids if cid in timings)
    default = known[len(known) // 2] if known else UNKNOWN_WEIGHT_MS
    return {cid: round(timings[cid] * 1000) if cid in timings else default for cid in cell_ids}


def assign_shards(weights: dict[str, int], count: int) -> dict[str, int]:
    """Longest-first onto the least-loaded shard: cell id -> shard index (0-based)."""
    loads = [(0, index) for index in range(count)]   # a heap of (weight so far, shard): ties go to the lowest shard
    assignment = {}
    for cid, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(loads)
        assignment[cid] = index
        heapq.heappush(loads, (load + weight, index))
    return assignment


@dataclass(frozen=True)
class ShardPlan:
    """How `count` shards split a selection: by recorded timings (`weights`, ms per selected cell) or by hash."""

    count: int
    weights: dict[str, int] | None = None

    def __post_init__(self):
        object.__setattr__(self, "_assignment", assign_shards(self.weights, self.count) if self.weights else {})

    @property
    def method(self) -> str:
        return "timings" if self.weights is not None else "hash"

    def shard_of(self, cell_id: str) -> int:
        """The 0-based shard of a cell; a cell outside the plan (an unused golden) by its hash."""
        found = self._assignment.get(cell_id)   # type: ignore[attr-defined]
        return shard_of(cell_id, self.count) if found is None else found

    def loads(self, cell_ids: list[str]) -> list[list[str]]:
        """The cells of each shard, in shard order."""
        shards: list[list[str]] = [[] for _ in range(self.count)]
        for cid in sorted(cell_ids):
            shards[self.shard_of(cid)].append(cid)
        return shards

    def to_json(self) -> dict:
        return {"method": self.method, "count": self.count, "weights_ms": self.weights}


def make_plan(cell_ids: list[str], count: int, timings: dict[str, float] | None) -> ShardPlan:
    return ShardPlan(count=count, weights=cell_weights(cell_ids, timings) if timings is not None else None)
