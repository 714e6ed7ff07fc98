"""The JSON report of `xisa check` (and `check --base`, `diff`, `ab`), written and read in this one module.

The writer (`report_payload`) turns a `CheckReport` (or an `AbReport`) into the object
`docs/json-schema.md` describes, key for key (`tests/golden/test_report_json.py` holds the page to it).
The reader (`read_report`) takes such an object back from elsewhere (a shard's report, a CI artifact),
so none is trusted: it is read strictly (every field of the schema with its type, no duplicate keys),
every cell's verdict must be one of the known verdicts and agree with the cell's own data, and the
summary fields must be what the cells say. Anything else is refused with one line naming the file and
the field (exit 2). Combining the shards is `xisa.golden.merge`'s.

A small validator rather than a schema library: the checks that matter (a verdict against its data)
are not schema checks, and the CLI stays free of pydantic's import time (~0.3 s).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xisa.errors import GoldenError, UsageError
from xisa.golden.ab import AbReport, target_summaries
from xisa.golden.verdict import (CANNOT_LAUNCH, CHANGED, ERROR, EXPECT_FAILED, JSON_SCHEMA_VERSION, NEW,
                                 RESOURCE_DELTA_KEYS, SAME, UNUSED, CellVerdict, CheckReport, Delta, Scope, Verdict)
from xisa.names import CASE_NAME, KERNEL_NAME, TARGET_NAME, CellKey, is_valid_name

FIX = "merge the unchanged reports of one `xisa check --shard I/N --format json` run, every shard once"


# --- writing ---------------------------------------------------------------------------------------

def delta_payload(delta: Delta) -> dict[str, Any]:
    return {"instructions": list(delta.instructions),
            "histogram": [{"mnemonic": m, "base": b, "head": h} for m, b, h in delta.histogram],
            "resources": {k: list(v) for k, v in delta.resources.items()},
            "binding_changed": delta.binding_changed,
            "binding": [{"field": k, "base": b, "head": h} for k, b, h in delta.binding],
            "loops": [change.to_json() for change in delta.loops],
            "fields": list(delta.fields), "code_sections": list(delta.code_sections)}


def cell_payload(verdict: CellVerdict) -> dict[str, Any]:
    head = verdict.head.analysis if verdict.head and verdict.head.analysis else None
    base = verdict.base.data if verdict.base else None
    return {
        "kernel": verdict.kernel, "case": verdict.case, "target": verdict.target, "verdict": verdict.verdict,
        "in_scope": verdict.in_scope, "message": verdict.message, "golden": verdict.golden_file,
        "head_sha256": head.sha256 if head else None, "base_sha256": base["sha256"] if base else None,
        "head_code_sha256": head.code_sha256 if head else None,
        "base_code_sha256": base.get("code_sha256") if base else None,
        "head_instructions": head.instructions if head else None,
        "base_instructions": base["instructions"] if base else None,
        "head_resources": dict(head.resources) if head else None,
        "base_resources": dict(base["resources"]) if base else None,
        "delta": delta_payload(verdict.delta) if verdict.delta else None,
        "expectations": [str(f) for f in verdict.expectations],
        "launch": verdict.launch.to_json() if verdict.launch else None,
        "cached": verdict.head.cached if verdict.head else None,
        "head_stages": dict(head.stages) if head else None,
        "base_stages": dict(base.get("stages") or {}) if base else None,
        "first_changed_stage": verdict.stages.first if verdict.stages else None,
        "stage_note": verdict.stages.phrase() if verdict.stages else None,
        # the changed cell's instruction changes per source line, edited first; null: a side has no table
        "line_changes": [c.to_json() for c in verdict.lines] if verdict.lines is not None else None,
    }


def check_payload(report: CheckReport, *, cells: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`cells`: the cells' objects as already written (`xisa merge` keeps each shard's own), else written here."""
    return {
        "schema": JSON_SCHEMA_VERSION, "kind": CheckReport.kind, "toolchain": report.toolchain,
        "scopes": report.scopes, "shard": list(report.shard) if report.shard else None,
        "selection": report.selection, "exit_code": report.exit_code, "counts": report.counts(),
        "problems": list(report.problems), "isolation_violated": [v.id for v in report.isolation_violations],
        "cells": cells if cells is not None else [cell_payload(v) for v in report.verdicts],
        **({"base": report.base, "stale_goldens": [cell_payload(v) for v in report.stale_goldens]}
           if report.base is not None else {}),
    }


