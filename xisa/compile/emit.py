"""`--emit DIR`: every stage of every cell, at DIR/<kernel>/<case>/<target>/<kernel>.<stage>."""

from __future__ import annotations

from pathlib import Path

from xisa.compile.worker.result import CellResult
from xisa.fsio import write_atomic
from xisa.spec.cases import Cell


def emit_stages(directory: Path, cells: list[Cell], results: list[CellResult]) -> int:
    written = 0
    for cell, result in zip(cells, results):
        if not result.ok:
            continue
        # kernel, case and target names were validated as path-safe when the spec was loaded
        folder = directory / cell.kernel.name / cell.case / cell.target.name
        folder.mkdir(parents=True, exist_ok=True)
        for stage, content in sorted(result.stages.items()):
            path = folder / f"{cell.kernel.name}.{stage}"
            write_atomic(path, content if isinstance(content, bytes) else str(content), mode=0o666)
            written += 1
        if result.analysis is not None:
            write_atomic(folder / f"{cell.kernel.name}.normalized", result.analysis.stream_text, mode=0o666)
            written += 1
    return written
