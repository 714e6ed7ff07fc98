"""`python -m xisa` and the `xisa` script: Ctrl-C while the command line's modules import (a second or more on
a loaded machine) ends with the same one line and exit code as Ctrl-C during a run, not a traceback."""

import sys


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C, also as the cause of another error: one that lands in a class's creation comes out
    as `RuntimeError: Error calling __set_name__ ...` (a dataclass's fields), its cause the KeyboardInterrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def main() -> None:
    try:
        from xisa.cli import main as run
    except BaseException as exc:
        if not interrupted(exc):
            raise
        print("xisa: interrupted", file=sys.stderr)
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
