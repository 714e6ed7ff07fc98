"""The command line: a typer app whose commands parse options, call `xisa.api` and render the result.

Every command is registered here, explicitly: the command modules never import this one.

This is the one error boundary: a domain error becomes one line on stderr and its exit code.
SIGTERM and SIGHUP stop a run as Ctrl-C does (workers killed, no golden half-written, temp files
removed): one line on stderr and the shell's convention, 128 + the signal (SIGINT 130, SIGTERM 143,
SIGHUP 129).
"""

from __future__ import annotations

import signal
import sys
import threading
import warnings

from typing import Annotated

import typer

from xisa.cli.ab import ab, ab_side
from xisa.cli.capture import capture
from xisa.cli.check import bless, check, diff, merge
from xisa.cli.compile import compile_command
from xisa.cli.device import device
from xisa.cli.doctor import doctor
from xisa.cli.export import export_command
from xisa.cli.inspect import cache_clear, cache_info, kernels, targets
from xisa.cli.report import report
from xisa.cli.ci import cache_key, shards
from xisa.compile.launch.warm import TORCH_WITHOUT_NUMPY
from xisa.api.diagnose import version_line
from xisa.errors import XisaError, interrupted

app = typer.Typer(
    name="xisa", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Cross-compile Triton kernels ahead of time and guard their machine code per architecture.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print xisa's version and the toolchain's, and exit.")] = False
             ) -> None:
    """Cross-compile Triton kernels ahead of time and guard their machine code per architecture."""


cache_app = typer.Typer(help="The result cache private to xisa.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
for name, command in (("check", check), ("bless", bless), ("diff", diff), ("merge", merge),
                      ("compile", compile_command), ("device", device), ("doctor", doctor), ("targets", targets),
                      ("kernels", kernels), ("report", report), ("capture", capture), ("ab", ab),
                      ("shards", shards), ("export", export_command)):
    app.command(name)(command)
app.command("ab-side", hidden=True)(ab_side)   # the half of `xisa ab` that runs in a side's own Python
cache_app.command("clear")(cache_clear)
cache_app.command("key")(cache_key)
cache_app.command("info")(cache_info)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_stopped_by = signal.SIGINT   # the signal that interrupted the run: KeyboardInterrupt unless a handler says


def _stop(signum: int, frame) -> None:
    """SIGTERM/SIGHUP: unwind like Ctrl-C, so every `finally` runs (workers killed, temp files removed)."""
    global _stopped_by
    _stopped_by = signum
    for other in _STOP_SIGNALS:  # a second one must not interrupt the clean-up
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt


_interrupt_seen = False   # a SIGINT came during the run: an error after it is its doing


def _on_sigint(signum: int, frame) -> None:
    """Ctrl-C, remembered: one that lands inside a C extension's import (torch importing NumPy) leaves it half made,
    and the next import of it fails with an ImportError of its own, with no KeyboardInterrupt in sight."""
    global _interrupt_seen
    _interrupt_seen = True
    raise KeyboardInterrupt


def _handle_stop_signals() -> dict[int, object]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {signum: signal.signal(signum, _stop) for signum in _STOP_SIGNALS}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not a host program's own handler
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _on_sigint)
    return previous


def _interrupted() -> None:
    if _stopped_by == signal.SIGINT:
        print("xisa: interrupted", file=sys.stderr)
    else:
        print(f"xisa: interrupted by {signal.Signals(_stopped_by).name}", file=sys.stderr)
    sys.exit(128 + _stopped_by)


def main(argv: list[str] | None = None) -> None:
    global _stopped_by, _interrupt_seen
    # The command's process: torch's import warns when NumPy is absent, which xisa's install leaves out.
    warnings.filterwarnings("ignore", message=TORCH_WITHOUT_NUMPY, category=UserWarning)
    _stopped_by, _interrupt_seen = signal.SIGINT, False
    previous = _handle_stop_signals()
    try:
        _main(argv)
    finally:  # after the run (or in-process callers): a late signal ends the process as usual
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _main(argv: list[str] | None) -> None:
    try:
        code = app(args=argv, standalone_mode=False)  # click returns typer.Exit's code here
        if code == 130:  # typer turns Ctrl-C (KeyboardInterrupt) into Exit(130); no command exits 130 itself
            _interrupted()
    except XisaError as exc:
        print(f"xisa: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except OSError as exc:  # a file xisa must read or write (an --output under a regular file, a full disk)
        import errno

        where = f"{exc.filename}: " if exc.filename else ""
        reason = "a regular file is in the way of a folder" if exc.errno in (errno.EEXIST, errno.ENOTDIR) else None
        print(f"xisa: error: {where}{reason or exc.strerror or exc} (fix: check the path, its permissions and "
              "free space)", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click usage errors (typer >= 0.22 vendors click as typer._click)
        if interrupted(exc) or _interrupt_seen:   # Ctrl-C inside a lazy import (class creation wraps it in a
            _interrupted()                          # RuntimeError; a C extension's next import fails on its own)
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