def ab_payload(report: AbReport) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA_VERSION, "kind": AbReport.kind, "exit_code": report.exit_code,
        "counts": report.counts(), "problems": list(report.problems),
        "sides": {side.label.lower(): side.to_json() for side in report.sides},
        "selection": report.selection, "targets": [summary.to_json() for summary in target_summaries(report)],
        "cells": [cell_payload(v) for v in report.verdicts],   # each with its first changed stage
    }


_PAYLOADS = {CheckReport.kind: check_payload, AbReport.kind: ab_payload}


def report_payload(report: CheckReport, *, accept: list[str] | None = None) -> dict[str, Any]:
    """The report's JSON object (`kind` check or ab), with the `xisa bless` commands that accept it, if any."""
    payload = _PAYLOADS[report.kind](report)
    if accept is not None:
        payload["accept"] = accept
    return payload


def report_text(report: CheckReport, *, accept: list[str] | None = None) -> str:
    """The report as `--format json` prints it: sorted keys, indented, one trailing newline."""
    return dumps(report_payload(report, accept=accept))


def dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"


# --- reading ----------------------------------------------------------------------------------------

_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Invalid(Exception):
    """A field of a report that is wrong: where (a field path) and what."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# --- reading: strict JSON and typed fields ----------------------------------------------------------

def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_report(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError("report not found", path=str(path)) from None
    except UnicodeDecodeError:
        raise UsageError("not UTF-8 text: not a JSON report", path=str(path), fix=FIX) from None
    except OSError as exc:
        raise UsageError(f"cannot read: {exc.strerror}", path=str(path)) from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"not a JSON report: {exc}", path=str(path), fix=FIX) from None
    if not isinstance(data, dict) or data.get("kind") != "check":
        raise UsageError("not an `xisa check --format json` report", path=str(path), field="kind", fix=FIX)
    return data


def _field(obj: dict[str, Any], key: str, kinds: tuple[type, ...], where: str, *, optional: bool = False) -> Any:
    """obj[key], which must be present and of one of `kinds` (an int is never a bool), or null if optional."""
    name = f"{where}.{key}" if where else key
    if key not in obj:
        raise _Invalid(name, "missing")
    value = obj[key]
    if value is None and optional:
        return None
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        wanted = " or ".join(k.__name__ for k in kinds) + (" or null" if optional else "")
        raise _Invalid(name, f"must be {wanted}, got {type(value).__name__} {json.dumps(value)[:40]}")
    return value


def _list_of(obj: dict[str, Any], key: str, kinds: tuple[type, ...], where: str, *, optional: bool = False) -> list | None:
    values = _field(obj, key, (list,), where, optional=optional)
    for index, value in enumerate(values or []):
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise _Invalid(f"{where}.{key}[{index}]".lstrip("."), f"must be {' or '.join(k.__name__ for k in kinds)}")
    return values


def _sha256(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = _field(obj, key, (str,), where, optional=True)
    if value is not None and not _SHA256.fullmatch(value):
        raise _Invalid(f"{where}.{key}", "not a SHA-256")
    return value


# --- one report ------------------------------------------------------------------------------------

@dataclass
class ShardReport:
    """One shard's report as read: its file, its JSON object, its shard I of N, and its cells' verdicts."""

    path: Path
    data: dict[str, Any]
    index: int
    count: int
    report: CheckReport        # the cells' verdicts under the check report's own exit policy


def _validate_selection(data: dict[str, Any]) -> dict[str, Any]:
    selection = _field(data, "selection", (dict,), "")
    arguments = _field(selection, "arguments", (dict,), "selection")
    _list_of(arguments, "arch", (str,), "selection.arguments", optional=True)
    _list_of(arguments, "kernel", (str,), "selection.arguments", optional=True)
    _list_of(arguments, "specs", (str,), "selection.arguments")
    _field(arguments, "golden", (str,), "selection.arguments")
    _list_of(selection, "cells", (str,), "selection")
    _field(selection, "commit", (str,), "selection", optional=True)
    _sha256(selection, "golden_sha256", "selection")
    _field(selection, "xisa_version", (str,), "selection")
    plan = _field(selection, "shard_plan", (dict,), "selection", optional=True)
    if plan is not None:
        _validate_shard_plan(plan, selection["cells"])
    return selection


def _validate_shard_plan(plan: dict[str, Any], cells: list[str]) -> None:
    """`selection.shard_plan`: by hash (no weights), or by timings with a whole-millisecond weight for every
    selected cell and no other."""
    method = _field(plan, "method", (str,), "selection.shard_plan")
    count = _field(plan, "count", (int,), "selection.shard_plan")
    if count < 1:
        raise _Invalid("selection.shard_plan.count", f"{count} is not a shard count")
    weights = _field(plan, "weights_ms", (dict,), "selection.shard_plan", optional=True)
    if method not in ("hash", "timings") or (weights is None) != (method == "hash"):
        raise _Invalid("selection.shard_plan.method", f"{method[:20]!r} with {'no ' if weights is None else ''}weights "
                       "is not a shard plan (hash: no weights; timings: weights_ms)")
    if weights is not None:
        if set(weights) != set(cells):
            odd = sorted(set(weights) ^ set(cells))[0]
            raise _Invalid("selection.shard_plan.weights_ms", f"does not weigh exactly the selected cells ({odd})")
        for cid, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
                raise _Invalid(f"selection.shard_plan.weights_ms.{cid}", "is not a whole number of milliseconds >= 0")


def _validate_cell(cell: Any, where: str, scopes: list[Scope]) -> CellVerdict:
    if not isinstance(cell, dict):
        raise _Invalid(where, f"must be an object, got {type(cell).__name__}")
    names = []
    for key, pattern in (("kernel", KERNEL_NAME), ("case", CASE_NAME), ("target", TARGET_NAME)):
        value = _field(cell, key, (str,), where)
        if not is_valid_name(value, pattern):
            raise _Invalid(f"{where}.{key}", f"{value[:40]!r} is not a {key} name")
        names.append(value)
    where = f"{where} ({CellKey(*names)})"
    verdict = _field(cell, "verdict", (str,), where)
    if verdict not in set(Verdict):
        raise _Invalid(f"{where}.verdict", f"unknown verdict {verdict[:40]!r} (known: {', '.join(Verdict)})")
    in_scope = _field(cell, "in_scope", (bool,), where)
    if in_scope != any(scope.covers(*names) for scope in scopes):
        raise _Invalid(f"{where}.in_scope", f"is {json.dumps(in_scope)}, but the report's scopes say otherwise")
    message = _field(cell, "message", (str,), where)
    _field(cell, "golden", (str,), where)
    head, base = _sha256(cell, "head_sha256", where), _sha256(cell, "base_sha256", where)
    head_code, base_code = _sha256(cell, "head_code_sha256", where), _sha256(cell, "base_code_sha256", where)
    head_instructions = _field(cell, "head_instructions", (int,), where, optional=True)
    base_instructions = _field(cell, "base_instructions", (int,), where, optional=True)
    head_resources = _field(cell, "head_resources", (dict,), where, optional=True)
    base_resources = _field(cell, "base_resources", (dict,), where, optional=True)
    delta = _field(cell, "delta", (dict,), where, optional=True)
    expectations = _list_of(cell, "expectations", (str,), where)
    launch = _field(cell, "launch", (dict,), where, optional=True)
    unlaunchable = launch is not None and _validate_launch(launch, f"{where}.launch")
    if delta is not None:
        _validate_delta(delta, f"{where}.delta")
    has_head = (head, head_instructions, head_resources)
    has_base = (base, base_instructions, base_resources)
    # A verdict must follow from the cell's own data the way `build_report` decides it.
    problem = None
    if verdict in (SAME, CHANGED, NEW, EXPECT_FAILED, CANNOT_LAUNCH) and None in has_head:
        problem = "has no head fingerprint, instructions or resources"
    elif verdict in (SAME, CHANGED) and None in has_base:
        problem = "has no golden fingerprint, instructions or resources"
    elif verdict in (SAME, CHANGED):
        # A changed cell's delta names every record key that differs (options, binding, ...), not only these.
        differs = head != base or head_code != base_code or bool(delta and delta["fields"]) or any(
            head_resources.get(key) != base_resources.get(key) for key in RESOURCE_DELTA_KEYS)
        if differs != (verdict == CHANGED):
            problem = "disagrees with the fingerprints and resources" + (" (they differ)" if differs else
                                                                         " (they are equal)")
        elif (delta is None) == (verdict == CHANGED):
            problem = "disagrees with its delta"
    elif verdict == NEW and any(value is not None for value in has_base):
        problem = "has a golden"
    elif verdict == UNUSED and any(value is not None for value in (*has_head, *has_base)):
        problem = "has a head or golden fingerprint (an unused golden has no cell)"
    if problem is None and (verdict == EXPECT_FAILED and not expectations
                            or expectations and verdict not in (EXPECT_FAILED, CANNOT_LAUNCH)):
        problem = "disagrees with its failed expectations"
    # A head that cannot launch unexpectedly is `cannot-launch` (an error has no head to judge).
    if problem is None and verdict != ERROR and (verdict == CANNOT_LAUNCH) != bool(unlaunchable):
        problem = "disagrees with its launch"
    if problem is not None:
        raise _Invalid(f"{where}.verdict", f"{verdict!r} {problem}")
    return CellVerdict(kernel=names[0], case=names[1], target=names[2], verdict=Verdict(verdict), in_scope=in_scope,
                       message=message)


def _validate_launch(launch: dict[str, Any], where: str) -> bool:
    """A cell's `launch` checked; whether it says the cell cannot launch unexpectedly."""
    launchable = _field(launch, "launchable", (bool,), where)
    expected = _field(launch, "expected", (bool,), where, optional=True)
    _field(launch, "target_file", (str,), where)
    exceeds = _list_of(launch, "exceeds", (dict,), where)
    for index, row in enumerate(exceeds):
        for key, kinds in (("resource", (str,)), ("used", (int,)), ("limit", (int,)), ("per", (str,)),
                           ("limit_key", (str,))):
            _field(row, key, kinds, f"{where}.exceeds[{index}]")
    if launchable == bool(exceeds):
        raise _Invalid(f"{where}.launchable", f"is {json.dumps(launchable)} with {len(exceeds)} exceeded limit(s)")
    return not launchable and expected is not False


