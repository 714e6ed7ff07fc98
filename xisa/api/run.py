"""Compiling a selection: one pool for its cells, each result judged against its target's launch limits and
its spec's expectations."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager

from xisa.analyze.expect import Failure, evaluate, judge_launch
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace, check_golden_toolchains, keeps_cache_bounded, open_workspace
from xisa.compile.worker.result import CellResult
from xisa.compile.runner import RunOptions, run_cells
from xisa.compile.worker.toolchain import describe_toolchain
from xisa.spec.cases import Cell
from xisa.spec.targets import Target

# How a caller watches a compile: given the number of cells, a context that yields a callback called
# with each result as it arrives (the CLI's progress bar); by default, nothing.
Progress = Callable[[int], ContextManager[Callable[[CellResult], None]]]


@contextlib.contextmanager
def no_progress(total: int) -> Iterator[Callable[[CellResult], None]]:
    yield lambda result: None




@dataclass
class Run:
    """One compile of a selection: its targets, the cells' results and their expectation failures."""

    targets: list[Target]
    results: list[CellResult]
    failures: dict[str, list[Failure]]
    emitted: int | None = None      # files written by `compile(emit=...)`

    @property
    def backends(self) -> set[str]:
        return {t.backend for t in self.targets}

    def toolchain(self) -> dict[str, str]:
        """The toolchain facts of every backend of the run: what a report records."""
        return describe_toolchain(backends=self.backends)

    def toolchains(self) -> dict[str, dict[str, str]]:
        """Per target, the toolchain facts of its backend only: what its golden records."""
        return {t.name: describe_toolchain(backends={t.backend}) for t in self.targets}

    @property
    def cannot_launch(self) -> list[CellResult]:
        """The cells that cannot launch on their target although the spec does not expect it."""
        return [r for r in self.results if r.launch is not None and r.launch.unexpected]

    @property
    def failed(self) -> bool:
        """A failed expectation or an unexpected cannot-launch: `compile` and `bless` exit 1."""
        return any(self.failures.values()) or bool(self.cannot_launch)

    def failure_lines(self) -> list[str]:
        """Each failed expectation and each cell that cannot launch unexpectedly, as the one line every
        command prints on stderr."""
        return [f"expectation failed {cell_id}: {failure}" for cell_id, fails in self.failures.items()
                for failure in fails] + [f"{r.id} cannot launch: {r.launch.reason()}" for r in self.cannot_launch]


def judge_launches(cells: list[Cell], results: list[CellResult]) -> None:
    """Each compiled result's `launch`: its workgroup against its target file's per-workgroup limits,
    and the spec's `launchable` for that target."""
    for cell, result in zip(cells, results):
        if result.ok and result.analysis is not None:
            target = cell.target
            excess = target.handler.launch_excess(result.analysis.resources, target=target,
                                                  num_warps=int(result.options.get("num_warps") or 1))
            result.launch = judge_launch(cell.expect, target.name, excess, target_file=target.path)


def expectation_failures(cell: Cell, result: CellResult) -> list[Failure]:
    if not result.ok or result.analysis is None:
        return []
    launchable = result.launch is None or result.launch.launchable
    return evaluate(cell.expect, cell.target.name, result.analysis, launchable=launchable)


@contextlib.contextmanager
def restored_environment() -> Iterator[None]:
    """A compile pins Triton's codegen variables and its cache folder in this process (its workers
    inherit them); the caller, a user's test session, gets its own environment back afterwards."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def compile_cells(ws: Workspace, chosen: list[Target], cells: list[Cell], *, options: RunOptions,
                  progress: Progress = no_progress) -> Run:
    """One pool for the whole selection; results in the order of `cells`."""
    if options.cache_limit is None:
        options = dataclasses.replace(options, cache_limit=ws.project.cache_limit)
    with restored_environment(), progress(len(cells)) as advance:
        results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=ws.project.cache_dir,
                            options=options, progress=advance)
    judge_launches(cells, results)
    ws.compiled = ws.compiled or any(not result.cached for result in results)
    ws.material.remember(results)   # so a later review of a compact golden of these compiles has their streams
    failures = {cell.id: expectation_failures(cell, result) for cell, result in zip(cells, results)}
    return Run(targets=chosen, results=results, failures=failures)


def compile_selection(ws: Workspace, selection: Selection, *, options: RunOptions,
                      golden_dirs: list[tuple[Path, str]] | tuple = (), ab_command: str | None = None,
                      progress: Progress = no_progress) -> Run:
    """Select (this shard's cells) and compile. `golden_dirs` (folder, label) are checked for another toolchain
    first, so a mismatch is one line before any compile, not a report after all; `ab_command` is the `xisa ab`
    that line offers for this tree's goldens."""
    chosen, cells = selection.cells(ws)
    for folder, label in golden_dirs:
        check_golden_toolchains(cells, folder, display_root=ws.project.root if not label else folder.parent,
                                label=label, ab_command=ab_command)
    return compile_cells(ws, chosen, cells, options=options, progress=progress)


@keeps_cache_bounded
def compile(selection: Selection, *, options: RunOptions, emit: Path | None = None,
            progress: Progress = no_progress) -> Run:
    """`xisa compile`: the selection compiled; with `emit`, every stage of every cell written there."""
    from xisa.compile.emit import emit_stages

    ws = open_workspace(spec=selection.spec)
    chosen, cells = selection.cells(ws)
    selection.require_cells(ws, cells)
    if emit is not None:
        options = dataclasses.replace(options, keep_stages=True)
    run = compile_cells(ws, chosen, cells, options=options, progress=progress)
    if emit is not None:
        run.emitted = emit_stages(emit, cells, run.results)
    return run
