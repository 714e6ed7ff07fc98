"""Combine the JSON reports of `xisa check --shard I/N` into one verdict and exit code.

Shard reports come from elsewhere (CI artifacts, another machine), so none is trusted: each is read
strictly by `xisa.golden.report_json` (every field with its type, each verdict against its cell's data),
and the shards must add up to exactly one selection: the same arguments, commit, goldens, toolchain,
xisa version and shard plan (by hash, or by recorded timings: each cell's weight) in every shard, each
shard present once, and each cell of the selection in the shard the plan gives it, none missing, none
added. Anything else is refused with one line naming the file and the field (exit 2).
The verdict is then decided by the check report's own exit policy (`CheckReport.exit_code`), as for an
unsharded run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xisa.errors import UsageError
from xisa.golden.report_json import FIX, ShardReport, check_payload, read_shard_report
from xisa.golden.verdict import UNUSED, CheckReport
from xisa.spec.shard import ShardPlan


def _first_difference(a: Any, b: Any, where: str) -> str | None:
    """The path of the first field where `a` and `b` differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}")
            if found:
                return found
        return None
    return None if a == b else where


_MIXED = {"toolchain": "the shards ran with different toolchains", "scopes": "the shards ran with different --scope values",
          "selection": "the shards are not of one selection (arguments, commit, goldens or xisa version)"}


def _refuse_mixed(shards: list[ShardReport]) -> None:
    first = shards[0]
    for shard in shards[1:]:
        for key, meaning in _MIXED.items():
            field = _first_difference(first.data[key], shard.data[key], key)
            if field is not None:
                raise UsageError(f"differs from {first.path}'s: {meaning}", path=str(shard.path), field=field,
                                 fix=FIX)


def _refuse_missing_shards(shards: list[ShardReport]) -> None:
    count = shards[0].count
    seen: dict[int, Path] = {}
    for shard in shards:
        if shard.count != count:
            raise UsageError(f"shard {shard.index}/{shard.count} does not belong with {shards[0].path}'s "
                             f"{shards[0].index}/{count}", path=str(shard.path), field="shard", fix=FIX)
        if shard.index in seen:
            raise UsageError(f"shard {shard.index}/{count} is given twice ({seen[shard.index]} and {shard.path})",
                             path=str(shard.path), field="shard", fix=FIX)
        seen[shard.index] = shard.path
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        raise UsageError(f"missing shard(s) {', '.join(f'{i}/{count}' for i in missing)}", field="REPORT",
                         fix="pass every shard's report")


def _refuse_wrong_cells(shards: list[ShardReport]) -> None:
    """Each shard holds exactly its part of the selection (and unused goldens of its part)."""
    count = shards[0].count
    selected = shards[0].data["selection"]["cells"]
    selected_set = set(selected)
    plan = _shard_plan(shards[0])
    for shard in shards:
        expected = {cid for cid in selected if plan.shard_of(cid) == shard.index - 1}
        got: set[str] = set()
        for position, verdict in enumerate(shard.report.verdicts):
            where = f"cells[{position}] ({verdict.id})"
            if plan.shard_of(verdict.id) != shard.index - 1:
                raise UsageError(f"belongs to shard {plan.shard_of(verdict.id) + 1}/{count}, not {shard.index}/{count}",
                                 path=str(shard.path), field=where, fix=FIX)
            if verdict.id in got:
                raise UsageError("appears twice", path=str(shard.path), field=where, fix=FIX)
            got.add(verdict.id)
            if (verdict.verdict == UNUSED) == (verdict.id in selected_set):
                problem = "is a selected cell, not an unused golden" if verdict.verdict == UNUSED else \
                    "is not in the selection"
                raise UsageError(problem, path=str(shard.path), field=where, fix=FIX)
        absent = sorted(expected - got)
        if absent:
            raise UsageError(f"{len(absent)} cell(s) of the selection are missing, e.g. {absent[0]}",
                             path=str(shard.path), field="cells", fix=FIX)


def _shard_plan(shard: ShardReport) -> ShardPlan:
    """The split the shards ran (the same in every shard: `_refuse_mixed`), recomputed from its weights."""
    plan = shard.data["selection"]["shard_plan"]
    if plan is None:
        raise UsageError("a sharded report without the plan that split it", path=str(shard.path),
                         field="selection.shard_plan", fix=FIX)
    if plan["count"] != shard.count:
        raise UsageError(f"the shard plan is for {plan['count']} shards, the report is shard {shard.index}/{shard.count}",
                         path=str(shard.path), field="selection.shard_plan.count", fix=FIX)
    return ShardPlan(count=shard.count, weights=plan["weights_ms"])


def merge_reports(paths: list[Path]) -> dict[str, Any]:
    if not paths:
        raise UsageError("no reports given", field="REPORT", fix="xisa merge shard-1.json shard-2.json ...")
    shards = [read_shard_report(path) for path in paths]
    _refuse_missing_shards(shards)
    _refuse_mixed(shards)
    _refuse_wrong_cells(shards)
    first = shards[0].data
    order = sorted(((v, c) for s in shards for v, c in zip(s.report.verdicts, s.data["cells"])),
                   key=lambda pair: (pair[0].target, pair[0].kernel, pair[0].case))
    report = CheckReport(verdicts=[v for v, _ in order], toolchain=first["toolchain"], golden_toolchains={},
                         scopes=first["scopes"], problems=sorted({p for s in shards for p in s.data["problems"]}),
                         selection={**first["selection"], "shard_plan": None})   # whole again: as unsharded
    # The shards' own cell objects, each already read strictly; the summary recomputed from their verdicts.
    return {**check_payload(report, cells=[c for _, c in order]), "schema": first["schema"]}
