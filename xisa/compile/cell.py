"""Compile one cell: bind through Triton's binder, `triton.compile` for the cell's GPUTarget, analyze."""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from xisa.analyze import lines
from xisa.analyze.model import Analysis
from xisa.analyze.stages import stage_fingerprints
from xisa.compile.gpu.import_hooks import hooks_entered
from xisa.compile.launch.bind import bind_cell
from xisa.compile.launch.loader import from_source, kernel_platform_facts, load_kernel_function
from xisa.compile.tools.ptxas import canonical_ptxas, ptx_file_paths
from xisa.compile.incremental.backend_store import BackendHit, BackendStore, backend_reuse
from xisa.compile.incremental.cache import front_end_output_to
from xisa.compile.incremental.reads import compiling, reused_compile_reads, variables_read_binding
from xisa.compile.launch.standins import plain
from xisa.compile.tools.disassemble import kept_stages, machine_code
from xisa.compile.worker.result import CellResult
from xisa.compile.worker.toolchain import knobs_restored
from xisa.errors import XisaError
from xisa.spec.cases import Cell


def compile_cell(cell: Cell, *, roots: list[Path], keep_stages: bool = False, store: BackendStore | None = None,
                 lookup: bool = True) -> CellResult:
    """Never raises for a cell-level problem: the error is the cell's result, so other cells go on. `store`: the
    back-end store this compile records into (and, with `lookup`, is answered from).
    Deprecation notices of the libraries a compile runs through (Triton, NumPy, torch, a kernel module's own
    imports) say nothing about the machine code and would bury the report: they are not printed."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
            warnings.simplefilter("ignore", category)
        # Triton 3.8 says "tl.make_block_ptr is deprecated" as a plain UserWarning, once per traced call
        warnings.filterwarnings("ignore", message=r".* is deprecated\b", category=UserWarning)
        with knobs_restored():
            return _compile_cell(cell, roots=roots, keep_stages=keep_stages, store=store,
                                 lookup=lookup and not keep_stages)


def _compile_cell(cell: Cell, *, roots: list[Path], keep_stages: bool, store: BackendStore | None,
                  lookup: bool) -> CellResult:
    started = time.perf_counter()
    result = CellResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="error")
    bound = None
    sources = SourceFiles(roots, cell.kernel.pythonpath)   # ptxas's file names, the store key's and the table's
    try:
        fn = load_kernel_function(cell.kernel, roots=roots, target=cell.target)
        # What the compile reads is a dependency as well; a module a heuristic imports now is compiled from its
        # source, as a load's are (a __pycache__ entry would be read in its place, and not be in the depfile).
        with compiling(cell.kernel, cell.target), from_source(), hooks_entered(cell.kernel, cell.target):
            with variables_read_binding():
                bound = bind_cell(cell, fn)
            result.binding = bound.signature_record()
            result.options = bound.options_record()
            result.config = bound.picked
            # The seam where the back-end store enters the compile: before the front end (inputs seen before), and
            # at its output, which Triton's cache manager hands to `reuse.at_front_end` as Triton files it. Either
            # raises BackendHit out of triton.compile when the store holds the back end's work.
            with backend_reuse(store, cell, bound, sources.path_of, lookup=lookup) as reuse, \
                    front_end_output_to(reuse.at_front_end if reuse is not None else None):
                try:
                    if reuse is not None:
                        reuse.before_front_end()
                    compiled, reads = _triton_compile(bound, cell, sources), None
                    if reuse is not None:
                        reads = reuse.back_end_reads()
                except BackendHit as hit:   # the back end's work for this front end's output, stored
                    compiled, analysis = None, hit.analysis
                    reused_compile_reads(hit.reads)   # what it read is what this cell's depfile must hold
                    result.reused_backend, result.skipped_front_end = True, hit.front_end
        if compiled is not None:
            analysis = backend_analysis(cell, compiled, bound.options)
            if reuse is not None:
                reuse.record(compiled, analysis, reads)   # before `shown`: the store keeps the compiler's paths
            learn_ptx_names(compiled, sources)
        result.analysis = shown(analysis, sources)
        result.status = "ok"
        result.resolved = _resolution(bound, kernel_platform_facts(cell.kernel, cell.target))
        if keep_stages:   # for `--emit`: every stage, the assembly as Triton spells it
            result.stages = kept_stages(cell.target.handler, compiled)
    except XisaError as exc:
        result.error = str(exc)
        result.error_kind = type(exc).__name__.replace("Error", "").lower()
    except Exception as exc:  # Triton's own failures: the message is what the user needs
        result.error = _triton_message(exc)
        if bound is not None and bound.config:   # which of the autotuner's configs failed on this target
            result.error = f"{bound.config}: {result.error}"
        result.error_kind = "compile"
    result.seconds = time.perf_counter() - started
    return result


def _resolution(bound, facts: dict[str, Any]) -> dict[str, Any]:
    """What the cell's target decided beside its arguments: the config its autotuner applied, the platform facts
    the kernel's module and heuristics read, the launch options Triton rewrote (only those that are there)."""
    resolved = {"config": bound.config, "platform": dict(sorted(facts.items())), "notes": list(bound.notes)}
    return {key: value for key, value in resolved.items() if value}


