"""A result cache private to xisa, keyed by everything that can change a cell's codegen.

An unchanged cell is answered from here without importing Triton. A corrupt entry is a miss.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import tempfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from xisa.result import CellResult
from xisa.spec import Cell
from xisa.toolchain import PINNED_ENV

CACHE_FORMAT = 1


@lru_cache(maxsize=1)
def xisa_identity() -> str:
    """The code that turns a cell into a result: a change to it must not be answered from old entries."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*package.glob("analyze/*.py"), package / "bind.py", package / "compile.py",
                        package / "result.py", package / "toolchain.py"]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def toolchain_identity() -> str:
    """The installed Triton build (its RECORD covers the bundled LLVM, lld and ptxas), read without importing it."""
    try:
        dist = metadata.distribution("triton")
    except metadata.PackageNotFoundError:
        return "none"
    record = dist.read_text("RECORD") or ""
    return f"{dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}"


def _local_imports(source: Path, roots: tuple[Path, ...], seen: set[Path]) -> None:
    """Add `source` and the project-local modules it imports (transitively) to `seen`."""
    if source in seen:
        return
    seen.add(source)
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module:
                names.append(node.module)
            elif node.module:
                names.append(node.module)
                names.extend(f"{node.module}.{alias.name}" for alias in node.names)
            elif node.level:
                names.extend(alias.name for alias in node.names)
    for name in names:
        parts = name.split(".")
        for base in (source.parent, *roots):
            for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
                if candidate.is_file():
                    _local_imports(candidate.resolve(), roots, seen)


def source_digest(cell: Cell, roots: tuple[Path, ...]) -> str:
    spec = cell.kernel
    if spec.source_file is None:
        import importlib.util

        found = importlib.util.find_spec(spec.module)
        origin = Path(found.origin) if found and found.origin else None
        files: set[Path] = set()
        if origin:
            _local_imports(origin.resolve(), roots, files)
    else:
        files = set()
        _local_imports(spec.source_file, roots, files)
    digest = hashlib.sha256()
    for file in sorted(files):
        digest.update(file.name.encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def cell_key(cell: Cell, roots: tuple[Path, ...], *, source: str | None = None) -> str:
    payload = {
        "format": CACHE_FORMAT, "xisa": xisa_identity(), "toolchain": toolchain_identity(),
        "pinned": PINNED_ENV, "target": cell.target.summary(), "kernel": cell.kernel.name,
        "function": cell.kernel.function, "case": cell.case, "args": cell.args, "constexprs": cell.constexprs,
        "options": cell.options, "source": source or source_digest(cell, roots),
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _digest(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


class ResultCache:
    def __init__(self, directory: Path):
        self.directory = directory / "results"

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CellResult | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            if data.get("key") != key or data.get("digest") != _digest(data["result"]):
                return None
            result = CellResult.from_cache(data["result"])
            stream = result.analysis.stream_text if result.analysis else ""
            if result.analysis and hashlib.sha256(stream.encode()).hexdigest() != result.analysis.sha256:
                return None
            return result
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # absent or corrupt: compile again

    def put(self, key: str, result: CellResult) -> None:
        # Only successful compiles are kept: an error may come from a hang or a crash worth retrying.
        if not result.ok:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                record = result.to_cache()
                json.dump({"key": key, "digest": _digest(record), "result": record}, handle, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs speed

    def clear(self) -> int:
        count = 0
        if self.directory.is_dir():
            count = sum(1 for _ in self.directory.rglob("*.json"))
            shutil.rmtree(self.directory, ignore_errors=True)
        return count


class Timings:
    """Recorded compile seconds per cell id: the slowest cells start first, shards balance by them."""

    def __init__(self, directory: Path):
        self.path = directory / "timings.json"
        try:
            self.data: dict[str, float] = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(self.data, dict):
                self.data = {}
        except (OSError, ValueError):
            self.data = {}

    def get(self, cell_id: str, default: float = 1.0) -> float:
        value = self.data.get(cell_id, default)
        return value if isinstance(value, (int, float)) else default

    def update(self, results: list[CellResult]) -> None:
        changed = False
        for result in results:
            if not result.cached and result.ok:
                self.data[result.id] = round(result.seconds, 3)
                changed = True
        if changed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
                with os.fdopen(fd, "w") as handle:
                    json.dump(self.data, handle, sort_keys=True)
                os.replace(tmp, self.path)
            except OSError:
                pass

