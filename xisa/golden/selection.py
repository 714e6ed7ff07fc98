"""What a check report covers, so that shard reports can be shown to add up to one selection.

`xisa merge` gets its shards from elsewhere (CI artifacts): it trusts none of them, and refuses
shards whose selections differ (arguments, commit, goldens, xisa version), a shard with a cell
too many or too few, and everything that does not add up to exactly the cells listed here.
"""

from __future__ import annotations

from typing import Any

from xisa import __version__
from xisa.errors import UsageError
from xisa.golden.store import golden_set_digest
from xisa.spec.cases import Cell


def describe_selection(ws, *, arch: list[str] | None, kernel: list[str] | None, cells: list[Cell],
                       shard_plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """The identity of a check's selection; `cells` is the whole selection, every shard's cells; `shard_plan`
    how --shard split them (`ShardPlan.to_json`: the method and, by timings, each cell's weight)."""
    from xisa.spec import gitrev
    project = ws.project
    try:
        commit: str | None = gitrev.resolve("HEAD", project.root)
    except UsageError:  # not a git repository, or git missing: the golden digest and the arguments still count
        commit = None
    return {
        "arguments": {"arch": list(arch) if arch else None, "kernel": list(kernel) if kernel else None,
                      "specs": [project.display(p) for p in project.spec_paths],
                      "golden": project.display(project.golden_dir)},
        "cells": sorted(cell.id for cell in cells),
        "commit": commit,
        "golden_sha256": golden_set_digest(project.golden_dir),
        "shard_plan": shard_plan,
        "xisa_version": __version__,
    }
