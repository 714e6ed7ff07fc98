"""Sharding for CI matrices: a stable subset of cells by a hash of the cell id."""

from __future__ import annotations

import hashlib
import re

from xisa.errors import UsageError


def shard_of(cell_id: str, count: int) -> int:
    """A stable shard for a cell id: the same on every machine and Python run (no PYTHONHASHSEED)."""
    return int(hashlib.sha256(cell_id.encode()).hexdigest()[:8], 16) % count


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not (1 <= int(match.group(1)) <= int(match.group(2))):
        raise UsageError(f"shard {text!r} is not I/N with 1 <= I <= N", field="--shard", fix="e.g. --shard 2/3")
    return int(match.group(1)), int(match.group(2))
