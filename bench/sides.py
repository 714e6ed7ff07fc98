"""Two xisa versions side by side in one benchmark run: this checkout and another commit, each step timed on both,
one after the other, in an order that alternates from step to step (the machines are noisy; a drift shows in both).

`tree_at(rev, folder)` writes the commit's files (git archive) into `folder`; a side runs `python -m xisa` with that
tree first on PYTHONPATH and a cache folder of its own, under the same Python, Triton and torch.
"""

from __future__ import annotations

import subprocess
import tarfile
import io
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def tree_at(rev: str, folder: Path) -> Path:
    """The files of `rev` in `folder` (made here); the checkout itself is left as it is."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def order(step: int, sides: list) -> list:
    """The sides in the order of step `step`: this checkout first on even steps, the other on odd ones."""
    return sides if step % 2 == 0 else list(reversed(sides))


def ratio_line(name: str, seconds: dict[str, float], first: str, second: str) -> str:
    a, b = seconds[first], seconds[second]
    return f"{name:36} {a:8.1f} {b:8.1f} {a / b:7.2f}x"
