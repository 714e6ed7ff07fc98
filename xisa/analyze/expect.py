"""Expectations: facts about a cell's machine code that must survive a toolchain upgrade.

In the spirit of FileCheck's CHECK-COUNT: `v_cvt_pk_f32_fp8: 0`, `'v_wmma*': '>0'`,
`class:matrix: '>=8'`, `vgpr_spills: 0`, `occupancy: '>=4'`; `launchable: false` for a cell that
is known not to fit one workgroup on a target (see `judge_launch`); and `loop:KEY` for the loops of
the stream (`loop:scratch: 0`: no scratch access inside any loop), measured as the largest value over
the cell's loops (`xisa.analyze.loops`), 0 where it has none.

An expectation that can never fail is worse than none, so keys are checked twice: when the spec
loads (a key must be a resource, a known `class:NAME`, or look like an instruction mnemonic), and
when a cell is resolved for a target (the target's ISA must report that resource or class, directly
or under the name it has on that vendor).
"""

from __future__ import annotations

import difflib
import fnmatch
import operator
import re
from dataclasses import dataclass
from typing import Any

from xisa.analyze.backends import (BACKENDS, CLASS_NAMES, EXPECTABLE_RESOURCES as RESOURCE_KEYS, Backend, backend,
                                   backend_of_isa)
from xisa.analyze.loops import Loop, analysis_loops
from xisa.analyze.model import Analysis
from xisa.analyze.occupancy import Excess
from xisa.errors import SpecError
from xisa.names import closest

_GLOB = re.compile(r"[*?\[]")
# Whether one workgroup of the cell fits the target's per-workgroup limits: `true` or `false`, not a count.
LAUNCHABLE = "launchable"

# `loop:KEY`: KEY measured in each loop, the largest value over the loops counts. A loop has no resources
# of its own: besides classes and mnemonics it has these counts.
LOOP = "loop:"
LOOP_COUNTS = ("instructions", "scratch", "spills")

_CONDITION = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(-?\d+)\s*$")
_OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        "<": operator.lt, None: operator.eq}


@dataclass(frozen=True)
class Condition:
    """`'>=4'`, `0`: how a measured count must compare."""

    op: str | None          # None: equal
    number: int

    def holds(self, actual: int) -> bool:
        return _OPS[self.op](actual, self.number)

    def __str__(self) -> str:
        return f"{self.op or '=='} {self.number}"


@dataclass(frozen=True)
class Expectation:
    """One `KEY: CONDITION` of a spec's `expect: {TARGET_PATTERN: {...}}`, checked when the spec loads."""

    key: str
    condition: Condition
    written: Any            # the value as the spec wrote it


# (target pattern, its expectations), in the order the spec's layers first name them.
Expectations = tuple[tuple[str, tuple[Expectation, ...]], ...]


@dataclass(frozen=True)
class Failure:
    pattern: str
    key: str
    condition: str
    actual: int | bool | None   # None: the analysis does not report it (a golden of an older format)
    where: str = ""             # a `loop:` key: which loop measured `actual` ("in the loop at ...")

    def __str__(self) -> str:
        got = ("nothing (not reported)" if self.actual is None else
               str(self.actual).lower() if isinstance(self.actual, bool) else self.actual)
        return f"{self.key} {self.condition} expected (target pattern {self.pattern!r}), got {got}" + \
            (f" {self.where}" if self.where else "")


def parse_condition(value: Any, *, path: str, field: str) -> Condition:
    if isinstance(value, bool):
        raise SpecError(f"{value!r} is not a count condition", path=path, field=field, fix="use 0, '>0', '<=80', ...")
    if isinstance(value, int):
        return Condition(None, value)
    if isinstance(value, str):
        match = _CONDITION.match(value)
        if match:
            return Condition(match.group(1), int(match.group(2)))
    raise SpecError(f"{value!r} is not a count condition", path=path, field=field,
                    fix="use an int or a string like '>0', '>=4', '<=80', '!=0'")


