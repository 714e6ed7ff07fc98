"""The project a command works on: its targets and specs loaded once (`open_workspace`), the cells a
selection names, and what is refused before anything compiles (a bad scope, goldens of another toolchain)."""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import fnmatch
import functools
from dataclasses import dataclass, field
from pathlib import Path

from xisa.analyze.expect import check_against_targets
from xisa.compile.launch.config_all import config_lister
from xisa.compile.incremental.cache_limit import trim_cache
from xisa.compile.worker.toolchain import describe_toolchain
from xisa.errors import SpecError, ToolchainError
from xisa.golden.material import MaterialStore
from xisa.golden.store import golden_paths, read_golden_toolchain
from xisa.golden.verdict import Scope, check_scopes
from xisa.names import display_path
from xisa.spec.cases import Cell, KernelSpec, build_cells, choose_targets, discover_spec_files, load_specs
from xisa.spec.project import Project, load_project
from xisa.spec.targets import Target, load_targets


@dataclass
class Workspace:
    project: Project
    targets: dict[str, Target]
    specs: list[KernelSpec]
    # What `select` built, by its arguments: a check asks twice (the whole selection, then its shard's cells), and
    # building thousands of cells is a tenth of a warm check.
    _selected: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    compiled: bool = field(default=False, init=False, repr=False, compare=False)   # a compile here added entries

    def __post_init__(self) -> None:
        opened = _OPENED.get()
        if opened is not None:
            opened.append(self)

    @functools.cached_property
    def material(self) -> MaterialStore:
        """Where the streams and source lines of this project's compiles are kept for the review of compact goldens."""
        return MaterialStore.in_cache(self.project.cache_dir)

    def keep_cache_bounded(self) -> None:
        """After a command that wrote entries here, the least recently used entries go until the cache is within its
        limit (`trim_written`)."""
        trim_written([self])

    def took_writes(self) -> bool:
        """Whether a compile or the review store wrote entries since the last trim (and forget it)."""
        material = self.__dict__.get("material")
        wrote = self.compiled or (material is not None and material.wrote)
        self.compiled = False
        if material is not None:
            material.wrote = False
        return wrote

    def select(self, *, arch: list[str] | None = None, kernel: list[str] | None = None) -> tuple[list[Target], list[Cell]]:
        asked = (tuple(arch) if arch is not None else None, tuple(kernel) if kernel is not None else None)
        if asked not in self._selected:
            self._selected[asked] = self._select(arch=arch, kernel=kernel)
        chosen, cells = self._selected[asked]
        return list(chosen), list(cells)

    def _select(self, *, arch: list[str] | None, kernel: list[str] | None) -> tuple[list[Target], list[Cell]]:
        chosen, asked = choose_targets(self.targets, arch, self.specs)
        if kernel:
            names = {s.name for s in self.specs}
            for flt in kernel:
                kpat = flt.partition(":")[0]
                if not any(fnmatch.fnmatchcase(n, kpat) for n in names):
                    near = difflib.get_close_matches(kpat, sorted(names), n=1)
                    raise SpecError(f"no kernel matches {flt!r}", field="--kernel",
                                    fix=f"did you mean {near[0]!r}?" if near else f"kernels: {', '.join(sorted(names))}")
        cells = build_cells(self.specs, chosen, kernel_filters=kernel, asked=asked)
        known = {name: target.backend for name, target in self.targets.items()}
        for cell in cells:
            check_against_targets(cell.expect, known, path=cell.kernel.spec_path, field=cell.field_path)
        return chosen, cells


# The workspaces opened by the command under way (`keeps_cache_bounded`); None outside one.
_OPENED: contextvars.ContextVar[list[Workspace] | None] = contextvars.ContextVar("xisa_opened_workspaces", default=None)


def keeps_cache_bounded(command):
    """An application command that ends with every cache it wrote within its limit, however it ends."""
    @functools.wraps(command)
    def bounded(*args, **kwargs):
        opened: list[Workspace] = []
        token = _OPENED.set(opened)
        try:
            return command(*args, **kwargs)
        finally:
            _OPENED.reset(token)
            trim_written(opened)
    return bounded


def trim_written(opened: list[Workspace]) -> None:
    """Each cache folder that workspaces wrote, trimmed to the smallest limit any of them sets: a compile trims as
    its pool ends (`run_cells`), but the review store's streams, lines and parsed goldens come after it (the
    verdicts, bless), and a gate's base revision compiles into the same folder under its own limit."""
    wrote = [ws.took_writes() for ws in opened]
    if not any(wrote):
        return
    limits: dict[Path, int] = {}
    for ws in opened:
        folder = ws.project.cache_dir
        limits[folder] = min(limits.get(folder, ws.project.cache_limit), ws.project.cache_limit)
    for folder, limit in limits.items():
        with contextlib.suppress(OSError):   # a cache that cannot be trimmed costs disk, never the verdict
            trim_cache(folder, limit)


