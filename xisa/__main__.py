"""`python -m xisa` and the `xisa` script: Ctrl-C while the command line's modules import (a second or more on
a loaded machine) ends with the same one line and exit code as Ctrl-C during a run, not a traceback."""

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
    run()


if __name__ == "__main__":
    main()
