"""A result cache private to xisa, keyed by everything that can change a cell's codegen.

An unchanged cell is answered from here without importing Triton. The key names the cell, its spec
and kernel files, the toolchain, the pinned environment and xisa's own code; each entry also
carries a depfile: every project file the compile's kernel load imported or read, every environment
variable it read (`$NAME`), and every project file the compile itself read, with their SHA-256, as
recorded by the worker (`xisa.compile.launch.loader.kernel_dependencies`). An entry whose depfile no longer matches
is a miss (as ccache's manifests). Behind it, the back-end store (`backend_store.py`) answers a cell whose
load changed but whose front end's output did not, after a load and a front-end pass. Triton's own cache lives
for one run (a folder in the temp folder): its entries are salted with what the load read and carry what their
compile read. A corrupt entry is a miss; an entry or folder that another user owns or could have written is
refused: its results could be forged. The cache's size is bounded (`cache_limit.py`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

from xisa.analyze.inline_asm import assembled_files
from xisa.compile.incremental.reads import (compile_reads, dependency_digest, load_digest, note_compile_reads,
                                reused_compile_reads)
from xisa.errors import ToolchainError
from xisa.fsio import write_atomic
from xisa.compile.worker.result import CellResult
from xisa.compile.worker.toolchain import TRITON_CACHE_FOLDER

RESULTS = "results"
BACKEND = "backend"            # the back end's work by its front end's output (xisa.compile.incremental.backend_store)
FRONTEND = "frontend"          # the front end's inputs -> the back-end key of its output (xisa.compile.incremental.backend_store)
LOADS = "loads"                # code objects and source blocks by their text (xisa.compile.incremental.load_store)
REVIEW = "review"              # compact goldens' streams and line tables, by SHA-256 (xisa.golden.material)
REVIEW_STREAMS, REVIEW_LINES = "streams", "lines"   # its two folders: `<sha256>.isa`, `<sha256>.json`
REVIEW_PARSED = "parsed"        # and goldens' YAML parsed, by the SHA-256 of parser and text: `<sha256>.json`
TRITON = TRITON_CACHE_FOLDER   # where older xisa kept Triton's own cache (now one per run, in the temp folder)
STATS = "last-run.json"        # what the last run found in the cache (`xisa cache info`)
TIMINGS = "timings.json"
TRITON_ENTRY_READS = "xisa-reads.json"   # in each Triton cache entry: the files its compile read


def legacy_triton_folder(name: str) -> bool:
    """A Triton cache folder an older xisa kept in the cache folder (`triton`, `triton-2` ... `triton-5`): no xisa
    reads it any more; `xisa cache clear` and the size limit remove it."""
    return re.fullmatch(r"triton(-[0-9]+)?", name) is not None


# --- trust: a cache folder or entry someone else could have written is refused ---------------------

def check_private(path: Path, info: os.stat_result, what: str) -> None:
    """Refuse `path` unless this user owns it and no one else can write it (a link counts as foreign)."""
    if stat.S_ISLNK(info.st_mode):
        raise ToolchainError(f"{path}: the {what} is a symbolic link, so its results could come from anywhere",
                             fix=f"remove {path} (xisa makes its cache folders itself)")
    if info.st_uid != os.geteuid():
        raise ToolchainError(f"{path}: the {what} belongs to another user (uid {info.st_uid}), so its results "
                             "could be forged",
                             fix="point XISA_CACHE_DIR at a folder of your own" if what == "cache folder" else
                             f"remove {path}, or run xisa cache clear")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ToolchainError(f"{path}: the {what} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o}), "
                             "so its results could be forged",
                             fix=f"chmod go-w {path} and run xisa cache clear, or point XISA_CACHE_DIR at a folder "
                                 "only you can write")


def open_cache_folder(cache_dir: Path) -> None:
    """Make the cache folder (private to this user) and refuse one that is not ours alone."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = cache_dir.stat()
    except OSError as exc:
        raise ToolchainError(f"cannot use {cache_dir} as xisa's cache: {exc.strerror}", field="XISA_CACHE_DIR",
                             fix="point XISA_CACHE_DIR (or [tool.xisa] cache) at a writable folder") from None
    check_private(cache_dir, info, "cache folder")
    for name in (RESULTS, BACKEND, FRONTEND, LOADS, REVIEW):
        check_cache_subfolder(cache_dir / name)