def open_workspace(*, spec: list[Path] | None = None, golden: Path | None = None, cwd: Path | None = None) -> Workspace:
    project = load_project(cwd=cwd, spec=spec, golden=golden)
    targets = load_targets(list(project.target_dirs), root=project.root)
    files = discover_spec_files(list(project.spec_paths))
    if not files:
        raise SpecError("no kernel specs found", path=", ".join(project.display(p) for p in project.spec_paths),
                        fix="add kernels/<name>.yaml or pass --spec PATH")
    roots = list(project.kernel_roots)
    specs = load_specs(files, root=project.root, pythonpath=project.pythonpath, import_hooks=project.import_hooks,
                       list_configs=config_lister(roots, list(targets.values())))
    return Workspace(project=project, targets=targets, specs=specs)


def validate_scopes(scopes: list[str] | None, ws: Workspace | None = None, *,
                    also: list[tuple[str, str, str]] | tuple = ()) -> None:
    """A bad --scope is refused before anything compiles: its syntax, and (given the workspace) a
    part that matches no known target, kernel or case; `also` adds (kernel, case, target) names that
    only a base revision has."""
    if ws is None:
        for text in scopes or []:
            Scope.parse(text)
        return
    targets = set(ws.targets) | {target for _, _, target in also}
    cases = {spec.name: {case.name for case in spec.cases} for spec in ws.specs}
    for kernel, case, _ in also:
        cases.setdefault(kernel, set()).add(case)
    check_scopes(scopes or [], targets=sorted(targets), cases={k: sorted(v) for k, v in cases.items()})


def check_golden_toolchains(cells: list[Cell], golden_dir: Path, *, display_root: Path, label: str = "",
                            ab_command: str | None = None) -> None:
    """Refuse, before anything compiles, goldens of the selection made with another toolchain than the
    one their cells compile with: no compile could be compared with them (exit 2, one line).

    Triton's version always counts; the AMD codegen revision or ptxas's version counts where both the
    golden and the installed toolchain name one for the cell's backend. Unreadable goldens are left to
    the per-cell verdict, which reports each one."""
    installed_by_backend: dict[str, dict[str, str]] = {}
    mismatched: dict[tuple[str, str, str], list[str]] = {}   # (fact, golden's, installed) -> files
    for cell in cells:
        yaml_path, _ = golden_paths(golden_dir, cell.kernel.name, cell.case, cell.target.name)
        recorded = read_golden_toolchain(yaml_path)
        if recorded is None:
            continue
        shown = label + display_path(yaml_path, display_root)
        backend = cell.target.backend
        if backend not in installed_by_backend:
            installed_by_backend[backend] = describe_toolchain(backends={backend})
        for fact, value in installed_by_backend[backend].items():
            if fact in recorded and str(recorded[fact]) != value:
                mismatched.setdefault((fact, str(recorded[fact]), value), []).append(shown)
    if not mismatched:
        return
    (fact, theirs, ours), files = max(mismatched.items(), key=lambda item: len(item[1]))
    others = len({f for group in mismatched.values() for f in group} - set(files))
    name = {"triton": "Triton", "amd_codegen": "the AMD codegen revision", "ptxas": "ptxas"}.get(fact, fact)
    if label:   # a base revision's goldens: re-blessing this tree cannot change them
        fix = (f"pip install triton=={theirs}, or judge against the base compiled with {ours}: --compile-base"
               if fact == "triton" else "install the Triton build the goldens were made with, or judge against "
                                        "the base compiled with this one: --compile-base")
    elif ab_command:   # an upgrade: the command that shows what it changes, before accepting it
        fix = (f"pip install triton=={theirs}, or re-bless with {ours} and commit the goldens once `{ab_command}` "
               "shows what it changes, cell by cell" if fact == "triton" else
               "install the Triton build the goldens were made with, or re-bless and commit the goldens once "
               f"`{ab_command}` shows what this toolchain changes, cell by cell")
    else:
        fix = (f"pip install triton=={theirs}, or re-bless with {ours} and commit the goldens" if fact == "triton"
               else "install the Triton build the goldens were made with, or re-bless and commit the goldens")
    count = len(files)
    raise ToolchainError(f"{count} golden{'s' if count != 1 else ''} of this selection {'were' if count != 1 else 'was'} "
                         f"made with {name} {theirs} but {ours} is installed"
                         + (f" ({others} more of yet another toolchain)" if others else "")
                         + ": no compile could be compared with them", path=files[0], field="toolchain", fix=fix)


