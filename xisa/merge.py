"""Combine the JSON reports of `xisa check --shard I/N` into one verdict and exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xisa.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNTRUSTED, UsageError

_REGRESSIONS = ("new", "unused", "expectation-failed")


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("report not found", path=str(path)) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"not a JSON report: {exc}", path=str(path), fix="pass files from `xisa check --format json`") from None
    if not isinstance(data, dict) or data.get("kind") != "check" or not isinstance(data.get("cells"), list):
        raise UsageError("not an `xisa check --format json` report", path=str(path))
    return data


def merge_reports(paths: list[Path]) -> dict[str, Any]:
    if not paths:
        raise UsageError("no reports given", field="REPORT", fix="xisa merge shard-1.json shard-2.json ...")
    reports = [(path, load_report(path)) for path in paths]
    counts = {tuple(r["shard"])[1] if r.get("shard") else None for _, r in reports}
    if None in counts:
        bad = next(p for p, r in reports if not r.get("shard"))
        raise UsageError("report is not from a sharded run", path=str(bad), fix="run `xisa check --shard I/N`")
    if len(counts) != 1:
        raise UsageError(f"reports come from different shard counts: {sorted(counts)}", field="REPORT")
    total = counts.pop()
    seen: dict[int, Path] = {}
    for path, report in reports:
        index = report["shard"][0]
        if index in seen:
            raise UsageError(f"shard {index}/{total} is given twice ({seen[index]} and {path})", field="REPORT")
        seen[index] = path
    missing = sorted(set(range(1, total + 1)) - set(seen))
    if missing:
        raise UsageError(f"missing shard(s) {', '.join(f'{i}/{total}' for i in missing)}", field="REPORT",
                         fix="pass every shard's report")
    toolchains = {json.dumps(r["toolchain"], sort_keys=True) for _, r in reports}
    if len(toolchains) != 1:
        raise UsageError(f"shards ran with different toolchains: {', '.join(sorted(toolchains))}", field="REPORT",
                         fix="run every shard with the same Triton")
    scopes = {json.dumps(sorted(r["scopes"])) for _, r in reports}
    if len(scopes) != 1:
        raise UsageError("shards ran with different --scope values", field="REPORT")
    cells = sorted((c for _, r in reports for c in r["cells"]), key=lambda c: (c["target"], c["kernel"], c["case"]))
    ids = [(c["kernel"], c["case"], c["target"]) for c in cells]
    if len(set(ids)) != len(ids):
        raise UsageError("a cell appears in two shards: the shards were not made from one selection", field="REPORT")
    problems = sorted({p for _, r in reports for p in r["problems"]})
    merged = {
        "schema": reports[0][1]["schema"], "kind": "check", "toolchain": reports[0][1]["toolchain"],
        "scopes": reports[0][1]["scopes"], "shard": None, "problems": problems, "cells": cells,
    }
    merged["counts"] = dict(sorted(_count(cells).items()))
    merged["isolation_violated"] = [f"{c['kernel']}:{c['case']}@{c['target']}" for c in cells
                                    if c["verdict"] == "changed" and not c["in_scope"]]
    merged["exit_code"] = exit_code(merged)
    return merged


def _count(cells: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cell in cells:
        counts[cell["verdict"]] = counts.get(cell["verdict"], 0) + 1
    return counts


def exit_code(report: dict[str, Any]) -> int:
    cells = report["cells"]
    if report["problems"] or any(c["verdict"] == "error" for c in cells):
        return EXIT_UNTRUSTED
    if any(c["verdict"] in _REGRESSIONS or (c["verdict"] == "changed" and not c["in_scope"]) for c in cells):
        return EXIT_REGRESSION
    return EXIT_OK