def check_cache_subfolder(path: Path) -> None:
    """Refuse a store folder of the cache that is not this user's alone (a missing one is fine: it is made so)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ToolchainError(f"{path}: cannot read the cache folder: {exc.strerror}",
                             fix="fix its permissions or run xisa cache clear") from None
    check_private(path, info, "cache folder")


def clear_cache(cache_dir: Path) -> int:
    """Remove everything xisa keeps in `cache_dir` (results, the back-end and load stores, timings, an older xisa's
    Triton cache); the number of results.

    A cache folder of another user is refused, not emptied; links are removed, never followed.
    """
    try:
        info = cache_dir.stat()
    except FileNotFoundError:
        return 0
    if info.st_uid != os.geteuid():
        check_private(cache_dir, info, "cache folder")
    results = cache_dir / RESULTS
    count = sum(1 for _ in results.rglob("*.json")) if results.is_dir() and not results.is_symlink() else 0
    for entry in cache_dir.iterdir():
        if entry.name not in (RESULTS, BACKEND, FRONTEND, LOADS, TIMINGS, STATS) and not legacy_triton_folder(entry.name) \
                and not entry.name.startswith(".tmp-"):
            continue  # not ours: leave it
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return count


# --- the result cache ------------------------------------------------------------------------------

class EntryStore:
    """Entries of one JSON file each, `<folder>/<key[:2]>/<key>.json`, written atomically and read in one read of one
    file, so a reader sees a whole entry or none (an entry evicted meanwhile is a miss). Each holds its key and a
    digest of its body: a corrupt or misplaced entry is a miss. A hit touches the entry (least recently used goes
    first: `xisa.compile.incremental.cache_limit`)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._checked: set[Path] = set()

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def read(self, key: str) -> dict[str, Any] | None:
        """The body of `key`'s entry, None when absent or corrupt."""
        path = self.path(key)
        if path.parent not in self._checked:
            check_cache_subfolder(path.parent)
            self._checked.add(path.parent)
        raw = read_entry(path)
        if raw is None:
            return None
        head, newline, body = raw.partition(b"\n")
        try:
            header = json.loads(head)
            if not newline or not isinstance(header, dict) or header.get("key") != key or \
                    header.get("digest") != hashlib.sha256(body).hexdigest():
                return None
            data = json.loads(body)
            return data if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None  # corrupt: compile again

    def read_holding(self, key: str, field: str, digest_of: Callable[[str], str | None] | None = None
                     ) -> dict[str, Any] | None:
        """The body of `key`'s entry while the record of what its producer read (`body[field]`) holds."""
        data = self.read(key)
        return data if data is not None and reads_hold(data.get(field), digest_of) else None

    def write(self, key: str, body: dict[str, Any]) -> None:
        path = self.path(key)
        # A header line (the key, the digest of the body's bytes), then the body: a read hashes bytes, not a dump.
        text = json.dumps(body, sort_keys=True)
        text = json.dumps({"key": key, "digest": hashlib.sha256(text.encode()).hexdigest()}) + "\n" + text
        try:
            path.parent.parent.mkdir(exist_ok=True, mode=0o700)
            path.parent.mkdir(exist_ok=True, mode=0o700)
        except OSError:
            return  # a cache that cannot be written only costs speed
        write_private(path, text)


def reads_hold(reads: Any, digest_of: Callable[[str], str | None] | None = None) -> bool:
    """Whether a record of what a producer read (a path, or `$NAME` for a variable -> its digest then) holds now:
    the one check behind every store's hit. A malformed record does not hold."""
    digest_of = digest_of or dependency_digest
    return isinstance(reads, dict) and all(isinstance(name, str) and digest_of(name) == digest
                                           for name, digest in reads.items())


def read_entry(path: Path) -> bytes | None:
    """A cache entry's bytes, read through one descriptor (a link or another user's entry refused), and the entry
    touched: its time is when it was last used. None when it is absent."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            check_private(path, path.lstat(), "cache entry")
        return None
    with os.fdopen(fd, "rb") as handle:
        check_private(path, os.fstat(handle.fileno()), "cache entry")
        raw = handle.read()
        try:
            os.utime(handle.fileno())
        except OSError:
            pass   # a read-only cache: its order of use is not kept
    return raw


class ResultCache:
    """A cell's result under its `keys.result_key`, with its depfile: a hit only while every file in it is unchanged."""

    def __init__(self, directory: Path):
        self.entries = EntryStore(directory / RESULTS)
        self.directory = self.entries.directory
        self._file_hashes: dict[str, str | None] = {}   # one hash per file per run

    def _file_hash(self, path: str) -> str | None:
        if path not in self._file_hashes:
            self._file_hashes[path] = dependency_digest(path)
        return self._file_hashes[path]

    def dependencies_hold(self, dependencies: dict[str, str | None]) -> bool:
        return reads_hold(dependencies, self._file_hash)

    def get(self, key: str) -> CellResult | None:
        # None: absent, or a file the compile imported changed; an entry with an empty depfile never answers
        data = self.entries.read_holding(key, "dependencies", self._file_hash)
        if data is None or not data["dependencies"]:
            return None
        try:
            result = CellResult.from_cache(data["result"])
            return result if stream_holds(result.analysis) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # corrupt: compile again

    def put(self, key: str, result: CellResult, dependencies: dict[str, str | None] | None) -> None:
        # Only successful compiles with a depfile are kept: an error may come from a hang or a crash worth retrying.
        if not result.ok or not dependencies:
            return
        self.entries.write(key, {"result": result.to_cache(), "dependencies": dependencies})

    def clear(self) -> int:
        return clear_cache(self.directory.parent)


