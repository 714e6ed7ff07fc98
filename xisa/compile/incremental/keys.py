"""Every part of xisa's cache keys, named once, and the keys built from them.

Four stores answer for a compile, or for a part of one, and each is keyed by a digest of named parts:

    result      the whole cell (`cache.ResultCache`); the entry's depfile adds the files and variables its load
                and compile read, checked on every hit (`reads.py`)
    backend     the back end's work, from the front end's output on (`backend_store.py`)
    front_end   which front-end output a set of front-end inputs made (`backend_store.py`, `front_end_key.py`)
    load_code   a module's code object from its source text; load_block: a function's source block from its
                lines (`load_store.py`)

`PARTS` says what each part stands for and which keys hold it; `digest` refuses a key made of other parts than
its kind's, so a part cannot be added to one key and forgotten in the table. A part that reaches a partial key
(back end, front end, load) but not the result key names in `COVERED_BY` what of the result key, or of its
depfile, stands for it: tests/compile/test_keys.py fails on a part that reaches a partial key and not the whole.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import xisa

# 5: one home for the key parts (keys.py), the interpreter and the import finders in the result key; 4: an entry is a header line {key,
# digest of the body's bytes}, then the body; 3: the back-end store (backend_store.py)
CACHE_FORMAT = 5

KINDS = ("result", "backend", "front_end", "load_code", "load_block")
_COMPILE = frozenset({"result", "backend", "front_end"})
_BACK = frozenset({"backend", "front_end"})

# part -> (what it stands for, the keys that hold it)
PARTS: dict[str, tuple[str, frozenset[str]]] = {
    "format": ("the layout of xisa's cache entries (CACHE_FORMAT)", _COMPILE),
    "xisa": ("xisa's own code that turns a cell into a result (xisa_identity)", _COMPILE),
    "toolchain": ("the installed Triton build and torch's build (toolchain_identity)", _COMPILE),
    "interpreter": ("Python's version, bytecode magic and cache tag", frozenset(KINDS)),
    "optimize": ("the interpreter's optimization level (-O drops asserts)", frozenset({"result", "load_code"})),
    "pinned": ("the codegen variables xisa pins, with their values", frozenset({"result"})),
    "environment": ("set toolchain-like variables no table names", frozenset({"result"})),
    "compile_environment": ("every set variable that changes what Triton compiles, as the worker has it", _BACK),
    "triton_environment": ("Triton's C++ cache-invalidating variables", _BACK),
    "target": ("the target file's facts (GPUTarget, device answers)", _COMPILE),
    "gpu_target": ("the GPUTarget Triton compiles for", _BACK),
    "kernel": ("the spec's kernel name", frozenset({"result"})),
    "function": ("the kernel function the spec names", frozenset({"result"})),
    "case": ("the case name", frozenset({"result"})),
    "args": ("the case's arguments", frozenset({"result"})),
    "constexprs": ("the case's constexprs", frozenset({"result"})),
    "options": ("the case's compile options (result); Triton's options as bound (back end)", _COMPILE),
    "config": ("the autotune config the case picks", frozenset({"result"})),
    "heuristics": ("the heuristics' values the case records", frozenset({"result"})),
    "spec": ("the spec file's path", frozenset({"result"})),
    "source": ("the kernel file's path", frozenset({"result"})),
    "module": ("the kernel's module name", frozenset({"result"})),
    "roots": ("the project's roots (where an import is searched)", frozenset({"result"})),
    "sys_path": ("sys.path (where an import is searched)", frozenset({"result"})),
    "meta_path": ("the import finders the interpreter started with and their code (an editable install adds one)",
                  frozenset({"result"})),
    "pythonpath": ("the spec's pythonpath", frozenset({"result"})),
    "import_hooks": ("the spec's import hooks", frozenset({"result"})),
    "knobs": ("an `xisa ab` side's knobs (result); Triton's knobs as code set them (back end)", _COMPILE),
    "ttir": ("the front end's output, locations included", frozenset({"backend"})),
    "shown_paths": ("how each path in the TTIR's locations is shown (ptxas gets those names)", frozenset({"backend"})),
    "front_end": ("what the front end reads of the kernel (front_end_key.front_end_record)", frozenset({"front_end"})),
    "path": ("a module's file path (its code's co_filename)", frozenset({"load_code"})),
    "text": ("the source bytes or lines given", frozenset({"load_code", "load_block"})),
}

# What of the result key (or its depfile, "depfile") stands for each part that a partial key holds and the result
# key does not: the result key answers for the whole compile, so every input of a part must reach it too.
COVERED_BY: dict[str, tuple[str, ...]] = {
    "compile_environment": ("pinned", "environment"),   # the rest of changes_compilation is refused at start
    "triton_environment": ("pinned", "environment"),    # its unnamed variables are refused (check_triton_environment)
    "gpu_target": ("target",),
    "ttir": ("depfile", "args", "constexprs", "config", "heuristics", "options", "target"),
    "shown_paths": ("roots", "spec", "source", "sys_path"),
    "front_end": ("depfile", "args", "constexprs", "config", "heuristics"),
    "path": ("depfile", "sys_path", "roots", "meta_path"),
    "text": ("depfile",),
}


def parts_of(kind: str) -> frozenset[str]:
    return frozenset(name for name, (_, kinds) in PARTS.items() if kind in kinds)


def digest(kind: str, parts: dict[str, Any]) -> str:
    """The key of `kind` from exactly its parts (a programming error otherwise: a part missing from the table)."""
    expected = parts_of(kind)
    if set(parts) != expected:
        raise KeyError(f"a {kind} key made of {sorted(set(parts) ^ expected)} beyond or short of keys.PARTS")
    blob = json.dumps({"kind": kind, **parts}, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return hashlib.sha256(blob).hexdigest()


def interpreter() -> str:
    return f"{sys.version}|{importlib.util.MAGIC_NUMBER.hex()}|{sys.implementation.cache_tag}"


def canonical(value: Any) -> Any:
    """`value` as JSON that is the same in every process: sets sorted (their order follows string hashing, which
    differs from process to process), tuples as lists, anything else by its repr."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return repr(value)


