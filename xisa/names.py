"""Names that become paths are validated here, never joined raw."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from xisa.errors import SpecError, UsageError, XisaError

KERNEL_NAME = re.compile(r"^[A-Za-z0-9_]+$")
CASE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# An arch target (`gfx942`), or a device of one: the arch target's name, '-', the device (`gfx942-mi308x`).
TARGET_NAME = re.compile(r"^[A-Za-z0-9_]+(-[A-Za-z0-9_]+)?$")
# A name becomes a folder or file name (golden/<kernel>/<case>/.<target>.yaml.<pid>.tmp), and file
# systems refuse names over 255 bytes; names are ASCII, so characters are bytes. 200 leaves room for
# the suffixes xisa adds.
MAX_NAME_LENGTH = 200


def is_valid_name(value: object, pattern: re.Pattern) -> bool:
    return (isinstance(value, str) and bool(pattern.match(value)) and ".." not in value
            and len(value) <= MAX_NAME_LENGTH)


def check_name(kind: str, value: object, pattern: re.Pattern, *, path: str | None = None, field: str | None = None) -> str:
    if isinstance(value, str) and len(value) > MAX_NAME_LENGTH and pattern.match(value) and ".." not in value:
        raise SpecError(
            f"{kind} name {value[:40] + '...'!r} is {len(value)} characters long, more than {MAX_NAME_LENGTH}",
            path=path,
            field=field,
            fix=f"use a name of at most {MAX_NAME_LENGTH} characters (it becomes a file name in golden/)",
        )
    if not is_valid_name(value, pattern):
        raise SpecError(
            f"{kind} name {value!r} is not allowed",
            path=path,
            field=field,
            fix=f"use only the characters {pattern.pattern[1:-1]}, no path separators or '..'",
        )
    return value


@dataclass(frozen=True, order=True)
class CellKey:
    """One cell: a kernel's case on a target. Written `kernel:case@target` everywhere xisa names it."""

    kernel: str
    case: str
    target: str

    def __str__(self) -> str:
        return f"{self.kernel}:{self.case}@{self.target}"

    @classmethod
    def parse(cls, text: str, *, error: type[XisaError] = UsageError, field: str | None = None) -> "CellKey":
        """`kernel:case@target` back into its parts; each must be a name xisa could have given (a cell id
        read from a report or a CI artifact is not trusted)."""
        head, _, target = text.rpartition("@")
        kernel, _, case = head.partition(":")
        for kind, value, pattern in (("kernel", kernel, KERNEL_NAME), ("case", case, CASE_NAME),
                                     ("target", target, TARGET_NAME)):
            if not is_valid_name(value, pattern):
                raise error(f"{value[:40]!r} is not a {kind} name", field=f"{field}.{kind}" if field else kind)
        return cls(kernel, case, target)


class NamedByCell:
    """For records that carry a cell's `kernel`, `case` and `target` names: its `CellKey` and id."""

    kernel: str
    case: str
    target: str

    @property
    def key(self) -> CellKey:
        return CellKey(self.kernel, self.case, self.target)

    @property
    def id(self) -> str:
        return str(self.key)


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate nearest by edit distance; ties go to the longest common prefix (gfx1101 -> gfx1100)."""
    if not candidates:
        return None

    def distance(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, cb in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        return row[-1]

    def prefix(a: str, b: str) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    return min(sorted(candidates), key=lambda c: (distance(name, c), -prefix(name, c)))


def display_path(path: Path, root: Path | None) -> str:
    """`path` as a user reads it: relative to `root` when inside it, else as given."""
    if root is not None:
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return str(path)
