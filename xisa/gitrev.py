"""Read a git revision's goldens (no checkout) or a temporary worktree of it, for the gate against a base."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shutil
import subprocess
import sys
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
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], path).strip())
    except UsageError:
        raise UsageError(f"{path} is not inside a git repository, so there is no base revision to compare with",
                         field="--base", fix="run it in a git checkout, or use `xisa check` without --base") from None


def resolve(rev: str, cwd: Path) -> str:
    """The commit `rev` names, or one line naming it (exit 2): called before anything compiles."""
    if not rev.strip() or rev.startswith("-"):
        raise UsageError(f"{rev!r} is not a git revision", field="--base", fix="e.g. --base origin/main")
    root = repo_root(cwd)
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                          cwd=root, capture_output=True, check=False)
    if proc.returncode != 0:
        raise UsageError(f"unknown revision {rev!r} in {root}", field="--base",
                         fix="name a branch, tag or commit that exists here, e.g. --base origin/main "
                             "(in CI, fetch the base: actions/checkout with fetch-depth: 0)")
    return proc.stdout.decode().strip()


@contextlib.contextmanager
def goldens_at(rev: str, golden_dir: Path) -> Iterator[Path]:
    """The golden folder as it is at `rev`, unpacked from `git archive` into a temporary folder."""
    root = repo_root(golden_dir.parent if not golden_dir.exists() else golden_dir)
    commit = resolve(rev, root)
    try:
        relative = golden_dir.resolve().relative_to(root.resolve())
    except ValueError:
        raise UsageError(f"the golden folder {golden_dir} is outside the git repository {root}", field="--base",
                         fix="keep the goldens inside the repository") from None
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


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


@contextlib.contextmanager
def imports_from(tree: Path, head_root: Path) -> Iterator[None]:
    """While compiling another revision's worktree, make the project's imports resolve in `tree`.

    A `module:` spec is imported through `sys.path`, where the head checkout sits (the working folder,
    PYTHONPATH, a path-based editable install), and the head's packages may already be imported: so
    the base would compile the head's kernels. Here every `sys.path` entry inside the head checkout
    whose counterpart exists in `tree` points at that counterpart, and the modules imported from such
    places are set aside, then put back. xisa's own modules and untracked places (a virtualenv inside
    the checkout) are left alone. Forked compile workers inherit all of it."""
    head = head_root.resolve()
    tree = tree.resolve()
    moved: list[tuple[Path, Path]] = []          # (head folder, its counterpart in tree)
    saved_path = list(sys.path)
    new_path = []
    for entry in sys.path:
        folder = Path(entry or os.getcwd()).resolve()
        if _inside(folder, head) and (tree / folder.relative_to(head)).is_dir():
            counterpart = tree / folder.relative_to(head)
            moved.append((folder, counterpart))
            new_path.append(str(counterpart))
        else:
            new_path.append(entry)

    def from_moved(name: str, module, places: list[Path]) -> bool:
        if name == "xisa" or name.startswith("xisa."):
            return False
        files = [getattr(module, "__file__", None)]
        search = getattr(module, "__path__", None)
        if isinstance(search, (list, tuple)):      # a package's folders; some modules put other things here
            files += list(search)
        return any(isinstance(f, str) and any(_inside(Path(f).resolve(), place) for place in places) for f in files)

    set_aside = {name: module for name, module in list(sys.modules.items())
                 if from_moved(name, module, [head for head, _ in moved])}
    for name in set_aside:
        del sys.modules[name]
    sys.path[:] = new_path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for name, module in list(sys.modules.items()):
            if from_moved(name, module, [tree]):
                del sys.modules[name]
        sys.modules.update(set_aside)
        sys.path[:] = saved_path
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()


def module_outside(module: str, tree: Path) -> Path | None:
    """Where `module` resolves when it resolves outside `tree` (e.g. an editable install of the head
    checkout that `imports_from` cannot redirect); None when it is inside `tree` or not found."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = Path(found.origin).resolve() if found and found.origin else None
    return origin if origin is not None and not _inside(origin, tree.resolve()) else None