def stream_holds(analysis) -> bool:
    """The stream an entry holds is the one its fingerprint was taken of."""
    stream = analysis.stream_text if analysis else ""
    return not analysis or hashlib.sha256(stream.encode()).hexdigest() == analysis.sha256


def write_private(path: Path, text: str) -> bool:
    """Write `text` to `path` atomically, readable by this user alone; False where it cannot be written (a
    full disk). Its temp file is `.tmp-*.json`, which `clear_cache` knows for xisa's own."""
    try:
        write_atomic(path, text, prefix=".tmp-", suffix=".json")
        return True
    except OSError:
        return False  # a cache that cannot be written only costs speed


class Timings:
    """Recorded compile seconds per cell id: the slowest cells start first, shards balance by them."""

    def __init__(self, directory: Path):
        self.path = directory / TIMINGS
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
        for result in results:   # what a compile costs: a result answered by a store says nothing of that
            if not result.cached and result.ok and not result.reused_backend:
                self.data[result.id] = round(result.seconds, 3)
                changed = True
        if changed and self.path.parent.is_dir():
            write_private(self.path, json.dumps(self.data, sort_keys=True))


# --- Triton's own cache ----------------------------------------------------------------------------

class FrontEndOutput:
    """The seam where the back-end store enters a compile: Triton files each stage through its cache manager
    (`triton_cache_class`), and the TTIR, the front end's whole output, goes to the observer that
    `front_end_output_to` sets around one `triton.compile` (`xisa.compile.cell`). The observer may raise
    `backend_store.BackendHit` out of `triton.compile`: the back end's work is stored, it does not run."""

    observer: Callable[[str], None] | None = None


@contextlib.contextmanager
def front_end_output_to(observer: Callable[[str], None] | None) -> Iterator[None]:
    FrontEndOutput.observer = observer
    try:
        yield
    finally:
        FrontEndOutput.observer = None


def triton_cache_class(fallback: str):
    """Triton's file cache, except that an entry serves only the files and variables its compile used (see
    above), and a write it cannot make (a full disk, a read-only folder) goes to `fallback` instead of
    failing the compile, leaving no temp folder behind. Imports Triton."""
    from triton.runtime.cache import FileCacheManager

    class PrivateTritonCache(FileCacheManager):
        def __init__(self, key, override=False, dump=False):
            # Triton's key holds the kernel's source, not what its module's load read (a table that a
            # constexpr function returns from, a variable): salted with that, an entry serves that load alone
            # (two spec folders' tables in one run). The cache lives for one run, so installed code cannot change
            # under it.
            salt = load_digest()
            if salt:
                key = hashlib.sha256(f"{key}:{salt}".encode()).hexdigest()
            try:
                super().__init__(key, override, dump)
            except OSError:
                self._fall_back(key)

        def get_group(self, filename):
            """An entry is reused only while the files its compile read (beyond the load) are unchanged."""
            group = super().get_group(filename)
            if group is None:
                return None
            try:
                with open(self._make_path(TRITON_ENTRY_READS), encoding="utf-8") as handle:
                    reads = json.load(handle)
                if not reads_hold(reads):
                    return None
            except (OSError, ValueError, TypeError, AttributeError):
                return None   # no record of what its compile read: compile again
            reused_compile_reads(reads)
            return group

        def put_group(self, filename, group):
            self.put(json.dumps(compile_reads(), sort_keys=True), TRITON_ENTRY_READS, binary=False)
            return super().put_group(filename, group)

        def put(self, data, filename, binary=True) -> str:
            if filename.endswith(".ttir") and FrontEndOutput.observer is not None:   # the front end's output, whole
                FrontEndOutput.observer(str(data))   # may raise BackendHit: the back end's work is stored
            if filename.endswith(".amdgcn") and isinstance(data, str):   # the assembler reads these next
                note_compile_reads(assembled_files(data))
            try:
                return super().put(data, filename, binary)
            except OSError:
                # Triton writes through `tmp.pid_<pid>_<uuid>/` in the entry's folder: drop ours.
                for leftover in Path(self.cache_dir).glob(f"tmp.pid_{os.getpid()}_*"):
                    shutil.rmtree(leftover, ignore_errors=True)
                self._fall_back(self.key)
                return super().put(data, filename, binary)

        def _fall_back(self, key) -> None:
            self.key = key
            self.cache_dir = os.path.join(fallback, key)
            self.lock_path = os.path.join(self.cache_dir, "lock")
            os.makedirs(self.cache_dir, exist_ok=True)

    return PrivateTritonCache
