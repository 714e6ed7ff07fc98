"""`xisa shards`: how `xisa check --shard I/N --timings FILE` splits a selection, and how many shards keep each
under a wall-clock budget: what a CI workflow sizes its matrix from. Nothing is compiled."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xisa.api.selection import Selection
from xisa.errors import UsageError
from xisa.spec.shard import ShardPlan, cell_weights, read_timings

MAX_SHARDS = 256   # GitHub Actions runs at most 256 jobs of one matrix


@dataclass(frozen=True)
class ShardLoad:
    index: int          # 1-based, as --shard names it
    cell_ids: list[str]
    seconds: float      # the recorded compile seconds of its cells (core-seconds)
    largest: float      # its slowest cell's: no number of cores finishes the shard sooner

    @property
    def cells(self) -> int:
        return len(self.cell_ids)


@dataclass(frozen=True)
class ShardsOutcome:
    method: str                  # "timings" or "hash"
    cores: int                   # cores of one runner, for the wall estimate
    loads: list[ShardLoad]
    recorded: int                # cells of the selection with a recorded time (the others weigh the median)
    selected: tuple[str, ...] = ()   # every cell id of the selection: what the shards together must cover, once

    @property
    def count(self) -> int:
        return len(self.loads)

    @property
    def cells(self) -> int:
        return sum(load.cells for load in self.loads)

    @property
    def total_seconds(self) -> float:
        return sum(load.seconds for load in self.loads)

    @property
    def slowest_seconds(self) -> float:
        return max(load.seconds for load in self.loads)

    @property
    def mean_seconds(self) -> float:
        return self.total_seconds / self.count

    @property
    def slowest_over_mean(self) -> float:
        return self.slowest_seconds / self.mean_seconds if self.mean_seconds else 1.0

    @property
    def slowest_wall_seconds(self) -> float:
        """The longest a shard's cold check takes on a runner's cores, ideally: its compile seconds spread over
        them, or its slowest cell, whichever is longer."""
        return max(max(load.seconds / self.cores, load.largest) for load in self.loads)


def _loads(plan: ShardPlan, weights: dict[str, int]) -> list[ShardLoad]:
    members = plan.loads(list(weights))
    return [ShardLoad(index=i + 1, cell_ids=ids, seconds=sum(weights[c] for c in ids) / 1000,
                      largest=max((weights[c] for c in ids), default=0) / 1000)
            for i, ids in enumerate(members)]


def plan_shards(selection: Selection, *, count: int | None = None, max_wall_seconds: float | None = None,
                cores: int = 1) -> ShardsOutcome:
    """The split of `count` shards, or of the fewest shards (up to 256) whose slowest one's recorded seconds,
    spread over `cores`, fit `max_wall_seconds`. Without `selection.timings` the split is by cell hash and
    every cell weighs alike (balanced by count only)."""
    if (count is None) == (max_wall_seconds is None):
        raise UsageError("give a shard count or --max-seconds, not both or neither", field="COUNT",
                         fix="e.g. xisa shards 4 --timings timings.json, or xisa shards --max-seconds 420 --cores 4")
    if count is not None and not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"{count} is not a shard count from 1 to {MAX_SHARDS}", field="COUNT", fix="e.g. 4")
    if cores < 1:
        raise UsageError(f"{cores} is not a number of cores", field="--cores", fix="e.g. --cores 4")
    ws = selection.workspace()
    _, cells = selection.cells(ws, sharded=False)
    selection.require_cells(ws, cells)
    if not cells:
        raise UsageError("the selection has no cells", field="--kernel", fix="check --arch, --kernel and --spec")
    ids = [cell.id for cell in cells]
    timings = read_timings(selection.timings) if selection.timings is not None else None
    weights = cell_weights(ids, timings or {})
    recorded = sum(1 for cid in ids if timings and cid in timings)

    def outcome(n: int) -> ShardsOutcome:
        plan = ShardPlan(count=n, weights=weights if timings is not None else None)
        return ShardsOutcome(method=plan.method, cores=cores, loads=_loads(plan, weights), recorded=recorded,
                             selected=tuple(ids))

    if count is not None:
        return outcome(count)
    fewest = max(1, math.ceil(sum(weights.values()) / 1000 / cores / max_wall_seconds))   # no split does better
    slowest = max(weights.values()) / 1000
    for n in range(fewest, min(MAX_SHARDS, len(ids)) + 1) if slowest <= max_wall_seconds else ():
        found = outcome(n)
        if found.slowest_wall_seconds <= max_wall_seconds:   # type: ignore[operator]
            return found
    raise UsageError(f"no split of up to {min(MAX_SHARDS, len(ids))} shards keeps each under {max_wall_seconds:g} s "
                     f"on {cores} cores (the slowest cell alone records {slowest:g} s)", field="--max-seconds",
                     fix="allow more seconds or more cores per runner")



def shard_balance_note(plan: dict, index: int) -> str | None:
    """One line for a shard run by timings (a report's `selection.shard_plan`): this shard's recorded seconds and
    the slowest shard's over the mean; None for a split by hash."""
    if not plan or plan.get("weights_ms") is None:
        return None
    weights = plan["weights_ms"]
    outcome = ShardsOutcome(method="timings", cores=1, recorded=len(weights),
                            loads=_loads(ShardPlan(count=plan["count"], weights=weights), weights))
    mine = outcome.loads[index - 1]
    return (f"shard {index}/{outcome.count} by recorded timings: {mine.cells} cells, {mine.seconds:.1f} s; slowest "
            f"shard {outcome.slowest_seconds:.1f} s, mean {outcome.mean_seconds:.1f} s (slowest/mean "
            f"{outcome.slowest_over_mean:.3f})")
