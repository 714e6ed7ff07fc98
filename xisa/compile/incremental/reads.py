"""What a kernel's load and compile read: files and environment variables, noted as they happen.

An audit hook sees every file opened for reading while a load or a compile is under way (a helper loaded by
path, never in sys.modules, or a data file counts too); os.environ is watched while a module loads. The
result cache keys on what is recorded here (`kernel_dependencies`, `compile_reads`), each file by its SHA-256.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import time
import types
from collections.abc import Iterator, MutableMapping
from typing import Any

import xisa
from xisa.compile.incremental.imports import ABSENT_ENTRY, FOLDER_ENTRY, FoundNowhere, shadowing_files
from xisa.compile.worker.platform_facts import ENVIRONMENT_PACKAGES
from xisa.compile.worker.state import WORKER, CompileUnderWay
from xisa.compile.gpu.target_driver import target_driver
from xisa.spec.cases import KernelSpec

# Kernel files never live here, and reading some of these never ends.
_SYSTEM_FOLDERS = ("/proc/", "/sys/", "/dev/")
_XISA_FOLDER = os.path.join(os.path.dirname(os.path.abspath(xisa.__file__)), "")
# A depfile entry `$NAME` stands for the environment variable NAME (a path is always absolute).
ENVIRONMENT_ENTRY = "$"


# A depfile entry `ls:/abs/folder` stands for the names a folder holds: a load or compile listed it (a library
# finding its plugins or configs by `os.listdir`, `os.scandir`, `glob`, `pathlib`, `os.walk`).
LISTING_ENTRY = "ls:"


# `$*`: the whole environment, for a load that listed or copied it (what it found there is unknown; any variable
# added, changed or removed can change it), less the variables the cache key covers already.
WHOLE_ENVIRONMENT = "*"


def dependency_digest(name: str) -> str | None:
    """A depfile entry's SHA-256 now: a file's bytes, or a `$NAME` variable's value; None when absent."""
    if name.startswith(ENVIRONMENT_ENTRY):
        return variable_digest(name[len(ENVIRONMENT_ENTRY):], os.environ)
    if name.startswith(LISTING_ENTRY):
        return listing_digest(name[len(LISTING_ENTRY):])
    if name.startswith(FOLDER_ENTRY):
        return "folder" if os.path.isdir(name[len(FOLDER_ENTRY):]) else None
    return file_sha256(name)


def listing_digest(folder: str) -> str | None:
    """The SHA-256 of what a folder holds: each name, and whether it is a folder (a library telling its plugin
    packages from its files), sorted; None when it is no folder (or cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            names = sorted((entry.name, entry.is_dir()) for entry in entries)
    except OSError:
        return None
    return hashlib.sha256(json.dumps(names).encode("utf-8", "surrogateescape")).hexdigest()


def variable_digest(name: str, environ) -> str | None:
    """A variable's value in `environ` as a depfile records it; `*`: every variable the key does not cover."""
    if name != WHOLE_ENVIRONMENT:
        return value_digest(environ.get(name))
    from xisa.compile.worker.toolchain import toolchain_variable

    return value_digest(json.dumps(sorted((key, value) for key, value in dict(environ).items()
                                          if not toolchain_variable(key))))


def value_digest(value: str | None) -> str | None:
    """A variable's value as a depfile records it: its SHA-256, None when unset."""
    return None if value is None else hashlib.sha256(value.encode()).hexdigest()


def package_folders(added: dict[str, Any], top: str | None) -> tuple[str, ...]:
    """The folders of the kernel's top package as the load imported it (a namespace package has several)."""
    module = added.get(top) if top else None
    if module is None:
        return ()
    return tuple(sorted({os.path.join(os.path.abspath(f), "") for f in list(vars(module).get("__path__") or [])}))


