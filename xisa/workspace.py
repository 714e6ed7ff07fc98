"""Load a project's targets and specs and select the cells a command works on."""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from pathlib import Path

from xisa.errors import SpecError, ToolchainError
from xisa.analyze.expect import Failure, check_against_targets, evaluate
from xisa.golden.store import golden_paths, read_golden_toolchain
from xisa.names import display_path
from xisa.spec.project import Project, load_project
from xisa.compile.result import CellResult
from xisa.spec.shard import shard_of
from xisa.spec.cases import Cell, KernelSpec, build_cells, discover_spec_files, load_specs
from xisa.spec.targets import Target, load_targets, select_targets
from xisa.compile.toolchain import describe_toolchain


@dataclass
class Workspace:
    project: Project
    targets: dict[str, Target]
    specs: list[KernelSpec]

    def select(self, *, arch: list[str] | None = None, kernel: list[str] | None = None) -> tuple[list[Target], list[Cell]]:
        chosen = select_targets(self.targets, arch)
        if kernel:
            names = {s.name for s in self.specs}
            for flt in kernel:
                kpat = flt.partition(":")[0]
                if not any(fnmatch.fnmatchcase(n, kpat) for n in names):
                    near = difflib.get_close_matches(kpat, sorted(names), n=1)
                    raise SpecError(f"no kernel matches {flt!r}", field="--kernel",
                                    fix=f"did you mean {near[0]!r}?" if near else f"kernels: {', '.join(sorted(names))}")
        cells = build_cells(self.specs, chosen, kernel_filters=kernel)
        known = {name: target.backend for name, target in self.targets.items()}
        for cell in cells:
            check_against_targets(cell.expect, known, path=cell.kernel.spec_path, field=cell.field_path)
        return chosen, cells


def open_workspace(*, spec: list[Path] | None = None, golden: Path | None = None, cwd: Path | None = None) -> Workspace:
    project = load_project(cwd=cwd, spec=spec, golden=golden)
    targets = load_targets(list(project.target_dirs), root=project.root)
    files = discover_spec_files(list(project.spec_paths))
    if not files:
        raise SpecError("no kernel specs found", path=", ".join(project.display(p) for p in project.spec_paths),
                        fix="add kernels/<name>.yaml or pass --spec PATH")
    specs = load_specs(files, root=project.root)
    return Workspace(project=project, targets=targets, specs=specs)


def expectation_failures(cell: Cell, result: CellResult) -> list[Failure]:
    if not result.ok or result.analysis is None:
        return []
    return evaluate(cell.expect, cell.target.name, result.analysis)


def check_golden_toolchains(cells: list[Cell], golden_dir: Path, *, display_root: Path, label: str = "") -> None:
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
    else:
        fix = (f"pip install triton=={theirs}, or re-bless with {ours} and commit the goldens" if fact == "triton"
               else "install the Triton build the goldens were made with, or re-bless and commit the goldens")
    count = len(files)
    raise ToolchainError(f"{count} golden{'s' if count != 1 else ''} of this selection {'were' if count != 1 else 'was'} "
                         f"made with {name} {theirs} but {ours} is installed"
                         + (f" ({others} more of yet another toolchain)" if others else "")
                         + ": no compile could be compared with them", path=files[0], field="toolchain", fix=fix)

@dataclass
class Run:
    """One compile of a selection: the cells, their results and expectation failures."""

    targets: list[Target]
    cells: list[Cell]
    results: list[CellResult]
    failures: dict[str, list[Failure]]

    @property
    def backends(self) -> set[str]:
        return {t.backend for t in self.targets}

    def toolchains(self) -> dict[str, dict[str, str]]:
        """Per target, the toolchain facts of its backend only: what its golden records."""
        return {t.name: describe_toolchain(backends={t.backend}) for t in self.targets}


def select_cells(ws: Workspace, *, arch: list[str] | None, kernel: list[str] | None,
                 shard: tuple[int, int] | None = None) -> tuple[list[Target], list[Cell]]:
    chosen, cells = ws.select(arch=arch, kernel=kernel)
    if shard is not None:
        index, count = shard
        cells = [c for c in cells if shard_of(c.id, count) == index - 1]
    return chosen, cells


def compile_cells(ws: Workspace, chosen: list[Target], cells: list[Cell], *, options, progress=None) -> Run:
    from xisa.compile.runner import run_cells

    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=ws.project.cache_dir, options=options,
                        progress=progress)
    failures = {cell.id: expectation_failures(cell, result) for cell, result in zip(cells, results)}
    return Run(targets=chosen, cells=cells, results=results, failures=failures)
