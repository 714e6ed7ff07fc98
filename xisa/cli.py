"""The command line: a typer app whose commands are thin wrappers over library calls.

This is the one error boundary: a domain error becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import sys

import typer

from xisa.errors import XisaError

app = typer.Typer(
    name="xisa", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Cross-compile Triton kernels ahead of time and guard their machine code per architecture.",
)
cache_app = typer.Typer(help="The result cache private to xisa.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _register() -> None:
    from xisa.commands import check, compile, device, doctor, inspect, report  # noqa: F401  (commands register themselves)


def main(argv: list[str] | None = None) -> None:
    try:
        _register()
        code = app(args=argv, standalone_mode=False)  # click returns typer.Exit's code here
        if code == 130:  # typer turns Ctrl-C (KeyboardInterrupt) into Exit(130); no command exits 130 itself
            print("xisa: interrupted", file=sys.stderr)
    except XisaError as exc:
        print(f"xisa: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("xisa: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:  # a file xisa must read or write (an --output under a regular file, a full disk)
        import errno

        where = f"{exc.filename}: " if exc.filename else ""
        reason = "a regular file is in the way of a folder" if exc.errno in (errno.EEXIST, errno.ENOTDIR) else None
        print(f"xisa: error: {where}{reason or exc.strerror or exc} (fix: check the path, its permissions and "
              "free space)", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click usage errors (typer >= 0.22 vendors click as typer._click)
        if isinstance(exc, _click_exceptions()):
            message = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)
            fix = f" (fix: see `{ctx.command_path} --help`)" if ctx is not None else ""
            print(f"xisa: error: {message}{fix}", file=sys.stderr)
            sys.exit(2)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _click_exceptions() -> tuple[type, ...]:
    classes = []
    try:
        from typer._click.exceptions import ClickException as vendored

        classes.append(vendored)
    except ImportError:
        pass
    try:
        from click.exceptions import ClickException

        classes.append(ClickException)
    except ImportError:
        pass
    return tuple(classes)