class _WatchedEnvironment(MutableMapping):
    """os.environ while a kernel module loads: the same variables, each name read noted (a module sizing a kernel
    from `os.environ.get("BLOCK")` depends on it). A module that kept it keeps a working os.environ."""

    def __init__(self, environ):
        self._environ = environ   # os.environ, or os.environb (bytes names: noted as their str)

    def _note(self, names) -> None:
        if WORKER.env_reads is not None:
            WORKER.env_reads.update(os.fsdecode(name) for name in names if isinstance(name, (str, bytes)))

    def __getitem__(self, name):
        self._note((name,))
        return self._environ[name]

    def __setitem__(self, name, value):
        self._environ[name] = value

    def __delitem__(self, name):
        del self._environ[name]

    # Listing, counting or copying the variables reads the whole environment (a variable set later is seen then).
    def __iter__(self):
        self._note((WHOLE_ENVIRONMENT,))
        return iter(self._environ)

    def __len__(self):
        self._note((WHOLE_ENVIRONMENT,))
        return len(self._environ)

    def copy(self) -> dict:
        self._note((WHOLE_ENVIRONMENT,))
        return self._environ.copy()

    def __or__(self, other):
        self._note((WHOLE_ENVIRONMENT,))
        return self._environ | other


@contextlib.contextmanager
def watched_environment() -> Iterator[None]:
    real, real_bytes = os.environ, getattr(os, "environb", None)
    os.environ = _WatchedEnvironment(real)   # os.getenv reads the module's `environ` too
    if real_bytes is not None:
        os.environb = _WatchedEnvironment(real_bytes)   # and os.getenvb its `environb`
    try:
        yield
    finally:
        os.environ = real
        if real_bytes is not None:
            os.environb = real_bytes


@contextlib.contextmanager
def variables_read_binding() -> Iterator[None]:
    """The variables a heuristic or an autotune pre_hook reads while the compile under way binds its cell
    (`os.environ.get("MY_BLOCK")` at launch), as the load's are: each one's value then is in the depfile."""
    from xisa.compile.worker.toolchain import toolchain_variable

    under_way = WORKER.compiling
    if under_way is None:
        yield
        return
    before, saved, names = dict(os.environ), WORKER.env_reads, set()
    WORKER.env_reads = names
    try:
        with watched_environment():
            yield
    finally:
        WORKER.env_reads = saved
        under_way.loaded.compile_reads.update({ENVIRONMENT_ENTRY + name: variable_digest(name, before)
                                               for name in sorted(names) if not toolchain_variable(name)})


def hook_reads() -> None:
    """Install the audit hook that appends each file opened for reading to `WORKER.reads` (once per process)."""
    if WORKER.reads_hooked:
        return

    def note_read(event: str, args: tuple) -> None:
        reads = WORKER.reads
        if reads is None:
            return
        if event == "open":
            path, _, flags = args
            if isinstance(path, (str, bytes, os.PathLike)) and isinstance(flags, int) \
                    and flags & os.O_ACCMODE in (os.O_RDONLY, os.O_RDWR):   # `r+`, a memmap's default: read too
                path = os.fsdecode(os.fspath(path))
                reads.append(path)
                if path not in WORKER.read_stats:
                    WORKER.read_stats[path] = _stat_of(path)
        elif event == "sqlite3.connect" and isinstance(args[0], (str, bytes, os.PathLike)):   # opened in C
            reads.append(os.fsdecode(os.fspath(args[0])))
        elif event in ("os.listdir", "os.scandir") and not _import_system_listing(sys._getframe(1)):
            folder = "." if args[0] is None else args[0]
            if isinstance(folder, (str, bytes, os.PathLike)):   # not a descriptor: its folder has no name here
                reads.append(LISTING_ENTRY + os.path.abspath(os.fsdecode(os.fspath(folder))))

    sys.addaudithook(note_read)  # a hook cannot be removed: it does nothing outside a load or a compile
    sys.meta_path.append(FoundNowhere)   # likewise: it notes only while a load or a compile is under way
    WORKER.reads_hooked = True


