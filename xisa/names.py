"""Names that become paths are validated here, never joined raw."""

from __future__ import annotations

import re

from xisa.errors import SpecError

KERNEL_NAME = re.compile(r"^[A-Za-z0-9_]+$")
CASE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
TARGET_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def check_name(kind: str, value: object, pattern: re.Pattern, *, path: str | None = None, field: str | None = None) -> str:
    if not isinstance(value, str) or not pattern.match(value) or ".." in value:
        raise SpecError(
            f"{kind} name {value!r} is not allowed",
            path=path,
            field=field,
            fix=f"use only the characters {pattern.pattern[1:-1]}, no path separators or '..'",
        )
    return value
