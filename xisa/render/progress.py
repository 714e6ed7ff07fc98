"""Progress of a long run on stderr: a bar on a terminal; elsewhere (a CI log) a plain line at least every
XISA_PROGRESS_SECONDS (10 s by default) while cells compile, so a cold check never looks hung."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from xisa.compile.worker.result import CellResult

PROGRESS_SECONDS = 10.0   # at most this long without a line in a CI log (XISA_PROGRESS_SECONDS overrides)


class LineProgress:
    """Plain progress lines (`xisa: 12/75 cells, 34 s, 0.35 cells/s`) for output that is not a terminal. A line
    comes when `interval` seconds passed since the last (on a result, or on `tick`, which a timer thread calls so a
    slow cell still gets its lines); a run shorter than `interval` prints nothing, a longer one a last line."""

    def __init__(self, total: int, *, write: Callable[[str], None], interval: float = PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.write, self.interval, self.clock = total, write, interval, clock
        self.done = self.errors = 0
        self.start = self.last = clock()
        self.lines = 0
        self._lock = threading.Lock()   # the timer thread and the results' callback

    def line(self, *, final: bool = False) -> str:
        elapsed = self.clock() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        errors = f", {self.errors} errors" if self.errors else ""
        return (f"xisa: {self.done}/{self.total} cells{errors}, {elapsed:.0f} s, {rate:.2f} cells/s"
                + (" (done)" if final else ""))

    def _maybe_write(self) -> None:
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.lines += 1
            self.write(self.line())

    def advance(self, result: CellResult) -> None:
        with self._lock:
            self.done += 1
            self.errors += 0 if result.ok else 1
            self._maybe_write()

    def tick(self) -> None:
        with self._lock:
            self._maybe_write()

    def finish(self) -> None:
        with self._lock:
            if self.lines:   # a run that said how it went says how it ended
                self.write(self.line(final=True))


_counting = [0]   # LineProgress timers running: a heartbeat keeps quiet while cells are counted


class Heartbeat:
    """A line every `interval` seconds while a long step with no cells to count runs (the program `xisa capture`
    runs: `xisa: capture: the command is running, 40 s`); quiet while a LineProgress counts cells."""

    def __init__(self, what: str, *, write: Callable[[str], None], interval: float = PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.write, self.interval, self.clock = what, write, interval, clock
        self.start = self.last = clock()

    def tick(self) -> None:
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            if not _counting[0]:
                self.write(f"xisa: {self.what}, {now - self.start:.0f} s")


def _ticking(tick: Callable[[], None], interval: float) -> contextlib.AbstractContextManager:
    """A daemon thread calling `tick` every `interval` (at most every second) until the block ends."""
    @contextlib.contextmanager
    def running() -> Iterator[None]:
        stop = threading.Event()

        def timer() -> None:
            while not stop.wait(min(max(interval, 0.01), 1.0)):
                tick()

        thread = threading.Thread(target=timer, name="xisa-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    return running()


@contextlib.contextmanager
def heartbeat(what: str, *, enabled: bool | None = None) -> Iterator[None]:
    """Heartbeat lines on stderr where it is not a terminal (a terminal shows the program's own output)."""
    if not (not sys.stderr.isatty() if enabled is None else enabled):
        yield
        return
    interval = progress_interval()
    with _ticking(Heartbeat(what, write=_write_stderr, interval=interval).tick, interval):
        yield


def progress_interval(environ=os.environ) -> float:
    """Seconds between progress lines: XISA_PROGRESS_SECONDS, else 10 (a bad value is the default: progress
    output never fails a run)."""
    try:
        seconds = float(environ.get("XISA_PROGRESS_SECONDS", PROGRESS_SECONDS))
    except ValueError:
        return PROGRESS_SECONDS
    return seconds if seconds >= 0 else PROGRESS_SECONDS


@contextlib.contextmanager
def line_progress(total: int, *, interval: float, write: Callable[[str], None]) -> Iterator[Callable[[CellResult], None]]:
    """LineProgress with its timer thread, which wakes every `interval` (at most every second) to write a line."""
    progress = LineProgress(total, write=write, interval=interval)
    _counting[0] += 1
    try:
        with _ticking(progress.tick, interval):
            yield progress.advance
    finally:
        _counting[0] -= 1
        progress.finish()


def _write_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress_reporter(total: int, *, enabled: bool | None = None) -> Iterator[Callable[[CellResult], None]]:
    """A bar where stderr is a terminal; otherwise plain lines (`line_progress`); nothing with `enabled=False` or
    fewer than two cells."""
    if enabled is False or total < 2:
        yield lambda result: None
        return
    if not (sys.stderr.isatty() if enabled is None else enabled):
        with line_progress(total, interval=progress_interval(), write=_write_stderr) as advance:
            yield advance
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