def _triton_compile(bound, cell: Cell, sources: "SourceFiles"):
    import triton
    from triton.compiler import ASTSource

    source = ASTSource(bound.fn, bound.signature, bound.constexprs, bound.attrs)
    if not cell.target.handler.canonical_tool_inputs:
        return triton.compile(source, target=bound.target, options=vars(bound.options))
    with canonical_ptxas(sources.path_of):
        return triton.compile(source, target=bound.target, options=vars(bound.options))


def analyze_compiled(cell: Cell, compiled, options, *, sources: SourceFiles | None = None) -> Analysis:
    """The cell's analysis, its stage fingerprints, its source-line table and each instruction's source location
    (paths made relative by `sources`, the one that named ptxas's files: it knows what those names stand for)."""
    sources = sources or SourceFiles((), cell.kernel.pythonpath)
    analysis = backend_analysis(cell, compiled, options)
    learn_ptx_names(compiled, sources)
    return shown(analysis, sources)


def backend_analysis(cell: Cell, compiled, options) -> Analysis:
    """What the back end's output says: the analysis and its stage fingerprints, source locations as the compiler
    wrote them (a function of the front end's output, the options and the target: what the back-end store keeps)."""
    target = cell.target
    handler = target.handler
    assembly, binary, binary_facts = machine_code(handler, compiled)
    analysis = handler.analyze(assembly, binary, binary_facts,
                               shared_bytes=int(getattr(compiled.metadata, "shared", 0) or 0),
                               num_warps=int(getattr(options, "num_warps", 4)), target=target)
    analysis.metadata = launch_metadata(compiled.metadata, options)
    analysis.stages = stage_fingerprints(handler, compiled.asm, analysis,
                                         kernel=getattr(compiled.metadata, "name", None))
    return analysis


def learn_ptx_names(compiled, sources: "SourceFiles") -> None:
    """What the SASS's relative names stand for (the PTX's `.file` paths), also where Triton's cache ran no ptxas.
    A back-end store hit has no PTX: the key's own paths (and folders) were shown through `sources` already."""
    for path in ptx_file_paths((getattr(compiled, "asm", None) or {}).get("ptx") or ""):
        sources.path_of(path)


def shown(analysis: Analysis, sources: "SourceFiles") -> Analysis:
    """`analysis` with its source-line table and per-instruction locations as this project shows them: paths from
    `sources`, each line's text read from its file now."""
    analysis.lines = lines.resolve(analysis.lines, path_of=sources.path_of, text_of=sources.text_of)
    analysis.locs = [sources.location(loc) for loc in analysis.locs]
    return analysis


# Metadata fields that are not what a launch reads: Triton's cache key (it holds paths), its version (a golden's
# toolchain), the libraries' absolute paths, the target (the cell's own). Triton 3.8 also copies the codegen
# variables it compiled under into the metadata (`AMDGCN_USE_BUFFER_OPS: 'true'`, upper-case keys) for its cache:
# no launcher reads them, xisa pins them (`xisa.compile.worker.toolchain`), and what they change shows in the code object.
_NOT_LAUNCH_METADATA = frozenset({"hash", "triton_version", "extern_libs", "target"})
_ENVIRONMENT_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")


def launch_metadata(metadata, options) -> dict:
    """Triton's compiled metadata minus the options (recorded as such) and `_NOT_LAUNCH_METADATA`: what the
    launcher takes from it besides the code object (`shared`, `global_scratch_size`, `tmem_size`, ...), whatever
    fields the installed Triton has."""
    fields = _fields(metadata)
    skip = _NOT_LAUNCH_METADATA | set(_fields(options))
    return {key: plain(value) for key, value in sorted(fields.items())
            if key not in skip and not _ENVIRONMENT_KEY.match(key)}


def _fields(record) -> dict:
    """A backend's options dataclass, or the namedtuple of a launched kernel's metadata (`xisa device`), as a dict."""
    return record._asdict() if hasattr(record, "_asdict") else dict(vars(record))


