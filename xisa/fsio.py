"""File-system safety shared by every stage: nothing is read, written or deleted through a link, and
every file xisa replaces is replaced atomically."""

from __future__ import annotations

import contextlib
import os
import tempfile
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_temp(path: Path, data: str | bytes, *, mode: int | None = None, fsync: bool = False,
               prefix: str | None = None, suffix: str = ".tmp") -> Path:
    """`data` (text as UTF-8, LF kept) in a new temp file beside `path`, for the caller to rename over it.

    The temp file is made exclusively (never through a link) as `<prefix>XXXXXXXX<suffix>`, by default
    `.<name>.XXXXXXXX.tmp`. `mode` None keeps it private (0600); else `mode` less the umask. `fsync` makes
    the bytes durable before the rename. On any failure (a full disk, a signal) nothing is left behind.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}." if prefix is None else prefix,
                               suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if mode is not None:
                os.fchmod(handle.fileno(), mode & ~_umask())
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None, fsync: bool = False,
                 prefix: str | None = None, suffix: str = ".tmp") -> None:
    """Replace `path` with `data` all at once (a temp file in the same folder, then `os.replace`): a reader
    sees the old file or the new one, never half of one. Options as `write_temp`'s."""
    tmp = write_temp(path, data, mode=mode, fsync=fsync, prefix=prefix, suffix=suffix)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