def _import_system_listing(frame) -> bool:
    """A listing by Python's own import system: its path finder lists each folder it imports from (to cache the
    names) and `importlib.metadata` each sys.path folder (to find the installed distributions). What an import
    finds is in the depfile already (the modules imported, the files that would shadow them), and so is each
    installed package a compile holds a module of (its RECORD)."""
    file = frame.f_code.co_filename if frame is not None else ""
    return file in _IMPORT_SYSTEM_CODE or file.endswith(_IMPORT_SYSTEM_FILES)


_IMPORT_SYSTEM_CODE = {"<frozen importlib._bootstrap_external>", "<frozen zipimport>"}
_IMPORT_SYSTEM_FILES = (os.path.join("importlib", "_bootstrap_external.py"), os.path.join("", "zipimport.py"),
                        os.path.join("importlib", "metadata", "__init__.py"))


def ignore_reads_under(*folders: str) -> None:
    """Files under `folders` are a compile's own output (Triton's cache), never what it read."""
    WORKER.output_folders = tuple(os.path.join(os.path.abspath(folder), "") for folder in folders if folder)


@contextlib.contextmanager
def compiling(spec: KernelSpec, target=None) -> Iterator[None]:
    """Record the project files a compile of `spec`'s loaded kernel reads (a table that a constexpr function
    opens when it runs, not when its module loads) into the module's dependencies."""
    hook_reads()
    loaded = WORKER.loaded_for(spec, target)
    WORKER.compiling = CompileUnderWay(loaded, [], {})
    WORKER.read_stats = {}   # this compile's reads, as first opened
    WORKER.reads = WORKER.compiling.reads
    driver = None
    try:
        with _load_in_sight(loaded), \
                target_driver(target) if target is not None else contextlib.nullcontext() as driver:
            yield   # a heuristic or constexpr function asking the device gets the cell's target's answers
    finally:
        loaded.compile_reads.update(compile_reads())
        WORKER.reads, WORKER.compiling = None, None
        if driver is not None:
            WORKER.learn_platform_facts(loaded, driver.answers.facts)


@contextlib.contextmanager
def _load_in_sight(loaded) -> Iterator[None]:
    """The load's own modules in sys.modules while its cells compile, and nothing else of their packages; a module
    a heuristic imports then (`from lib.device_info import f` inside a function) joins them instead of staying."""
    # a package of the load's modules; a module of torch by its own name (torch itself stays in sight)
    packages = {name if name.partition(".")[0] in ENVIRONMENT_PACKAGES else name.partition(".")[0]
                for name in loaded.modules} | WORKER.device_packages
    others = {name: sys.modules.pop(name) for name in _in_packages(sys.modules, packages)}
    sys.modules.update(loaded.modules)
    try:
        yield
    finally:
        for name in _in_packages(sys.modules, packages):
            loaded.modules[name] = sys.modules.pop(name)
        sys.modules.update(others)


def _in_packages(names, packages: set[str]) -> list[str]:
    """The names of `names` that are one of `packages` or inside one (asked twice a cell, of every module held)."""
    prefixes = tuple(f"{package}." for package in packages)
    return [name for name in list(names) if name in packages or name.startswith(prefixes)]


def compile_reads(since: int = 0) -> dict[str, str | None]:
    """The project files the compile under way has read so far (from its `since`th read on) -> SHA-256, with those
    of a cache entry it reused."""
    under_way = WORKER.compiling
    if under_way is None:
        return {}
    recording, WORKER.reads = WORKER.reads, None  # hashing reads the files too
    try:
        paths = [path for path in under_way.reads[since:]
                 if not os.path.abspath(path).startswith((*WORKER.output_folders, _XISA_FOLDER))]
        return {**dependency_files({}, paths, package_folders=under_way.loaded.package_folders),
                **under_way.reused}
    finally:
        WORKER.reads = recording


def reads_so_far() -> int:
    """How many files the compile under way has read: `compile_reads(since=...)` counts from here."""
    return len(WORKER.compiling.reads) if WORKER.compiling is not None else 0


