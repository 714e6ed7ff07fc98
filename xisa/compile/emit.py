"""`--emit DIR`: every stage of every cell, at DIR/<kernel>/<case>/<target>/<kernel>.<stage>."""

from __future__ import annotations

import os
from pathlib import Path

from xisa.compile.result import CellResult
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
            data = content if isinstance(content, bytes) else str(content).encode("utf-8")
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            written += 1
        if result.analysis is not None:
            (folder / f"{cell.kernel.name}.normalized").write_text(result.analysis.stream_text, encoding="utf-8")
            written += 1
    return written