class SourceFiles:
    """Where the line information's absolute paths are shown from, and the text of their lines.

    A file of an installed package (under a site-packages folder, a virtual environment inside the checkout
    included) is shown relative to that folder (`triton/language/standard.py`, `liger_kernel/ops/softmax.py`,
    a namespace package's `nvidia/cu13/...` whole). A file inside a package anywhere else is shown from the
    folder holding its top package, the highest folder with an `__init__.py` (`fla/ops/gla.py` whether fla sits
    in site-packages, `vendor/` or `src/`), or from the `[tool.xisa] pythonpath` folder above it when only
    namespace package folders (no `__init__.py`) lie between; the walk up stops at the project's edge, so the
    checkout's own folder name never shows. Any other project file is shown relative to the project root (the
    shortest kernel root holding it), one elsewhere on `sys.path` relative to that folder, anything else by its
    name: never an absolute path, so moving the checkout, the virtual environment or a package between
    site-packages, `vendor/` and a src layout, or another Python version, changes no table.

    These names are also what ptxas reads as the PTX's file names (`xisa.compile.tools.ptxas`): a move changes none of
    its input."""

    def __init__(self, roots, pythonpath=()):
        self.roots = sorted((Path(r) for r in roots), key=lambda r: len(r.parts))
        self.pythonpath = [Path(p) for p in pythonpath]
        entries = [Path(p) for p in sys.path if p and os.path.isabs(p)]
        self.site_folders = sorted({p for p in entries if p.name in ("site-packages", "dist-packages")},
                                   key=lambda p: -len(p.parts))
        self.folders = [*self.roots, *sorted(entries, key=lambda p: -len(p.parts))]
        self.texts: dict[str, list[str]] = {}
        self.shown: dict[str, str] = {}
        self.origins: dict[str, str] = {}    # a name given -> the absolute path it stands for
        self.locations: dict[str, str] = {}  # `location`'s answers

    def path_of(self, path: str) -> str:
        if path not in self.shown:   # asked once per instruction (`location`): each path is worked out once
            self.shown[path] = self._path_of(path)
            self.origins.setdefault(self.shown[path], path)
        return self.shown[path]

    def _path_of(self, path: str) -> str:
        file = Path(path)
        if not file.is_absolute():
            return file.as_posix()
        for folder in self.site_folders:
            if file.is_relative_to(folder):
                return file.relative_to(folder).as_posix()
        holder = self._package_holder(file)
        if holder is not None:
            return file.relative_to(holder).as_posix()
        for folder in self.folders:
            if file.is_relative_to(folder):
                return file.relative_to(folder).as_posix()
        return file.name

    def _package_holder(self, file: Path) -> Path | None:
        """The folder a file inside a package is named from (the class docstring), or None for a file in a plain
        folder. `file` may be a folder (DWARF's compile directory)."""
        folder = file if file.is_dir() else file.parent
        edge = next((root for root in self.roots if folder.is_relative_to(root)), None)
        if folder == edge or not _is_package(folder):
            return None
        while folder.parent != edge and _is_package(folder.parent):
            folder = folder.parent
        holder = folder.parent
        for entry in sorted(self.pythonpath, key=lambda p: -len(p.parts)):   # namespace folders between
            between = holder.relative_to(entry).parts if holder.is_relative_to(entry) else None
            if between is not None and all(part.isidentifier() for part in between) and not any(
                    _is_package(entry.joinpath(*between[:depth])) for depth in range(1, len(between) + 1)):
                return entry
        return holder

    def location(self, loc: str) -> str:
        """`FILE:LINE` as the compiler wrote it, FILE shown as `path_of` shows it ("" stays "")."""
        shown = self.locations.get(loc)
        if shown is None:   # asked once per instruction: each distinct location is worked out once
            path, line = lines.split_loc(loc)
            shown = self.locations[loc] = f"{self.path_of(path)}:{line}" if path != lines.NO_LINE else ""
        return shown

    def file_of(self, path: str) -> Path:
        """The file a compiler path stands for. ptxas read the names `path_of` gave (the SASS's line information
        holds them, the folder and the file name joined): each is found through what it was named from, else
        in a kernel root, a pythonpath folder or a site-packages folder."""
        if os.path.isabs(path):
            return Path(path)
        parts = Path(path).parts
        for depth in range(len(parts), 0, -1):
            origin = self.origins.get(Path(*parts[:depth]).as_posix())
            if origin is not None:
                return Path(origin, *parts[depth:])
        return next((folder / path for folder in (*self.roots, *self.pythonpath, *self.site_folders)
                     if (folder / path).is_file()), Path(path))

    def text_of(self, path: str, line: int) -> str:
        if path not in self.texts:
            try:
                self.texts[path] = self.file_of(path).read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                self.texts[path] = []
        source = self.texts[path]
        return source[line - 1].strip() if 0 < line <= len(source) else ""


def _is_package(folder: Path) -> bool:
    return folder.name.isidentifier() and (folder / "__init__.py").is_file()


def _triton_message(exc: Exception) -> str:
    """Triton's text whole and multi-line: a CompilationError's `^` points at a column of the source
    line above it, so the lines stay as they are (text output indents them as one block)."""
    lines = [line.rstrip() for line in f"{type(exc).__name__}: {exc}".splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not any(line.strip() for line in lines):
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join(lines)