def check_key(key: str, *, path: str | None, field: str) -> None:
    """A key must be a resource, a known class, a glob, or look like a mnemonic and not like a
    misspelt resource. Anything else could never fail (it would count 0), so it is refused."""
    if key.startswith(LOOP):
        inner = key[len(LOOP):]
        if inner in LOOP_COUNTS:
            return
        if inner in RESOURCE_KEYS or inner == LAUNCHABLE or inner.startswith(LOOP) or inner == "scratch_bytes":
            raise SpecError(f"{key!r}: {inner!r} is the kernel's, not a loop's", path=path, field=field,
                            fix=f"use {inner!r} without 'loop:', or a loop count: "
                                f"{', '.join(LOOP + c for c in LOOP_COUNTS)}, loop:class:NAME, loop:MNEMONIC")
        near = difflib.get_close_matches(inner, list(LOOP_COUNTS), n=1, cutoff=0.75)
        if near:
            raise SpecError(f"unknown loop key {key!r}", path=path, field=field, fix=f"did you mean '{LOOP}{near[0]}'?")
        check_key(inner, path=path, field=field)
        return
    if key in RESOURCE_KEYS or key == LAUNCHABLE:
        return
    if key.startswith("class:"):
        name = key[len("class:"):]
        if name not in CLASS_NAMES:
            near = difflib.get_close_matches(name, list(CLASS_NAMES), n=1, cutoff=0.6)
            raise SpecError(f"unknown instruction class {name!r}", path=path, field=field,
                            fix=f"did you mean 'class:{near[0]}'?" if near else f"classes: {', '.join(CLASS_NAMES)}")
        return
    if _GLOB.search(key):
        return  # a count over the histogram; a glob that matches nothing is a fact (0), not a typo
    resource = difflib.get_close_matches(key, [*RESOURCE_KEYS, LAUNCHABLE], n=1, cutoff=0.75)
    if resource or not any(b.mnemonic.match(key) for b in BACKENDS):
        fix = (f"did you mean {resource[0]!r}?" if resource else
               f"a resource ({', '.join(RESOURCE_KEYS)}), class:NAME, or an instruction mnemonic or glob "
               "(e.g. v_cvt_pk_f32_fp8, 'v_wmma*', 'HMMA*')")
        raise SpecError(f"unknown key {key!r}: not a resource, a class:NAME or an instruction mnemonic",
                        path=path, field=field, fix=fix)


def parse_expectations(expect: dict[str, dict[str, Any]], *, path: str, field: str) -> Expectations:
    """A layer's `expect` mapping (target pattern -> {key: condition}), each key and condition checked."""
    parsed = []
    for pattern, conds in expect.items():
        checks = []
        for key, value in conds.items():
            where = f"{field}.expect.{pattern}.{key}"
            check_key(key, path=path, field=where)
            if key == LAUNCHABLE:
                if not isinstance(value, bool):
                    raise SpecError(f"{value!r} is not true or false", path=path, field=where,
                                    fix="launchable: false (the cell is known not to launch there) or true")
                condition = Condition(None, int(value))
            else:
                condition = parse_condition(value, path=path, field=where)
            checks.append(Expectation(key, condition, value))
        parsed.append((pattern, tuple(checks)))
    return tuple(parsed)