def _validate_delta(delta: dict[str, Any], where: str) -> None:
    instructions = _list_of(delta, "instructions", (int,), where)
    if len(instructions) != 2:
        raise _Invalid(f"{where}.instructions", "must be [base, head]")
    for index, row in enumerate(_list_of(delta, "histogram", (dict,), where)):
        _field(row, "mnemonic", (str,), f"{where}.histogram[{index}]")
        _field(row, "base", (int,), f"{where}.histogram[{index}]")
        _field(row, "head", (int,), f"{where}.histogram[{index}]")
    for key, pair in _field(delta, "resources", (dict,), where).items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise _Invalid(f"{where}.resources.{key}", "must be [base, head]")
    _field(delta, "binding_changed", (bool,), where)
    _list_of(delta, "fields", (str,), where)
    _list_of(delta, "code_sections", (str,), where)


def read_shard_report(path: Path) -> ShardReport:
    """A shard's report file, read strictly and every field checked (`validate_report`)."""
    return validate_report(path, load_report(path))


def validate_report(path: Path, data: dict[str, Any]) -> ShardReport:
    """One shard report, every field checked; its verdicts under the check report's exit policy."""
    try:
        schema = _field(data, "schema", (int,), "")
        if schema != JSON_SCHEMA_VERSION:
            raise _Invalid("schema", f"schema {schema} is not {JSON_SCHEMA_VERSION}: made by another xisa version")
        shard = _field(data, "shard", (list,), "", optional=True)
        if shard is None:
            raise _Invalid("shard", "the report is not from a sharded run (run `xisa check --shard I/N`)")
        if (len(shard) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in shard)
                or not 1 <= shard[0] <= shard[1]):
            raise _Invalid("shard", f"{json.dumps(shard)[:40]} is not [I, N] with 1 <= I <= N")
        toolchain = _field(data, "toolchain", (dict,), "")
        if not all(isinstance(v, str) for v in toolchain.values()):
            raise _Invalid("toolchain", "values must be strings")
        scope_texts = _list_of(data, "scopes", (str,), "")
        scopes = []
        for index, text in enumerate(scope_texts):
            try:
                scopes.append(Scope.parse(text))
            except GoldenError as exc:
                raise _Invalid(f"scopes[{index}]", exc.detail) from None
        problems = _list_of(data, "problems", (str,), "")
        _validate_selection(data)
        cells = _field(data, "cells", (list,), "")
        verdicts = [_validate_cell(cell, f"cells[{index}]", scopes) for index, cell in enumerate(cells)]
        report = CheckReport(verdicts=verdicts, toolchain=toolchain, golden_toolchains={}, scopes=scope_texts,
                             problems=problems, shard=(shard[0], shard[1]))
        # The summary fields must be what the cells say: an edited exit code or count is not a report.
        for key, expected in (("counts", report.counts()), ("exit_code", report.exit_code),
                              ("isolation_violated", [v.id for v in report.isolation_violations])):
            value = _field(data, key, (type(expected),), "")
            if value != expected:
                raise _Invalid(key, f"{json.dumps(value)[:60]} disagrees with the cells ({json.dumps(expected)[:60]})")
    except _Invalid as exc:
        raise UsageError(exc.message, path=str(path), field=exc.field, fix=FIX) from None
    return ShardReport(path=path, data=data, index=shard[0], count=shard[1], report=report)


