"""Options shared by commands, and the consoles: results to stdout, diagnostics to stderr."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

SpecOption = Annotated[Optional[list[Path]], typer.Option("--spec", help="A spec file or folder (repeatable).")]
ArchOption = Annotated[Optional[list[str]], typer.Option("--arch", help="Target name or glob (repeatable).")]
KernelOption = Annotated[Optional[list[str]], typer.Option("--kernel", help="KERNEL or KERNEL:CASE glob (repeatable).")]
JobsOption = Annotated[int, typer.Option("--jobs", "-j", help="Parallel compiles (0: the cores available).")]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds one cell may compile.")]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="Compile every cell; the results still refresh the cache.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict and errors.")]


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False, width=None if os.isatty(1) else 200)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)  # a diagnostic stays one line, however long