def note_compile_reads(paths: list[str]) -> None:
    """Files the compile under way reads outside Python (the assembler's `.include`), from the working folder."""
    if WORKER.compiling is not None:
        WORKER.compiling.reads.extend(os.path.abspath(path) for path in paths)


def reused_compile_reads(reads: dict[str, str | None]) -> None:
    """A Triton cache entry the compile under way reused: what its own compile read counts as read now."""
    if WORKER.compiling is not None:
        WORKER.compiling.reused.update(reads)


def load_digest() -> str:
    """One digest of what the load of the kernel now compiling read (files, variables); '' outside a compile."""
    if WORKER.compiling is None:
        return ""
    return hashlib.sha256(json.dumps(WORKER.compiling.loaded.dependencies, sort_keys=True).encode()).hexdigest()


def is_project_module(name: str, module: Any) -> bool:
    """A module of the project: not built in, not in the standard library or an installed package."""
    if name.partition(".")[0] in ENVIRONMENT_PACKAGES:
        return False
    try:
        namespace = vars(module)  # never getattr: a lazy module would import on attribute access
    except TypeError:
        return False
    file = namespace.get("__file__")
    if file:
        return not in_environment(file)
    paths = namespace.get("__path__")  # a namespace package: its folders
    try:
        folders = list(paths or ())
    except KeyError:   # a namespace path recomputes from its parent, which a finished load took out of sys.modules
        folders = list(getattr(paths, "_path", ()))
    except TypeError:
        return False
    return any(not in_environment(p) for p in folders)


def dependency_files(added: dict[str, Any], reads: list[str], *, kernel_package: str | None = None,
                      package_folders: tuple[str, ...] = ()) -> dict[str, str | None]:
    """The project files a load read and the files of the project modules it added, with their SHA-256
    (a namespace package's missing __init__.py as None: one appearing would change what the import runs).
    The kernel's own package (`kernel_package`, in `package_folders`) counts wholly, even when installed: its
    modules and the files read in its folders. The files that would shadow a counted module are in too (as None).
    Bytecode caches are left out: they follow their sources (a load never reads them, see the loader's from_source)."""
    files: dict[str, str | None] = {}
    for path in reads:
        if path.startswith(ABSENT_ENTRY):   # wherever it would appear, installed packages' folders included
            path = path[len(ABSENT_ENTRY):]
            if dependency_digest(path) is None and not _own_output(path.removeprefix(FOLDER_ENTRY)):
                files.setdefault(path, None)
            continue
        if path.startswith(LISTING_ENTRY):
            folder = path[len(LISTING_ENTRY):]
            if _counted_listing(folder, package_folders):
                files[path] = listing_digest(folder)
            continue
        if path.endswith(".pyc") or path.startswith(_SYSTEM_FOLDERS) or _own_output(path):
            continue   # xisa's cache and a compile's output are xisa's, checked by their own keys: never a read
        if not _project_path(path, package_folders):
            continue
        if os.path.isfile(path):
            files[os.path.abspath(path)] = consumed_sha256(path)
        elif _may_appear(path):   # asked for and missing (an optional config file): one appearing is a change
            files.setdefault(os.path.abspath(path), None)
    for name, module in added.items():
        in_kernel_package = kernel_package is not None and name.partition(".")[0] == kernel_package
        if not (is_project_module(name, module) or in_kernel_package):
            continue
        if isinstance(module, types.ModuleType):   # a project helper can be shadowed as the kernel's package can
            for path, digest in shadowing_files(name, module).items():
                files.setdefault(path, digest)
        namespace = vars(module)
        file = namespace.get("__file__")
        if file:
            files[os.path.abspath(file)] = consumed_sha256(file)
        else:
            for folder in list(namespace.get("__path__") or []):
                files[os.path.join(os.path.abspath(folder), "__init__.py")] = None
    return dict(sorted(files.items()))


