"""A progress bar on stderr for long runs; silent when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from xisa.compile.result import CellResult


@contextlib.contextmanager
def progress_reporter(total: int, *, enabled: bool | None = None) -> Iterator[Callable[[CellResult], None]]:
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or total < 2:
        yield lambda result: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    errors = 0
    with Progress(TextColumn("cells"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[errors]} errors"),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("cells", total=total, errors=0)

        def advance(result: CellResult) -> None:
            nonlocal errors
            errors += 0 if result.ok else 1
            bar.update(task, advance=1, errors=errors)

        yield advance
