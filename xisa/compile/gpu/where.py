"""Where a device query came from: the line of the library's (or the program's) own code that made it.

A refused query names that line, never xisa's, torch's or Triton's frames under it (`torch.cuda.get_rng_state`
inside torch._dynamo, `subprocess.Popen` inside `triton.testing.nvsmi`) and never a target file: the line is what
the user reads, finds and stubs (`cut_cross_entropy/cce.py:87`, `run.py:22`).
"""

from __future__ import annotations

import os
import sys

# The fix for what a library asks that xisa cannot answer: a `[tool.xisa] import_hooks` file stubs it per target,
# around every kernel module's load and cell's compile and, under `xisa capture --as`, the captured program
# (docs/platform.md).
IMPORT_HOOK_FIX = ("an import hook (`xisa_import_hook(target)` in a file [tool.xisa] import_hooks names: "
                   "docs/platform.md#stub-it-in-an-import-hook)")

# The frames that are never the library's: the toolchain whose doors xisa answers, xisa and its capture hook, the
# import machinery. (The standard library too: `subprocess.Popen` is not who asked for nvidia-smi.)
_NOT_THE_ASKER = frozenset({"torch", "triton", "xisa", "_xisa_capture_hook", "_xisa_capture_sources",
                            "sitecustomize", "importlib", "_frozen_importlib", "_frozen_importlib_external",
                            "typing_extensions"})


def asking_frame(frame):
    """The innermost frame, from `frame` outwards, of code that is neither the toolchain, xisa nor the standard
    library: the line that asked (None: only those frames)."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        top = name.partition(".")[0]
        if top not in _NOT_THE_ASKER and top not in sys.stdlib_module_names \
                and not name.startswith("xisa_import_hook_"):
            return frame
        frame = frame.f_back
    return None


def asking_line(frame) -> tuple[str, str] | None:
    """(`cut_cross_entropy/cce.py:87`, `backward`): the asking frame's file, as the user finds it, with its line,
    and its function; None where no frame outside the toolchain asked."""
    found = asking_frame(frame)
    if found is None:
        return None
    shown = shown_file(found.f_code.co_filename, found.f_globals.get("__name__") or "")
    return f"{shown}:{found.f_lineno}", found.f_code.co_name


def shown_file(filename: str, module: str = "") -> str:
    """A module's file from the folder that holds its top package, wherever that is installed
    (`cut_cross_entropy/cce.py`, `smemlib/__init__.py`); a script's (`__main__`) relative to the working folder
    (`run.py`, `tests/test_x.py`), else its last two parts (`…/lib/mod.py`)."""
    if not os.path.isabs(filename):
        return filename
    parts = os.path.abspath(filename).split(os.sep)
    depth = len(module.split(".")) + (parts[-1] == "__init__.py") if module and module != "__main__" else 0
    stem = os.path.splitext(parts[-1])[0]
    names = module.split(".")
    if depth and len(parts) > depth and (stem == names[-1] or (stem == "__init__" and parts[-2] == names[-1])):
        return "/".join(parts[-depth:])
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    if cwd and os.path.abspath(filename).startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(filename, cwd).replace(os.sep, "/")
    return "…/" + "/".join(parts[-2:])