def check_for_target(expect: Expectations, target: str, backend_name: str, *, path: str, field: str) -> None:
    """Every resource or class expected of `target` must be one its ISA reports (or an alias)."""
    handler = backend(backend_name)
    for pattern, checks in expect:
        if not fnmatch.fnmatchcase(target, pattern):
            continue
        for written in (e.key for e in checks):
            where = f"{field}.expect.{pattern}.{written}"
            key = written.removeprefix(LOOP)
            if key in RESOURCE_KEYS and key not in handler.expectable_resources and key not in handler.resource_aliases:
                reported = list(handler.expectable_resources) + list(handler.resource_aliases)
                raise SpecError(f"{target} ({handler.vendor}) does not report {key!r}", path=path, field=where,
                                fix=f"{target} reports {', '.join(reported)}; or narrow the target pattern "
                                    f"{pattern!r} to the targets that report it")
            if key.startswith("class:"):
                name = key[len("class:"):]
                if name not in handler.classes and name not in handler.class_aliases:
                    raise SpecError(f"{target} ({handler.vendor}) has no instruction class {name!r}", path=path,
                                    field=where, fix=f"{target}'s classes: {', '.join(handler.classes)}; or narrow "
                                                     f"the target pattern {pattern!r}")


def check_against_targets(expect: Expectations, known: dict[str, str], *, path: str, field: str) -> None:
    """Expectations that could never apply or never count, refused against every known target (name ->
    backend), whatever the selection: a target pattern that matches none (a typo such as 'gfx110'), and
    an instruction key that no target the pattern matches can print (`V_CVT_PK_F32_FP8: 0` on gfx11
    would hold whatever the code)."""
    for pattern, checks in expect:
        matched = [name for name in known if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            near = closest(pattern, sorted(known))
            raise SpecError(f"target pattern {pattern!r} matches no known target", path=path,
                            field=f"{field}.expect.{pattern}",
                            fix=f"did you mean {near!r}?" if near else "see `xisa targets`")
        handlers = [b for b in BACKENDS if any(known[name] == b.name for name in matched)]
        for key in (e.key.removeprefix(LOOP) for e in checks):
            if is_resource_or_class(key) or key in LOOP_COUNTS:
                continue
            if not any(handler.spells(key) for handler in handlers):
                vendors = "/".join(sorted(handler.vendor for handler in handlers))
                told = handlers[-1]   # the rule of the last in table order, where the targets span vendors
                raise SpecError(f"{key!r} can never count anything on the targets {pattern!r} matches ({vendors}): "
                                f"{told.spelling_rule}", path=path, field=f"{field}.expect.{pattern}.{key}",
                                fix=f"{told.respell(key)!r}, or a target pattern that matches the targets of its vendor")


def is_resource_or_class(key: str) -> bool:
    return key in RESOURCE_KEYS or key == LAUNCHABLE or key.startswith("class:")


def _count(key: str, histogram: dict[str, int], handler: Backend) -> int:
    """A mnemonic or glob over a raw histogram: each raw mnemonic counted once, matched raw or by its base name."""
    total = 0
    for raw, count in histogram.items():
        if fnmatch.fnmatchcase(raw, key) or fnmatch.fnmatchcase(handler.base_mnemonic(raw), key):
            total += count
    return total


def measure_loop(key: str, loop: Loop, handler: Backend) -> int | None:
    """`key` (without `loop:`) measured in one loop; None where the ISA has no such class."""
    if key in LOOP_COUNTS:
        return {"instructions": loop.instructions, "scratch": loop.scratch, "spills": loop.spills}[key]
    if key.startswith("class:"):
        name = handler.class_aliases.get(key[len("class:"):], key[len("class:"):])
        return int(loop.classes.get(name, 0)) if name in handler.classes else None
    return _count(key, loop.histogram, handler)


def measure_loops(key: str, loops: list[Loop], handler: Backend) -> tuple[int | None, Loop | None]:
    """`loop:KEY`: (the largest value over `loops`, the loop that has it); (0, None) without loops."""
    best: tuple[int | None, Loop | None] = (0, None)
    for loop in loops:
        value = measure_loop(key.removeprefix(LOOP), loop, handler)
        if value is None:
            return None, None
        if best[1] is None or value > best[0]:
            best = (value, loop)
    return best


def measure(key: str, analysis: Analysis) -> int | None:
    """The count or resource `key` names; None where the analysis's ISA does not report it."""
    if key.startswith(LOOP):
        return measure_loops(key, analysis_loops(analysis), backend_of_isa(analysis.isa))[0]
    if key == "instructions":
        return analysis.instructions
    if key == LAUNCHABLE:     # not a count of the code: judged with the target (`judge_launch`)
        return None
    handler = backend_of_isa(analysis.isa)
    if key in RESOURCE_KEYS:
        names = handler.resource_aliases.get(key, (key,))
        values = [analysis.resources.get(name) for name in names]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return None
        return int(sum(values))
    if key.startswith("class:"):
        name = key[len("class:"):]
        name = handler.class_aliases.get(name, name)
        if name not in handler.classes:
            return None
        return int(analysis.classes.get(name, 0))
    return _count(key, analysis.histogram, handler)


def evaluate(expect: Expectations, target: str, analysis: Analysis, *, launchable: bool = True) -> list[Failure]:
    """The expectations of `target` that `analysis` breaks. `launchable: false` fails on a cell that
    launches; `launchable: true` on one that does not is left to its launch verdict (`judge_launch`)."""
    failures = []
    loops: list[Loop] | None = None      # found once, on the first `loop:` key
    for pattern, checks in expect:
        if not fnmatch.fnmatchcase(target, pattern):
            continue
        for check in checks:
            if check.key == LAUNCHABLE:
                if launchable and not check.written:
                    failures.append(Failure(pattern, LAUNCHABLE, "== false", True))
                continue
            if check.key.startswith(LOOP):
                loops = analysis_loops(analysis) if loops is None else loops
                actual, loop = measure_loops(check.key, loops, backend_of_isa(analysis.isa))
                if actual is None or not check.condition.holds(actual):
                    failures.append(Failure(pattern, check.key, str(check.condition), actual,
                                            f"in the {loop.where}" if loop else "(the stream has no loop)"))
                continue
            actual = measure(check.key, analysis)
            if actual is None or not check.condition.holds(actual):
                failures.append(Failure(pattern, check.key, str(check.condition), actual))
    return failures


@dataclass(frozen=True)
class Launch:
    """Whether one workgroup (block) of a cell fits its target, and whether the spec said so."""

    excess: tuple[Excess, ...]      # the per-workgroup limits exceeded; empty: it launches
    expected: bool | None           # the spec's `launchable` for this target; None: not stated (true)
    target_file: str                # where the limits are written (`targets/gfx942.yaml`)

    @property
    def launchable(self) -> bool:
        return not self.excess

    @property
    def unexpected(self) -> bool:
        """It cannot launch and the spec does not expect that: the cell's verdict is `cannot-launch`."""
        return bool(self.excess) and self.expected is not False

    def reason(self) -> str:
        """`lds_bytes 98304 > 65536 per workgroup (targets/gfx942.yaml)`; empty when it launches."""
        return "; ".join(str(e) for e in self.excess) + f" ({self.target_file})" if self.excess else ""

    def __str__(self) -> str:
        if not self.excess:
            return "launches"
        return f"cannot launch: {self.reason()}" + (" (expected: launchable: false)" if not self.unexpected else "")

    def to_json(self) -> dict[str, Any]:
        return {"launchable": self.launchable, "expected": self.expected, "target_file": self.target_file,
                "exceeds": [e.to_json() for e in self.excess]}


def expected_launchable(expect: Expectations, target: str) -> bool | None:
    """The spec's `launchable` for `target`: False when a matching pattern says false and none says
    true (a contradiction keeps the default, so it cannot hide a cell that does not launch)."""
    said = {check.written for pattern, checks in expect if fnmatch.fnmatchcase(target, pattern)
            for check in checks if check.key == LAUNCHABLE}
    if not said:
        return None
    return False if said == {False} else True


def judge_launch(expect: Expectations, target: str, excess: list[Excess], *, target_file: str) -> Launch:
    return Launch(excess=tuple(excess), expected=expected_launchable(expect, target), target_file=target_file)
