"""Expectations: facts about a cell's machine code that must survive a toolchain upgrade.

In the spirit of FileCheck's CHECK-COUNT: `v_cvt_pk_f32_fp8: 0`, `'v_wmma*': '>0'`,
`class:matrix: '>=8'`, `vgpr_spills: 0`, `occupancy: '>=4'`.
"""

from __future__ import annotations

import fnmatch
import operator
import re
from dataclasses import dataclass
from typing import Any

from xisa.analyze.model import Analysis
from xisa.errors import SpecError

RESOURCE_KEYS = ("instructions", "vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes",
                 "lds_bytes", "occupancy", "registers", "local_bytes", "stack_bytes")
_CONDITION = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(-?\d+)\s*$")
_OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        "<": operator.lt, None: operator.eq}


@dataclass(frozen=True)
class Failure:
    pattern: str
    key: str
    condition: str
    actual: int

    def __str__(self) -> str:
        return f"{self.key} {self.condition} expected (target pattern {self.pattern!r}), got {self.actual}"


def parse_condition(value: Any, *, path: str, field: str) -> tuple[str | None, int]:
    if isinstance(value, bool):
        raise SpecError(f"{value!r} is not a count condition", path=path, field=field, fix="use 0, '>0', '<=80', ...")
    if isinstance(value, int):
        return None, value
    if isinstance(value, str):
        match = _CONDITION.match(value)
        if match:
            return match.group(1), int(match.group(2))
    raise SpecError(f"{value!r} is not a count condition", path=path, field=field,
                    fix="use an int or a string like '>0', '>=4', '<=80', '!=0'")


def validate(expect: tuple[tuple[str, dict], ...], *, path: str, field: str) -> None:
    for pattern, conds in expect:
        for key, value in conds.items():
            parse_condition(value, path=path, field=f"{field}.expect.{pattern}.{key}")


def measure(key: str, analysis: Analysis) -> int:
    if key == "instructions":
        return analysis.instructions
    if key in RESOURCE_KEYS:
        value = analysis.resources.get(key)
        return int(value) if isinstance(value, (int, float)) else 0
    if key.startswith("class:"):
        return int(analysis.classes.get(key[len("class:"):], 0))
    # A mnemonic or glob: each raw mnemonic counted once, matched raw or by its base name.
    total = 0
    for raw, count in analysis.histogram.items():
        base = _base_of(raw, analysis)
        if fnmatch.fnmatchcase(raw, key) or fnmatch.fnmatchcase(base, key):
            total += count
    return total


def _base_of(raw: str, analysis: Analysis) -> str:
    if analysis.isa == "amdgcn":
        from xisa.analyze.amdgcn import base_mnemonic

        return base_mnemonic(raw)
    return raw.split(".", 1)[0]


def evaluate(expect: tuple[tuple[str, dict], ...], target: str, analysis: Analysis, *, path: str = "",
             field: str = "") -> list[Failure]:
    failures = []
    for pattern, conds in expect:
        if not fnmatch.fnmatchcase(target, pattern):
            continue
        for key, value in conds.items():
            op, number = parse_condition(value, path=path, field=f"{field}.expect.{pattern}.{key}")
            actual = measure(key, analysis)
            if not _OPS[op](actual, number):
                failures.append(Failure(pattern, key, f"{op or '=='} {number}", actual))
    return failures