def _own_output(path: str) -> bool:
    """Under xisa's cache folder, a compile's output folder (Triton's cache) or xisa's own package."""
    return os.path.join(os.path.abspath(path), "").startswith((*WORKER.output_folders, _XISA_FOLDER))


def _counted_listing(folder: str, package_folders: tuple[str, ...]) -> bool:
    """A folder listing the project could change: not the interpreter's or an installed package's (the kernel's
    own package aside), the temporary folder itself, xisa's or a compile's own output."""
    import tempfile

    inside = os.path.join(folder, "")
    if inside.startswith((*_SYSTEM_FOLDERS, *WORKER.output_folders, _XISA_FOLDER)) or \
            folder == os.path.abspath(tempfile.gettempdir()):   # others' files come and go there
        return False
    return _project_path(folder, package_folders)


def _project_path(path: str, package_folders: tuple[str, ...]) -> bool:
    """Outside the interpreter's and the installed packages' folders, or inside the kernel's own package's."""
    return not in_environment(path) or bool(package_folders and
                                            os.path.join(os.path.abspath(path), "").startswith(package_folders))


def _may_appear(path: str) -> bool:
    """A missing file the project could add: not the interpreter's, a temporary file, xisa's or a compile's own."""
    import tempfile

    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if os.path.exists(path) or not os.path.isdir(folder) or folder == os.path.abspath(tempfile.gettempdir()):
        return False   # a temporary file made and removed (one in a temporary folder: the folder is gone too)
    interpreter = {os.path.join(os.path.abspath(p), "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return not path.startswith((*interpreter, *WORKER.output_folders, _XISA_FOLDER))


# What a depfile records for a file whose bytes may not be those a load or compile read (it changed after it was
# first opened): no file hashes to it, so the next check compiles again.
CHANGED_WHILE_READ = "changed-while-read"


def _stat_of(path: str) -> tuple[int, ...]:
    try:
        info = os.stat(path)
    except OSError:
        return ()
    return info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino, time.time_ns()


def consumed_sha256(path: str) -> str | None:
    """The SHA-256 of a file as the load or compile read it: its bytes now, when it has not changed since it was
    first opened (the same modification and change times to the nanosecond, size and inode, after hashing); else
    `CHANGED_WHILE_READ` (an editor or a checkout saved it meanwhile: the bytes hashed would stand for code that
    never compiled)."""
    before = WORKER.read_stats.get(path) or WORKER.read_stats.get(os.path.abspath(path))
    digest = file_sha256(path)
    if before is None or digest is None:
        return digest
    if not before or _stat_of(path)[:4] != before[:4]:
        return CHANGED_WHILE_READ
    return digest


def file_sha256(path: str) -> str | None:
    """SHA-256 of a file's bytes; None when it does not exist (or cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=None)   # one entry per file a process imports or reads: a few thousand
def in_environment(path: str) -> bool:
    path = os.path.abspath(path)
    real = real_path(path)
    return any(p.startswith(root) for root in environment_roots() for p in (path, real))


def real_path(path: str) -> str:
    """os.path.realpath of an absolute path, its folder's worked out once (realpath stats every part of the path,
    for each of the thousands of modules a process holds)."""
    if os.path.islink(path):
        return os.path.realpath(path)
    folder, name = os.path.split(path)
    return os.path.join(_real_folder(folder), name)


@functools.lru_cache(maxsize=None)
def _real_folder(folder: str) -> str:
    return os.path.realpath(folder)


@functools.lru_cache(maxsize=1)
def environment_roots() -> tuple[str, ...]:
    """The standard library's and the installed packages' folders (the toolchain identity covers them)."""
    import site
    import sysconfig

    folders: set[str] = set()
    for variables in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=variables) if variables else sysconfig.get_paths()
        folders.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths)
    try:
        folders.update(site.getsitepackages())
        folders.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    roots = set()
    for folder in folders:
        for variant in (os.path.abspath(folder), os.path.realpath(folder)):
            roots.add(os.path.join(variant, ""))
    return tuple(sorted(roots))

