"""Read a git revision's goldens (no checkout) or a temporary worktree of it, for the gate against a base."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from xisa.errors import UsageError
from xisa.spec.project import GOLDEN_DEFAULT, Project, read_settings, setting_paths


def _git(args: list[str], cwd: Path, *, binary: bool = False):
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed", field="--base") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {' '.join(args[:2])} failed: {message[-1] if message else proc.returncode}",
                         field="--base", fix="pass a revision that exists here (`git branch -a` lists the branches)")
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
        raise UsageError(f"{rev!r} is not a git revision", field="--base", fix=_revision_fix(rev, repo_root(cwd)))
    root = repo_root(cwd)
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                          cwd=root, capture_output=True, check=False)
    if proc.returncode != 0:
        raise UsageError(f"unknown revision {rev!r} in {root}", field="--base", fix=_revision_fix(rev, root))
    return proc.stdout.decode().strip()


def _revision_fix(rev: str, root: Path) -> str:
    """What to pass instead of `rev`, which names nothing here: the branches that exist (never `rev` itself), and
    the fetch that brings `rev` where it names a branch of a remote this repository has."""
    def lines(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.split() if done.returncode == 0 else []

    branches = [name for name in lines("for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/remotes")
                if name != rev and not name.endswith("/HEAD")]
    example = next((name for name in branches if name.rpartition("/")[2] in ("main", "master")),
                   branches[0] if branches else "HEAD~1")
    shown = ", ".join(branches[:6]) + (f" and {len(branches) - 6} more" if len(branches) > 6 else "")
    fix = f"name a branch, tag or commit that exists here, e.g. --base {example}"
    fix += f" (branches here: {shown})" if branches else " (this repository has no branches yet)"
    remote, slash, branch = rev.partition("/")
    if slash and branch and remote in lines("remote"):
        fix += f", or fetch it first: git fetch {remote} {branch}"
    return fix + "; in CI, fetch the base: actions/checkout with fetch-depth: 0"


def file_at(commit: str, root: Path, relative: PurePosixPath) -> str | None:
    """The text of a file as it is at `commit` (None when it has no such file)."""
    proc = subprocess.run(["git", "cat-file", "blob", f"{commit}:{relative.as_posix()}"], cwd=root,
                          capture_output=True, check=False)
    return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None


def project_at(root: Path, project: Project) -> PurePosixPath:
    """Where `project` is inside the repository at `root` (the same place at every revision)."""
    try:
        return PurePosixPath(project.root.resolve().relative_to(root.resolve()).as_posix())
    except ValueError:
        raise UsageError(f"the project {project.root} is outside the git repository {root}", field="--base",
                         fix="run xisa inside the repository") from None


def golden_folder_at(commit: str, rev: str, root: Path, project: Project) -> PurePosixPath:
    """The golden folder of revision `commit` (named `rev`), relative to the repository root: where that
    revision's own `[tool.xisa] golden` setting puts it, since a PR may move it."""
    where = project_at(root, project)
    config = file_at(commit, root, where / "pyproject.toml")
    settings = read_settings(config, path=f"{rev}:{where / 'pyproject.toml'}") \
        if config is not None and "[tool.xisa" in config else {}
    folder = setting_paths(settings, "golden", GOLDEN_DEFAULT, path=f"{rev}:{where / 'pyproject.toml'}")[0]
    relative = PurePosixPath(os.path.normpath(where / folder))
    if relative.is_absolute() or relative.parts[:1] == ("..",):
        raise UsageError(f"the golden folder {folder!r} of {rev} is outside the git repository {root}",
                         field="--base", fix="keep the goldens inside the repository")
    return relative


@contextlib.contextmanager
def goldens_at(rev: str, project: Project, *, golden: Path | None = None) -> Iterator[Path]:
    """The golden folder as it is at `rev` (where that revision keeps it; `golden` when given), unpacked from
    git's objects into a temporary folder. Read blob by blob, not through `git archive`, which would apply
    the revision's `export-ignore` and `export-subst` attributes. A revision without that folder is refused
    in one line: there is nothing to compare with."""
    root = repo_root(project.root)
    commit = resolve(rev, root)
    if golden is None:
        relative = golden_folder_at(commit, rev, root, project)
    else:
        try:
            relative = PurePosixPath(golden.resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            raise UsageError(f"the golden folder {golden} is outside the git repository {root}", field="--base",
                             fix="keep the goldens inside the repository") from None
    tmp = Path(tempfile.mkdtemp(prefix="xisa-base-"))
    try:
        files = _blobs_under(commit, root, relative)
        if files is None:
            raise UsageError(f"{rev} has no goldens in {relative}/: there is nothing to compare with", field="--base",
                             fix="compile the base's kernels instead with --compile-base, or name a base that has goldens")
        target = tmp / relative
        target.mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            destination = target / path
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
        yield target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _blobs_under(commit: str, root: Path, folder: PurePosixPath) -> dict[PurePosixPath, bytes] | None:
    """The regular files under `folder` at `commit`, by path relative to it, as stored (no attributes or
    filters applied; links and submodules are left out); None when `folder` is not a folder there."""
    kind = subprocess.run(["git", "cat-file", "-t", f"{commit}:{folder.as_posix()}"], cwd=root, capture_output=True,
                          check=False)
    if kind.returncode != 0 or kind.stdout.strip() != b"tree":
        return None
    listing = _git(["ls-tree", "-r", "-z", "--full-tree", commit, "--", folder.as_posix()], root, binary=True)
    wanted: list[tuple[PurePosixPath, str]] = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, name = entry.partition(b"\t")
        mode, kind_name, sha = meta.decode().split()
        path = PurePosixPath(name.decode("utf-8", errors="surrogateescape")).relative_to(folder)
        if kind_name == "blob" and mode in ("100644", "100755") and ".." not in path.parts:
            wanted.append((path, sha))
    if not wanted:
        return {}
    batch = subprocess.run(["git", "cat-file", "--batch"], cwd=root, input="".join(f"{sha}\n" for _, sha in wanted).encode(),
                           capture_output=True, check=False)
    if batch.returncode != 0:
        raise UsageError(f"git cat-file failed reading {folder} at {commit[:12]}", field="--base")
    out, files, offset = batch.stdout, {}, 0
    for path, _ in wanted:
        header_end = out.index(b"\n", offset)
        size = int(out[offset:header_end].split()[2])
        files[path] = out[header_end + 1:header_end + 1 + size]
        offset = header_end + 1 + size + 1
    return files


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
