"""Options shared by commands, and the consoles: results to stdout, diagnostics to stderr."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

SpecOption = Annotated[Optional[list[Path]], typer.Option("--spec", help="A spec file or folder (repeatable).")]
ArchOption = Annotated[Optional[list[str]], typer.Option("--arch", help="Target name or glob (repeatable).")]
KernelOption = Annotated[Optional[list[str]], typer.Option("--kernel", help="KERNEL or KERNEL:CASE glob (repeatable).")]
JobsOption = Annotated[int, typer.Option("--jobs", "-j", help="Parallel compiles (0: the cores available).")]
# A day: longer waits are mistakes, and larger numbers overflow the waits' system calls.
MAX_SECONDS = 86400.0


def _seconds(value: float, *, allow_zero: bool) -> float:
    """A finite number of seconds: `inf` overflows a wait and `nan` compares false, so it would never expire."""
    low_ok = value >= 0 if allow_zero else value > 0
    if not math.isfinite(value) or not low_ok or value > MAX_SECONDS:
        bounds = f"from 0 to {MAX_SECONDS:g}" if allow_zero else f"above 0 and at most {MAX_SECONDS:g}"
        raise typer.BadParameter(f"{value:g} is not a number of seconds {bounds}")
    return value


TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds one cell may compile.",
                                              callback=lambda value: _seconds(value, allow_zero=False))]
LockTimeoutOption = Annotated[float, typer.Option("--lock-timeout", help="Seconds to wait for another bless.",
                                                  callback=lambda value: _seconds(value, allow_zero=True))]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="Compile every cell; the results still refresh the cache.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict and errors.")]


def run_options(jobs: int, timeout: float, no_cache: bool, *, keep_stages: bool = False, note: bool = True):
    """Every command that compiles builds its options here, once: so a pinned variable the environment sets
    is named here, once per command, warm or cold (`note=False`: an `xisa ab` side, whose parent names it)."""
    from xisa.compile.runner import RunOptions
    from xisa.compile.worker.toolchain import pinned_note

    line = pinned_note() if note else None
    if line:
        stderr().print(f"xisa: note: {line}", markup=False, highlight=False)
    return RunOptions(jobs=jobs, timeout=timeout, use_cache=not no_cache, keep_stages=keep_stages)


def print_failure_lines(lines: list[str]) -> None:
    """Failed expectations, on stderr in every command (`expectation failed ID: WHY`, one a line)."""
    err = stderr()
    for line in lines:
        err.print(line, markup=False, highlight=False)


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False, width=None if os.isatty(1) else 200)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # a diagnostic stays one line, however long
