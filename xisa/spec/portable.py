"""Text a captured spec carries, with no absolute path of the capturing machine in it.

A path reaches a captured spec's comments from the kernel's file, the command line (the interpreter,
scripts, folders), a pytest node id, the repr of an argument, a compiler's message (tmp folders, the
installed Triton). Each is shown relative to the project when inside it, relative to its `site-packages`
folder when installed (`<site-packages>/flag_gems/ops/add.py`), `~`-relative under the home folder, and
otherwise by its last part only (`…/code_cache/x.py`). The rule is applied to a whole text too, for any
absolute path that appears inside it.
"""

from __future__ import annotations

import os
import re
import shlex
import sysconfig
from pathlib import Path

# An absolute POSIX path inside a text: after a start, a space, a quote or a bracket, never inside a URL (`://`)
# or a relative path (`a/b`).
ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/(?:[^\s'\"`,;()\[\]{}<>|*?]+)")
SITE = "<site-packages>"


def _site_dirs() -> list[str]:
    dirs = {sysconfig.get_paths().get(key) for key in ("purelib", "platlib")}
    return sorted((os.path.abspath(d) for d in dirs if d), key=len, reverse=True)


def portable_path(path: str | Path, root: Path) -> str:
    """One absolute path as a captured spec shows it (a relative one is returned as given)."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    absolute = os.path.abspath(text)
    for base, shown in [(os.path.abspath(root), "")] + [(d, SITE + "/") for d in _site_dirs()]:
        if absolute == base:
            return shown.rstrip("/") or "."
        if absolute.startswith(base.rstrip(os.sep) + os.sep):
            return shown + Path(os.path.relpath(absolute, base)).as_posix()
    if "site-packages" in Path(absolute).parts:   # another environment's installed package
        parts = Path(absolute).parts
        return SITE + "/" + "/".join(parts[len(parts) - parts[::-1].index("site-packages"):])
    home = os.path.expanduser("~")
    if home not in ("", "/") and absolute.startswith(home.rstrip(os.sep) + os.sep):
        return "~/" + Path(os.path.relpath(absolute, home)).as_posix()
    parts = Path(absolute).parts
    return "…/" + "/".join(parts[-2:]) if len(parts) > 2 else "…/" + parts[-1]


def portable_text(text: str, root: Path) -> str:
    """`text` with every absolute path in it shown as `portable_path` shows it."""
    return ABSOLUTE_PATH.sub(lambda match: portable_path(match.group(0), root), text)


def portable_command(command: list[str], root: Path) -> str:
    """The command line as the spec's header shows it: the program by its name (`python`, not the
    interpreter's path), each argument as `portable_text` shows it."""
    if not command:
        return ""
    program = os.path.basename(command[0]) if os.path.isabs(command[0]) else command[0]
    return shlex.join([program] + [portable_text(argument, root) for argument in command[1:]])
