"""File-system safety shared by every stage: nothing is read, written or deleted through a link."""

from __future__ import annotations

import os
from pathlib import Path

from xisa.errors import GoldenError


def _shown(path: Path) -> str:
    """`path` relative to the working folder when inside it; never resolved, which would follow the link."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute if relative.startswith("..") else relative


def refuse_link(path: Path) -> None:
    """Refuse to go through `path` when it is a link (git stores links; one in golden/ can lead anywhere)."""
    if os.path.islink(path):
        raise GoldenError(f"is a link (to {os.readlink(path)}): xisa never reads, writes or deletes goldens through "
                          "a link", path=_shown(path),
                          fix="replace the link with the real file or folder, or git rm it")
