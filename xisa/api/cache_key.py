"""`xisa cache key`: one digest of what a CI cache of xisa's results should follow, from the project's own
`[tool.xisa]`: pyproject.toml, every file under the configured spec paths, `pythonpath` folders and target
folders, the `import_hooks`, each spec's kernel file wherever it lives, the installed version of each package
a `module:` spec names, and Triton's, torch's and xisa's versions. A CI workflow keys its cache on it (a
`hashFiles('kernels/**')` misses a `src/` layout and helper modules elsewhere).

It decides only when the CI cache is saved anew, never a verdict: every result in xisa's cache is keyed and
checked on its own (`xisa.compile.incremental.cache`), so a stale CI cache costs compiles, not correctness.
"""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path

from xisa import __version__
from xisa.api.workspace import Workspace

SKIPPED_FOLDERS = {"__pycache__", ".git", ".xisa-cache", "node_modules"}


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    found = []
    for folder, subfolders, files in os.walk(path):   # links to folders are not followed
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS)
        found += [Path(folder) / name for name in sorted(files) if not name.endswith((".pyc", ".pyo"))]
    return found


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"


def cache_key_inputs(ws: Workspace) -> tuple[list[Path], list[str]]:
    """The files the key hashes (sorted, each once) and the versions it holds (`name=version`)."""
    project = ws.project
    roots = [*project.spec_paths, *project.pythonpath, *project.import_hooks, *project.target_dirs[1:]]
    files = {project.config_file} if project.config_file else set()
    for root in roots:
        files.update(_files_under(root))
    files.update(spec.source_file for spec in ws.specs if spec.source_file is not None)
    files.update(spec.spec_file for spec in ws.specs)
    packages = sorted({spec.module.split(".")[0] for spec in ws.specs if spec.module})
    versions = [f"triton={_version('triton')}", f"torch={_version('torch')}", f"xisa={__version__}"]
    versions += [f"module {name}={_module_version(name)}" for name in packages]
    return sorted(Path(os.path.abspath(f)) for f in files), versions


def _module_version(package: str) -> str:
    owners = metadata.packages_distributions().get(package) or [package]
    return ",".join(f"{owner} {_version(owner)}" for owner in sorted(owners))


def cache_key(ws: Workspace) -> tuple[str, list[str]]:
    """The digest (64 hex digits) and what went into it: each file relative to the project root with its own
    SHA-256, then the versions."""
    ws_root = ws.project.root
    files, versions = cache_key_inputs(ws)
    lines = []
    for path in files:
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            digest = f"unreadable ({exc.strerror})"
        name = path.relative_to(ws_root).as_posix() if path.is_relative_to(ws_root) else path.as_posix()
        lines.append(f"{digest}  {name}")
    lines += versions
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), lines
