"""`python -m xisa` and the `xisa` script: Ctrl-C while the command line's modules import (a second or more on
a loaded machine) ends with the same one line and exit code as Ctrl-C during a run, not a traceback."""

import atexit
import os
import sys

from xisa.errors import interrupted


def main() -> None:
    try:
        from xisa.cli import main as run
    except BaseException as exc:
        if not interrupted(exc):
            raise
        print("xisa: interrupted", file=sys.stderr)
        sys.exit(130)
    try:
        run()
    except SystemExit as exc:
        if "torch" not in sys.modules and "triton" not in sys.modules:
            raise
        _exit_now(exc.code)
    if "torch" in sys.modules or "triton" in sys.modules:
        _exit_now(0)


def _exit_now(code) -> None:
    """Exit as `sys.exit(code)` would, without the interpreter's teardown of torch and Triton (0.6 s of a run that
    compiled; a run that imported neither exits as usual): the command has closed what it wrote; exit handlers still
    run, and the streams are flushed."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe (`xisa ... | head`): nothing more can reach it
            pass
    os._exit(status)


if __name__ == "__main__":
    main()
