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
    from xisa.commands import check, compile, device, inspect  # noqa: F401  (commands register themselves)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        code = app(args=argv, standalone_mode=False)  # click returns typer.Exit's code here
    except XisaError as exc:
        print(f"xisa: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("xisa: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(2)
        raise
    sys.exit(code if isinstance(code, int) else 0)
