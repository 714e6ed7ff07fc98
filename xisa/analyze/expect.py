"""Expectations: facts about a cell's machine code that must survive a toolchain upgrade.

In the spirit of FileCheck's CHECK-COUNT: `v_cvt_pk_f32_fp8: 0`, `'v_wmma*': '>0'`,
`class:matrix: '>=8'`, `vgpr_spills: 0`, `occupancy: '>=4'`.

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

from xisa.analyze import amdgcn, sass
from xisa.analyze.model import Analysis
from xisa.errors import SpecError
from xisa.names import closest

ISA_OF_BACKEND = {"hip": "amdgcn", "cuda": "sass"}
VENDOR_OF_ISA = {"amdgcn": "AMD", "sass": "NVIDIA"}

# The per-ISA table: what each ISA's analysis reports. One home for the vendor differences.
RESOURCES: dict[str, tuple[str, ...]] = {
    "amdgcn": ("instructions", "vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes",
               "lds_bytes", "occupancy"),
    "sass": ("instructions", "registers", "stack_bytes", "local_bytes", "lds_bytes", "occupancy"),
}
# A key one ISA lacks but measures under other names because it means the same thing there:
# AMD's scratch (private segment: spills and stack) is NVIDIA's per-thread stack plus local memory.
RESOURCE_ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "sass": {"scratch_bytes": ("stack_bytes", "local_bytes")},
}
CLASSES: dict[str, tuple[str, ...]] = {"amdgcn": amdgcn.CLASSES, "sass": sass.CLASSES}
# Instruction classes that name the same kind of work on both vendors.
CLASS_ALIASES: dict[str, dict[str, str]] = {
    "amdgcn": {"tensor": "matrix", "shared": "lds", "global": "vmem", "local": "scratch"},
    "sass": {"matrix": "tensor", "lds": "shared", "vmem": "global", "scratch": "local"},
}
RESOURCE_KEYS = tuple(dict.fromkeys(key for keys in RESOURCES.values() for key in keys))
CLASS_NAMES = tuple(dict.fromkeys(name for names in CLASSES.values() for name in names))

# What an instruction mnemonic looks like, per ISA: amdgcn `v_cvt_pk_f32_fp8_e32`, a gfx11+ dual
# issue pair `v_dual_mov_b32::v_dual_and_b32`; SASS `HMMA.16816.F32.BF16`.
_AMDGCN_MNEMONIC = re.compile(r"^(?:(?:v|s|ds|buffer|global|flat|scratch|image|tbuffer)_[a-z0-9_]+"
                              r"(?:::v_[a-z0-9_]+)?|exp[a-z0-9_]*)$")
_SASS_MNEMONIC = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*$")
_GLOB = re.compile(r"[*?\[]")

_CONDITION = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(-?\d+)\s*$")
_OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
        "<": operator.lt, None: operator.eq}


@dataclass(frozen=True)
class Failure:
    pattern: str
    key: str
    condition: str
    actual: int | None          # None: the analysis does not report it (a golden of an older format)

    def __str__(self) -> str:
        got = "nothing (not reported)" if self.actual is None else self.actual
        return f"{self.key} {self.condition} expected (target pattern {self.pattern!r}), got {got}"


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


def check_key(key: str, *, path: str | None, field: str) -> None:
    """A key must be a resource, a known class, a glob, or look like a mnemonic and not like a
    misspelt resource. Anything else could never fail (it would count 0), so it is refused."""
    if key in RESOURCE_KEYS:
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
    resource = difflib.get_close_matches(key, list(RESOURCE_KEYS), n=1, cutoff=0.75)
    if resource or not (_AMDGCN_MNEMONIC.match(key) or _SASS_MNEMONIC.match(key)):
        fix = (f"did you mean {resource[0]!r}?" if resource else
               f"a resource ({', '.join(RESOURCE_KEYS)}), class:NAME, or an instruction mnemonic or glob "
               "(e.g. v_cvt_pk_f32_fp8, 'v_wmma*', 'HMMA*')")
        raise SpecError(f"unknown key {key!r}: not a resource, a class:NAME or an instruction mnemonic",
                        path=path, field=field, fix=fix)


def validate(expect: tuple[tuple[str, dict], ...], *, path: str, field: str) -> None:
    for pattern, conds in expect:
        for key, value in conds.items():
            check_key(key, path=path, field=f"{field}.expect.{pattern}.{key}")
            parse_condition(value, path=path, field=f"{field}.expect.{pattern}.{key}")


def check_for_target(expect: tuple[tuple[str, dict], ...], target: str, backend: str, *, path: str,
                     field: str) -> None:
    """Every resource or class expected of `target` must be one its ISA reports (or an alias)."""
    isa = ISA_OF_BACKEND[backend]
    for pattern, conds in expect:
        if not fnmatch.fnmatchcase(target, pattern):
            continue
        for key in conds:
            where = f"{field}.expect.{pattern}.{key}"
            if key in RESOURCE_KEYS and key not in RESOURCES[isa] and key not in RESOURCE_ALIASES.get(isa, {}):
                reported = list(RESOURCES[isa]) + list(RESOURCE_ALIASES.get(isa, {}))
                raise SpecError(f"{target} ({VENDOR_OF_ISA[isa]}) does not report {key!r}", path=path, field=where,
                                fix=f"{target} reports {', '.join(reported)}; or narrow the target pattern "
                                    f"{pattern!r} to the targets that report it")
            if key.startswith("class:"):
                name = key[len("class:"):]
                if name not in CLASSES[isa] and name not in CLASS_ALIASES[isa]:
                    raise SpecError(f"{target} ({VENDOR_OF_ISA[isa]}) has no instruction class {name!r}", path=path,
                                    field=where, fix=f"{target}'s classes: {', '.join(CLASSES[isa])}; or narrow "
                                                     f"the target pattern {pattern!r}")


# How each ISA spells an instruction: LLVM prints AMD mnemonics in lower case (AMD's manuals write them
# in capitals), and SASS opcodes are upper case (modifiers may not be: `HGMMA.64x128x16.F32`).
def _can_be_spelt_by(key: str, isa: str) -> bool:
    if isa == "amdgcn":
        return key == key.lower()
    return bool(_GLOB.search(key)) or key.split(".", 1)[0] == key.split(".", 1)[0].upper()


def check_against_targets(expect: tuple[tuple[str, dict], ...], known: dict[str, str], *, path: str,
                          field: str) -> None:
    """Expectations that could never apply or never count, refused against every known target (name ->
    backend), whatever the selection: a target pattern that matches none (a typo such as 'gfx110'), and
    an instruction key that no target the pattern matches can print (`V_CVT_PK_F32_FP8: 0` on gfx11
    would hold whatever the code)."""
    for pattern, conds in expect:
        matched = [name for name in known if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            near = closest(pattern, sorted(known))
            raise SpecError(f"target pattern {pattern!r} matches no known target", path=path,
                            field=f"{field}.expect.{pattern}",
                            fix=f"did you mean {near!r}?" if near else "see `xisa targets`")
        isas = {ISA_OF_BACKEND[known[name]] for name in matched}
        for key in conds:
            if key in RESOURCE_KEYS or key.startswith("class:"):
                continue
            if not any(_can_be_spelt_by(key, isa) for isa in isas):
                vendors = "/".join(sorted(VENDOR_OF_ISA[isa] for isa in isas))
                rule = ("AMD mnemonics are lower case, as LLVM prints them" if isas == {"amdgcn"} else
                        "NVIDIA opcodes are upper case")
                spelt = key.lower() if isas == {"amdgcn"} else key.split(".", 1)[0].upper()
                raise SpecError(f"{key!r} can never count anything on the targets {pattern!r} matches ({vendors}): "
                                f"{rule}", path=path, field=f"{field}.expect.{pattern}.{key}",
                                fix=f"{spelt!r}, or a target pattern that matches the targets of its vendor")


def is_resource_or_class(key: str) -> bool:
    return key in RESOURCE_KEYS or key.startswith("class:")


def measure(key: str, analysis: Analysis) -> int | None:
    """The count or resource `key` names; None where the analysis's ISA does not report it."""
    if key == "instructions":
        return analysis.instructions
    if key in RESOURCE_KEYS:
        names = RESOURCE_ALIASES.get(analysis.isa, {}).get(key, (key,))
        values = [analysis.resources.get(name) for name in names]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return None
        return int(sum(values))
    if key.startswith("class:"):
        name = key[len("class:"):]
        name = CLASS_ALIASES.get(analysis.isa, {}).get(name, name)
        if name not in CLASSES.get(analysis.isa, ()):
            return None
        return int(analysis.classes.get(name, 0))
    # A mnemonic or glob: each raw mnemonic counted once, matched raw or by its base name.
    total = 0
    for raw, count in analysis.histogram.items():
        base = _base_of(raw, analysis)
        if fnmatch.fnmatchcase(raw, key) or fnmatch.fnmatchcase(base, key):
            total += count
    return total


def _base_of(raw: str, analysis: Analysis) -> str:
    if analysis.isa == "amdgcn":
        return amdgcn.base_mnemonic(raw)
    return sass.base_mnemonic(raw)


def evaluate(expect: tuple[tuple[str, dict], ...], target: str, analysis: Analysis, *, path: str = "",
             field: str = "") -> list[Failure]:
    failures = []
    for pattern, conds in expect:
        if not fnmatch.fnmatchcase(target, pattern):
            continue
        for key, value in conds.items():
            op, number = parse_condition(value, path=path, field=f"{field}.expect.{pattern}.{key}")
            actual = measure(key, analysis)
            if actual is None or not _OPS[op](actual, number):
                failures.append(Failure(pattern, key, f"{op or '=='} {number}", actual))
    return failures