# The parts of xisa a compile runs: these folders at any depth, and the base files (tests/compile/test_keys.py
# checks that every xisa module the compile imports is among them).
_IDENTITY_FOLDERS = ("analyze", "spec", "compile", "capture_site")


def identity_files() -> list[Path]:
    package = Path(xisa.__file__).resolve().parent
    files = [path for folder in _IDENTITY_FOLDERS for path in (package / folder).rglob("*.py")]
    return sorted(files + list(package.glob("*.py")))


@lru_cache(maxsize=1)
def xisa_identity() -> str:
    """The code that turns a cell into a result: a change to it must not be answered from old entries."""
    package = Path(xisa.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in identity_files():
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def toolchain_identity() -> str:
    """The installed Triton build (its RECORD covers the bundled LLVM, lld and ptxas), the files of a Triton
    imported from elsewhere, and torch's build (the stand-ins' dtypes), read without importing anything.
    Other installed packages are keyed per cell by what its compile used (`installed.py`): a `pip install`
    of a package no compile imports answers nothing differently."""
    try:
        dist = metadata.distribution("triton")
    except metadata.PackageNotFoundError:
        return "none"
    record = (dist.read_text("RECORD") or "") + _triton_outside_its_wheel(dist)
    try:
        torch = metadata.distribution("torch")
        torch_build = f"{torch.version}:{hashlib.sha256((torch.read_text('RECORD') or '').encode()).hexdigest()[:16]}"
    except metadata.PackageNotFoundError:
        torch_build = "none"
    return f"{dist.version}:{hashlib.sha256(record.encode()).hexdigest()[:16]}:torch {torch_build}"


def _triton_outside_its_wheel(dist) -> str:
    """'' when `import triton` finds the files the wheel's RECORD lists; else (a source checkout on PYTHONPATH,
    an editable install, whose RECORD says nothing of them) the path, size and mtime of each of its files."""
    found = importlib.util.find_spec("triton")   # finds the package without importing it
    origin = found.origin if found is not None else None
    if origin is None or os.path.abspath(origin) == os.path.abspath(dist.locate_file("triton/__init__.py")):
        return ""
    lines = [os.path.abspath(origin)]
    for folder, subfolders, files in os.walk(os.path.dirname(origin)):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(files):
            try:
                info = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            lines.append(f"{os.path.join(folder, name)} {info.st_size} {info.st_mtime_ns}")
    return "\n".join(lines)


def result_key(cell, roots: tuple[Path, ...], *, knobs: dict[str, str] | None = None) -> str:
    """What the compile of `cell` depends on, apart from the files its load imports (the entry's depfile).

    The spec and kernel paths and sys.path are in it because they decide which files an import finds;
    `knobs` (an `xisa ab` side's settings over the pinned environment) because they change the code.
    """
    from xisa.compile.worker.toolchain import PINNED_ENV, unclassified_environment

    spec = cell.kernel
    return digest("result", {
        "format": CACHE_FORMAT, "xisa": xisa_identity(), "toolchain": toolchain_identity(),
        "interpreter": interpreter(), "optimize": sys.flags.optimize,
        "pinned": PINNED_ENV, "environment": unclassified_environment(), "target": cell.target.summary(),
        "kernel": spec.name, "function": spec.function, "case": cell.case, "args": cell.args,
        "constexprs": cell.constexprs, "options": cell.options, "config": cell.config,
        "heuristics": cell.heuristics, "spec": str(spec.spec_file),
        "source": str(spec.source_file) if spec.source_file else None, "module": spec.module,
        "roots": [str(r) for r in roots], "sys_path": list(sys.path), "meta_path": import_finders(),
        "pythonpath": [str(p) for p in spec.pythonpath], "import_hooks": [str(p) for p in spec.import_hooks],
        "knobs": dict(sorted(knobs.items())) if knobs else None,
    })


def import_finders() -> list[str]:
    """sys.meta_path's finders other than xisa's, each by its class and the digest of its module's file: an editable
    install (setuptools' `__editable___*_finder`, from a .pth at start-up) finds modules outside sys.path, so one
    added or remapped changes what an import finds with no file of the path changing."""
    finders = []
    for finder in sys.meta_path:
        kind = finder if isinstance(finder, type) else type(finder)
        module = kind.__module__
        if module.partition(".")[0] == "xisa":
            continue
        file = getattr(sys.modules.get(module), "__file__", None)
        finders.append(f"{module}.{kind.__qualname__}:{_file_digest(file) if file else ''}")
    return finders


@lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def compile_context(cell, bound, knobs: Any) -> dict[str, Any]:
    """The back-end and front-end keys' parts that are not the front end's input or output, as the worker compiling
    `cell` has them (`knobs`: Triton's knobs as code set them, `backend_store.code_knobs`)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    from xisa.compile.worker.toolchain import changes_compilation

    return {
        "format": CACHE_FORMAT, "xisa": xisa_identity(), "toolchain": toolchain_identity(),
        "interpreter": interpreter(),
        "compile_environment": {name: value for name, value in sorted(os.environ.items())
                                if changes_compilation(name) and name not in RUN_FOLDERS},
        "triton_environment": canonical(get_cache_invalidating_env_vars()),
        "target": canonical(cell.target.summary()), "gpu_target": canonical(vars(bound.target)),
        "options": canonical(vars(bound.options)), "knobs": knobs,
    }


# Variables whose value is a folder of this run (Triton's cache is one per run): never part of a key.
RUN_FOLDERS = frozenset({"TRITON_CACHE_DIR"})


def backend_key(context: dict[str, Any], ttir: str, shown_paths: dict[str, str], knobs: Any) -> str:
    """The back end's key: the context with the knobs as the back end will have them (a constexpr function may set
    one while the front end traces), the TTIR and how its paths are shown."""
    return digest("backend", {**context, "knobs": knobs, "ttir": ttir, "shown_paths": shown_paths})


def front_end_key(context: dict[str, Any], record: str) -> str:
    return digest("front_end", {**context, "front_end": record})


def load_code_key(path: str, data: bytes) -> str:
    return digest("load_code", {"interpreter": interpreter(), "optimize": sys.flags.optimize, "path": path,
                                "text": hashlib.sha256(data).hexdigest()})


def load_block_key(lines: list[str]) -> str:
    text = hashlib.sha256("".join(lines).encode("utf-8", "surrogatepass")).hexdigest()
    return digest("load_block", {"interpreter": interpreter(), "text": text})
