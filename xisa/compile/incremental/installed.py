"""What a compile used from installed packages, for the result cache's depfiles.

A helper package reinstalled at the same version with other code (a rebuilt wheel, a git dependency at a
new commit) keeps its dist-info folder's name, so a key made of installed names and versions answers with
the old code. A cell's depfile therefore holds, for every installed distribution with a module in the
compiling process (other than xisa's own toolchain: xisa, Triton, torch, typer, rich, pyyaml and what they
require), its RECORD (the hashes of every file it installed) and the files of its imported modules (an
edit in place keeps RECORD as it was), each with its SHA-256. A `pip install` of a package nothing imported
touches none of them. Runs in a compile worker, after the cell's load and compile.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import sys
import sysconfig
from importlib import metadata

from xisa.compile.incremental.reads import file_sha256, in_environment, real_path

# The distributions whose code is the toolchain: keyed by the toolchain identity, never per cell.
TOOLCHAIN_ROOTS = ("xisa", "triton", "torch")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=1)
def toolchain_distributions() -> frozenset[str]:
    """xisa, Triton and torch, and every distribution they require (markers with an extra left out)."""
    seen: set[str] = set()
    todo = list(TOOLCHAIN_ROOTS)
    while todo:
        name = _normalized(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            match = _NAME.match(requirement)
            if match and "extra" not in requirement.partition(";")[2]:   # an optional extra is not required
                todo.append(match.group(0))
    return frozenset(seen)


@functools.lru_cache(maxsize=64)
def _distributions_by_top_level(path: tuple[str, ...]) -> dict[str, tuple[str, str | None]]:
    """Top-level import name -> (normalized distribution name, its RECORD path or None), first on `path`.

    Each folder of `path` is read once a process (`_distributions_in`): a load changes sys.path several times
    (FlagGems puts its backend's folder first, a `source:` kernel its own folder), and each new path used to read
    every installed distribution again, RECORD files too where there is no top_level.txt (7 reads in a worker's 3
    FlagGems loads; 37 distributions here, about 200 in the GPU machines' image: issue 35)."""
    found: dict[str, tuple[str, str | None]] = {}
    for entry in dict.fromkeys(path):
        for top, owner in _distributions_in(entry).items():
            found.setdefault(top, owner)
    return found


@functools.lru_cache(maxsize=None)
def _distributions_in(entry: str) -> dict[str, tuple[str, str | None]]:
    """`_distributions_by_top_level` of one folder of sys.path (files do not change under a running compile)."""
    found: dict[str, tuple[str, str | None]] = {}
    for dist in metadata.distributions(path=[entry]):
        name = _normalized(dist.metadata["Name"] or "")
        folder = getattr(dist, "_path", None)   # the dist-info folder (a PathDistribution)
        record = os.path.join(str(folder), "RECORD") if folder is not None else None
        if record is not None and not os.path.isfile(record):
            record = None   # an egg-info: its modules' files stand for it
        for top in _top_level_names(dist):
            found.setdefault(top, (name, record))
    return found


def _top_level_names(dist) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names = set()
    for path in dist.files or ():
        first = path.parts[0] if path.parts else ""
        if first.endswith((".dist-info", ".egg-info", ".data")) or first in ("..", "__pycache__"):
            continue
        names.add(first[:-3] if first.endswith(".py") else first.partition(".")[0])
    return names


@functools.lru_cache(maxsize=1)
def _standard_library() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.join(os.path.realpath(paths[key]), "") for key in ("stdlib", "platstdlib") if key in paths)


def _installed_file(module) -> str | None:
    """The module's file when it lives in an installed package (not the project, not the standard library)."""
    try:
        file = vars(module).get("__file__")
    except TypeError:
        return None
    if not isinstance(file, str) or not in_environment(file):
        return None
    return _installed_path(file)


@functools.lru_cache(maxsize=None)   # a library loaded once per target brings the same files each time
def _installed_path(file: str) -> str | None:
    real = real_path(os.path.abspath(file))
    if real.startswith(_standard_library()) and "-packages" + os.sep not in real:
        return None
    return os.path.abspath(file)


# Per worker: files do not change under a running compile, and a module keeps its file.
_DIGESTS: dict[str, str | None] = {}
_FILES: dict[tuple[str, int], str | None] = {}
_LAST: list = [None, None]   # the modules and sys.path of the last answer, and that answer (asked once a cell)


class HeldObjects:
    """A mapping's names and the very objects under them, as they were: `same_as` tells whether a mapping holds the
    same objects under the same names in the same order (C-speed: asked once a cell of ~3,000 modules). It keeps
    the objects alive, so no other object can take one's identity meanwhile."""

    __slots__ = ("names", "objects")

    def __init__(self, mapping):
        self.names, self.objects = tuple(mapping), tuple(mapping.values())

    def same_as(self, mapping) -> bool:
        return len(mapping) == len(self.names) and tuple(mapping) == self.names and \
            all(map(operator.is_, mapping.values(), self.objects))


def _digest(path: str) -> str | None:
    if path not in _DIGESTS:
        _DIGESTS[path] = file_sha256(path)
    return _DIGESTS[path]


def installed_dependencies() -> dict[str, str | None]:
    """Depfile entries for the installed code the process holds now: each distribution's RECORD and each
    imported module's file (outside the toolchain's distributions), with their SHA-256."""
    before = _LAST[0]
    if before is None or before[1] != sys.path or not before[0].same_as(sys.modules):
        _LAST[:] = [(HeldObjects(sys.modules), list(sys.path)), _installed_entries()]   # the same module objects
    return dict(_LAST[1])                                                                # on the same path: the same files


def _installed_entries() -> dict[str, str | None]:
    toolchain = toolchain_distributions()
    owners = _distributions_by_top_level(tuple(sys.path))
    entries: dict[str, str | None] = {}
    for name, module in list(sys.modules.items()):
        if (name, id(module)) not in _FILES:
            _FILES[(name, id(module))] = _installed_file(module)
        file = _FILES[(name, id(module))]
        if file is None:
            continue
        owner, record = owners.get(name.partition(".")[0], (None, None))
        if owner in toolchain:
            continue
        if record is None or file.endswith(".py"):   # a reinstalled extension module changes RECORD
            entries[file] = _digest(file)
        if record is not None:
            entries[record] = _digest(record)
    return dict(sorted(entries.items()))


def is_toolchain_file(file: str) -> bool:
    """A code file of the standard library (a frozen module's `<frozen os>` included) or of a toolchain distribution,
    by where it is: not what a function's `__module__` says (a function of the project's put into a Triton class, or
    its code into a Triton function, keeps Triton's `__module__`)."""
    if file.startswith("<frozen ") and file.endswith(">"):
        return file[8:-1].partition(".")[0] in sys.stdlib_module_names
    if not os.path.isabs(file):
        return False
    real = real_path(os.path.abspath(file))
    if real.startswith(_standard_library()) and "-packages" + os.sep not in real:
        return True
    for entry in sys.path:
        folder = os.path.join(os.path.abspath(entry), "") if entry else ""
        if folder and file.startswith(folder) and in_environment(file):
            top = file[len(folder):].partition(os.sep)[0]
            top = top[:-3] if top.endswith(".py") else top
            owner, _ = _distributions_by_top_level(tuple(sys.path)).get(top, (None, None))
            return owner in toolchain_distributions()
    return False


def is_toolchain_module(name: str) -> bool:
    """A module of xisa's toolchain (Triton, torch and what they require: sympy, networkx, jinja2, ...)."""
    top = name.partition(".")[0]
    if top in TOOLCHAIN_ROOTS:
        return True
    owner, _ = _distributions_by_top_level(tuple(sys.path)).get(top, (None, None))
    return owner in toolchain_distributions()


def warm_installed() -> None:
    """Read the installed distributions' metadata now (before workers fork), not once per worker."""
    toolchain_distributions()
    _distributions_by_top_level(tuple(sys.path))


def installed_digest() -> str:
    """One SHA-256 of `installed_dependencies()`: salts Triton's own cache, whose key holds none of it."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(installed_dependencies(), sort_keys=True).encode()).hexdigest()
