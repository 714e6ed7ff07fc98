"""Read a git revision's goldens (no checkout) or a temporary worktree of it, for `xisa diff`."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from xisa.errors import UsageError


def _git(args: list[str], cwd: Path, *, binary: bool = False):
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed", field="--base") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {' '.join(args[:2])} failed: {message[-1] if message else proc.returncode}",
                         field="--base", fix="pass a revision that exists, e.g. --base origin/main")
    return proc.stdout if binary else proc.stdout.decode()


def repo_root(path: Path) -> Path:
    return Path(_git(["rev-parse", "--show-toplevel"], path).strip())


def resolve(rev: str, cwd: Path) -> str:
    return _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd).strip()


@contextlib.contextmanager
def goldens_at(rev: str, golden_dir: Path) -> Iterator[Path]:
    """The golden folder as it is at `rev`, unpacked from `git archive` into a temporary folder."""
    root = repo_root(golden_dir.parent if not golden_dir.exists() else golden_dir)
    commit = resolve(rev, root)
    relative = golden_dir.resolve().relative_to(root.resolve())
    tmp = Path(tempfile.mkdtemp(prefix="xisa-base-"))
    try:
        listing = _git(["ls-tree", "-d", "--name-only", commit, "--", str(relative)], root).strip()
        if listing:
            data = _git(["archive", "--format=tar", commit, str(relative)], root, binary=True)
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                archive.extractall(tmp, filter="data")
        target = tmp / relative
        target.mkdir(parents=True, exist_ok=True)
        yield target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def worktree_at(rev: str, cwd: Path) -> Iterator[Path]:
    """A detached temporary worktree of `rev`, removed afterwards."""
    root = repo_root(cwd)
    commit = resolve(rev, root)
    tmp = Path(tempfile.mkdtemp(prefix="xisa-worktree-"))
    path = tmp / "tree"
    _git(["worktree", "add", "--detach", "--quiet", str(path), commit], root)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=root, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)
