"""One program captured as several targets' GPUs (`xisa capture --no-run --as A --as B`): each target's launches
merged into one list, each launch a case holding what every target that made it binds.

The program runs once per target, its device queries answered as that target's GPU, so a value host code derives
from the device (`NUM_SMS = props.multi_processor_count`, `num_stages = 2 if torch.version.hip else 4`, the config a
target's pruning keeps) is that target's. A launch of target A is the same launch of target B when it is the same
kernel made from the same place (the program's frames and the test under way: the hook's `site`) with the same
runtime arguments' kinds and shapes, the n-th such of each: never by its constexprs or options, which the device may
decide. Its values are then split: those equal on every target that made it are the case's own (written once), the
others per target (`per_target`, written as `overrides`). A launch made by some targets only, or whose values
differ, is narrowed to the targets that made it (`launched_on`, written as `targets:`): a target not captured
compiles what the captured ones agree on, and where they disagree nothing was observed for it. A launch option of
one backend (`kpack`, on AMD) is compared among that backend's targets only: the other backend never binds it.

Pure data: nothing here imports Triton.
"""

from __future__ import annotations

import json
from typing import Any

SECTIONS = ("args", "constexprs", "options", "heuristics")   # merged per name; `config` (the autotuner's) whole
CONFIG = ("config",)


def kernel_ident(record: dict) -> tuple[str, str, str]:
    """The kernel a launch record is of: one spec per object launched (the jit function and an autotuner wrapping
    it are two `function:`s); a generated module is known by its text (two `exec`s share the file name `<string>`)."""
    generated = record.get("generated")
    where = f"generated:{generated['sha256']}" if generated and "sha256" in generated else record["file"]
    return where, record["qualname"], record["function"]


def _argument_kind(name: str, arg: dict) -> tuple:
    if "tensor" in arg:
        return name, "tensor", arg["tensor"], tuple(arg.get("shape") or ())
    if "descriptor" in arg:
        return name, "descriptor", arg["descriptor"], tuple(arg.get("shape") or ())
    return name, "scalar" if "value" in arg else arg.get("unsupported", "?")


def match_key(record: dict) -> tuple:
    """Which launch of another target's run this one is, up to its order among launches with the same key."""
    args = record.get("args") or {}
    return (kernel_ident(record), record.get("site"), record.get("test"),
            tuple(_argument_kind(name, arg) for name, arg in args.items()))


def merge_targets(by_target: dict[str, list[dict]], *, target_backends: dict[str, str],
                  option_backends: dict[str, set[str]]) -> list[dict]:
    """The launch records of each target's run (oldest first), merged: one record per launch, in the order of the
    targets' names then of their launches, so any order of `--as` gives the same list. A target's launch whose
    specialization a case holds for it already (the same kernel made elsewhere too) is no second case for it. One
    target: its records, unchanged."""
    captured = sorted(by_target)
    if len(captured) == 1:
        return list(by_target[captured[0]])
    groups: dict[tuple, dict[str, dict]] = {}
    for target in captured:
        made: dict[tuple, int] = {}
        for record in by_target[target]:
            key = match_key(record)
            made[key] = made.get(key, -1) + 1
            groups.setdefault((key, made[key]), {})[target] = record
    covered: set[tuple[str, str]] = set()
    merged = []
    for members in groups.values():
        fresh = {target: record for target, record in members.items() if (target, record["key"]) not in covered}
        covered.update((target, record["key"]) for target, record in members.items())
        if fresh:
            merged.append(_merge_one(fresh, captured, target_backends, option_backends))
    return merged


def _flat(record: dict) -> dict[tuple, Any]:
    values: dict[tuple, Any] = {(section, name): value for section in SECTIONS
                                for name, value in (record.get(section) or {}).items()}
    if record.get("autotune") is not None:
        values[CONFIG] = record["autotune"]
    return values


def _same(a: Any, b: Any) -> bool:
    """Equal as YAML writes them (True is not 1, 2 is not 2.0)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _binds(key: tuple, target: str, target_backends: dict[str, str], option_backends: dict[str, set[str]]) -> bool:
    """Whether a launch on `target` binds this value: a launch option only its backend's options know binds nowhere
    else (the spec writes it under that backend's glob)."""
    owners = option_backends.get(key[1]) if key[0] == "options" else None
    return not owners or len(owners) != 1 or target_backends.get(target) in owners


def _merge_one(members: dict[str, dict], captured: list[str], target_backends: dict[str, str],
               option_backends: dict[str, set[str]]) -> dict:
    order = sorted(members)
    values = {target: _flat(members[target]) for target in order}
    keys = list(dict.fromkeys(key for target in order for key in values[target]))
    common: dict[tuple, Any] = {}
    per_target: dict[str, dict[str, Any]] = {}
    for key in keys:
        scope = [t for t in order if _binds(key, t, target_backends, option_backends)] or order
        if all(key in values[t] and _same(values[t][key], values[scope[0]][key]) for t in scope):
            common[key] = values[scope[0]][key]
            continue
        for target in scope:
            if key in values[target]:
                section = per_target.setdefault(target, {})
                if key == CONFIG:
                    section["config"] = values[target][key]
                else:
                    section.setdefault(key[0], {})[key[1]] = values[target][key]
    record = dict(members[order[0]])
    for section in SECTIONS:
        record[section] = {key[1]: value for key, value in common.items() if key[0] == section and key != CONFIG}
    record["autotune"] = common.get(CONFIG)
    record["per_target"] = per_target
    record["launched_on"] = order if per_target or order != captured else None
    record["captured_as"] = captured
    record["answered_as"] = None
    record["key"] = json.dumps([kernel_ident(record), {section: record[section] for section in SECTIONS},
                                record["autotune"], per_target, record["launched_on"]], sort_keys=True, default=repr)
    return record
