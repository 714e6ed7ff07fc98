"""What a compile worker is given as it forks, in one value: the run's cells and where its caches are.

The parent makes one `WorkerConfig` per run and hands it to each worker process it forks (inherited through
fork with the process's memory, never pickled), so a worker's behaviour is a function of this value and its
cell, not of module globals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class WorkerConfig:
    cells: tuple[Any, ...]          # the run's cells (`xisa.spec.cases.Cell`); a worker is sent their indexes
    roots: tuple[Path, ...]         # the project's kernel roots (where a kernel file is shown from)
    keep_stages: bool               # `--emit`: every stage of each cell is kept
    parent_pid: int                 # xisa's process: a worker dies with it
    triton_fallback: str            # where Triton's cache writes go when the cache folder cannot take them
    cache_dir: Path | None          # the stores' folder (None: no stores)
    lookup: bool                    # whether the stores answer (False: --no-cache, they record only)
