"""`xisa export`: the selected cells as the Triton cache entries a launch on their GPUs looks up, and `--verify`.

An export judges the selection against its goldens first (the cells' verdicts go into the manifest; goldens made
with another Triton are not judged, and the manifest says so), then compiles each cell once more as a default
launch does (`xisa.compile.export.launch_cache`) in forked workers writing into a folder of the bundle, points each
entry's group file at the folder a deploying machine will use (`deploy_dir`), moves the entries into place and
writes `manifest.json` last. An interrupted export leaves no manifest, so it never looks complete.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import tarfile
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.api.selection import Selection
from xisa.api.workspace import check_golden_toolchains, keeps_cache_bounded
from xisa.compile.export.bundle import (KIND, MANIFEST, PARTIAL_PREFIX, SCHEMA, BundleError, bundle_problems,
                                 read_manifest, write_manifest)
from xisa.compile.runner import RunOptions
from xisa.compile.worker.toolchain import (PINNED_ENV, check_environment, check_supported, check_triton_environment,
                                    describe_toolchain, triton_version)
from xisa.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNTRUSTED, UsageError, XisaError

NOT_JUDGED = "not-judged"   # a cell's `golden` when the check did not run (goldens of another toolchain)


@dataclass
class ExportOutcome:
    output: Path                      # the bundle's folder, or the archive with --tar
    manifest: dict[str, Any]
    errors: list[str] = field(default_factory=list)    # cells that did not compile, one line each
    notes: list[str] = field(default_factory=list)     # what the user must know (a check not green or not run)

    @property
    def exit_code(self) -> int:
        if self.errors or self.manifest["check"]["status"] == "untrusted":
            return EXIT_UNTRUSTED
        return EXIT_REGRESSION if self.manifest["check"]["status"] == "not green" else EXIT_OK


@keeps_cache_bounded
def export(selection: Selection, *, output: Path, deploy_dir: Path | None = None, tar: bool = False,
           options: RunOptions = RunOptions()) -> ExportOutcome:
    """Write the selection's cells as Triton cache entries under `output` (a folder; with `tar`, an archive),
    their group files naming `deploy_dir` (default: `output` itself) as the deploying machine's TRITON_CACHE_DIR."""
    check_environment()
    check_supported(triton_version())
    check_triton_environment()
    final_dir, deploy = _destinations(output, deploy_dir, tar)
    ws = selection.workspace()
    chosen, cells = selection.cells(ws)
    selection.require_cells(ws, cells)
    if not cells:
        raise UsageError("selects no cell", field="--arch/--kernel", fix="see `xisa kernels` for the cells")
    check, verdicts = _judge(selection, ws, cells, options)
    stage = _make_stage(output, tar)
    try:
        facts, entries, errors = _compile_entries(cells, roots=list(ws.project.kernel_roots),
                                                  triton_cache=stage / "triton", jobs=options.jobs)
        from xisa.compile.export.launch_cache import relocate_group

        for entry in {e["folder"]: e for e in entries}.values():
            group = stage / "triton" / entry["folder"] / entry["group_file"]
            group.write_text(relocate_group(group.read_text(encoding="utf-8"), stage / "triton", deploy),
                             encoding="utf-8")
        manifest = _manifest(entries, verdicts, check, facts, deploy, {t.backend for t in chosen})
        manifest["errors"] = errors   # the selected cells that are not in the bundle, and why
        if tar:
            _write_archive(output, stage / "triton", manifest)
        else:
            for folder in sorted({e["folder"] for e in entries}):
                os.rename(stage / "triton" / folder, final_dir / folder)
            write_manifest(final_dir, manifest)   # last: a bundle without it is no bundle
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    notes = [] if check["status"] == "green" else [f"the selection's check: {check['status']} ({check['reason']})"]
    return ExportOutcome(output=output, manifest=manifest, errors=errors, notes=notes)


def _destinations(output: Path, deploy_dir: Path | None, tar: bool) -> tuple[Path, Path]:
    """Where the bundle goes and which TRITON_CACHE_DIR its groups name; refuses a place that holds anything."""
    if deploy_dir is not None and not deploy_dir.is_absolute():
        raise UsageError(f"{deploy_dir} is relative: Triton's group files name their files by absolute path",
                         field="--deploy-dir", fix="give the deploying machine's TRITON_CACHE_DIR as an absolute path")
    if tar:
        if not output.name.endswith((".tar", ".tar.gz", ".tgz")):
            raise UsageError("an archive's name ends in .tar, .tar.gz or .tgz", path=str(output), field="-o",
                             fix="e.g. -o bundle-sm_90.tar.gz")
        if deploy_dir is None:
            raise UsageError("an archive is unpacked elsewhere: its entries must name the folder it is unpacked into",
                             field="--deploy-dir", fix="add --deploy-dir /the/TRITON_CACHE_DIR/of/the/deploying/machine")
        if output.exists() or output.is_symlink():
            raise UsageError("exists already", path=str(output), field="-o", fix="remove it or name another archive")
        final = output.parent
    else:
        if output.is_symlink() or (output.exists() and (not output.is_dir() or any(output.iterdir()))):
            raise UsageError("is not an empty folder: a bundle is written into a folder of its own", path=str(output),
                             field="-o", fix="remove it or name a new folder")
        final = output
    deploy = Path(os.path.abspath(deploy_dir if deploy_dir is not None else output))
    return final, deploy


def _make_stage(output: Path, tar: bool) -> Path:
    parent = output.parent if tar else output
    parent.mkdir(parents=True, exist_ok=True)
    stage = parent / f"{PARTIAL_PREFIX}{output.name if tar else ''}{os.getpid()}"
    (stage / "triton").mkdir(parents=True)
    return stage


def _judge(selection: Selection, ws, cells, options: RunOptions) -> tuple[dict[str, Any], dict[str, tuple]]:
    """The check's status for the manifest and each cell's verdict with the fingerprint its check compiled: `xisa
    check` of the same selection, or, where its goldens are another toolchain's, no verdict and the reason."""
    from xisa.api.check import check

    try:
        check_golden_toolchains(cells, ws.project.golden_dir, display_root=ws.project.root)
    except XisaError as exc:
        return {"status": "not run", "reason": exc.detail, "exit_code": None}, {c.id: (NOT_JUDGED, None) for c in cells}
    outcome = check(dataclasses.replace(selection, scope=None, shard=None, timings=None), options=options)
    verdicts = {v.id: (str(v.verdict), v.head.analysis.code_sha256 if v.head is not None and v.head.analysis else None)
                for v in outcome.report.verdicts}
    status = {EXIT_OK: "green", EXIT_REGRESSION: "not green"}.get(outcome.exit_code, "untrusted")
    counts = ", ".join(f"{name}: {count}" for name, count in outcome.report.counts().items())
    return {"status": status, "reason": counts, "exit_code": outcome.exit_code}, verdicts


# Set before the workers fork: they inherit the cells and where to compile, nothing is pickled.
_CELLS: list = []
_ROOTS: list[Path] = []


def _worker_start(triton_cache: str) -> None:
    from xisa.compile.export.launch_cache import prepare_launch_process

    prepare_launch_process(Path(triton_cache))


def _worker_facts() -> dict[str, Any]:
    from xisa.compile.export.launch_cache import toolchain_facts

    return toolchain_facts()


def _worker_cell(index: int, triton_cache: str) -> dict[str, Any] | str:
    from xisa.compile.export.launch_cache import export_cell

    try:
        return export_cell(_CELLS[index], roots=_ROOTS, triton_cache=Path(triton_cache))
    except XisaError as exc:
        return str(exc)
    except Exception as exc:   # Triton's own failure, whole (a CompilationError points at its source line)
        return "\n".join(line.rstrip() for line in f"{type(exc).__name__}: {exc}".strip().splitlines())


def _compile_entries(cells, *, roots: list[Path], triton_cache: Path, jobs: int):
    """Each cell compiled as its launch does into `triton_cache`: the toolchain's facts, the entries, the errors."""
    from xisa.compile.runner import available_cores

    global _CELLS, _ROOTS
    _CELLS, _ROOTS = cells, roots
    workers = max(1, min(jobs or available_cores(), len(cells)))
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start, initargs=(str(triton_cache),))
    try:
        facts = pool.submit(_worker_facts)
        futures = [pool.submit(_worker_cell, index, str(triton_cache)) for index in range(len(cells))]
        entries, errors = [], []
        for cell, future in zip(cells, futures):
            try:
                answer = future.result()
            except BrokenProcessPool:   # a compile killed its worker (and the pool): the cells left are errors
                answer = "the compiler process died compiling this cell or one beside it"
            if isinstance(answer, str):
                errors.append(f"{cell.id}: {answer}")
            else:
                entries.append({"id": cell.id, "kernel": cell.kernel.name, "case": cell.case,
                                "target": cell.target.name, **answer})
        try:
            return facts.result(), entries, errors
        except BrokenProcessPool:
            raise XisaError("the export's compiler processes died before they could say which Triton they ran",
                            fix="run it again with -j 1 to see the cell") from None
    except BaseException:   # interrupted (Ctrl-C, SIGTERM): no compile left is worth waiting for
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)


def _manifest(entries, verdicts, check, facts, deploy: Path, backends: set[str]) -> dict[str, Any]:
    listed = []
    for entry in entries:
        verdict, checked = verdicts.get(entry["id"], (NOT_JUDGED, None))
        listed.append({**{k: v for k, v in entry.items() if k != "id"}, "golden": verdict,
                       # the entry's code is the code the check judged (None: no check compiled it)
                       "checked_code": None if checked is None else checked == entry["fingerprint"]})
    toolchain = {**describe_toolchain(backends=backends), **facts,
                 "pinned_knobs": {name: value for name, value in sorted(PINNED_ENV.items())}}
    return {"schema": SCHEMA, "kind": KIND, "deploy_dir": str(deploy), "toolchain": toolchain, "check": check,
            "cells": listed}


def _write_archive(output: Path, entries: Path, manifest: dict[str, Any]) -> None:
    """One archive: the entries, then manifest.json; written beside `output` and renamed onto it when whole."""
    import io
    import json

    partial = output.with_name(f"{PARTIAL_PREFIX}{output.name}")
    mode = "w:gz" if output.name.endswith(("gz", ".tgz")) else "w"
    try:
        with tarfile.open(partial, mode) as archive:
            for folder in sorted(p for p in entries.iterdir() if p.is_dir()):
                for path in sorted(folder.iterdir()):
                    archive.add(path, arcname=f"{folder.name}/{path.name}", recursive=False)
            data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


# --- --verify ----------------------------------------------------------------------------------------

@dataclass
class VerifyOutcome:
    folder: Path
    manifest: dict[str, Any]
    cells: list[dict[str, Any]]       # each: kernel, case, target, found (bool), reason ('' when found)
    toolchain: dict[str, str]         # this machine's: triton, triton_key_sha256, python

    @property
    def found(self) -> int:
        return sum(1 for cell in self.cells if cell["found"])

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.found else EXIT_REGRESSION


def verify(folder: Path) -> VerifyOutcome:
    """Whether this machine's Triton, in this process's environment, looks each cell of the bundle in `folder` up
    under its key and finds its entry there. BundleError (exit 2) for a bundle that is not whole."""
    import sys

    from xisa.compile.export.launch_cache import finds_group, launch_key

    folder = Path(os.path.abspath(folder))   # Triton's group names absolute paths
    manifest = read_manifest(folder)
    problems = bundle_problems(folder, manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BundleError(f"{problems[0]}{more}", path=str(folder), fix="export the bundle again")
    theirs = manifest["toolchain"]
    results = []
    for cell in manifest["cells"]:
        try:
            here = launch_key(cell)
        except Exception as exc:   # a target this Triton has no backend or options for
            results.append({"kernel": cell["kernel"], "case": cell["case"], "target": cell["target"], "found": False,
                            "key": cell["key"], "key_here": None,
                            "reason": f"this Triton makes no key for it: {type(exc).__name__}: {exc}".splitlines()[0]})
            continue
        found = here["key"] == cell["key"] and finds_group(folder, cell["folder"], cell["group_file"])
        results.append({"kernel": cell["kernel"], "case": cell["case"], "target": cell["target"], "found": found,
                        "key": cell["key"], "key_here": here["key"],
                        "reason": "" if found else _miss_reason(cell, here, theirs, folder, manifest)})
    mine = {"triton": triton_version(), "triton_key_sha256": launch_key_sha(), "python": sys.version.split()[0]}
    return VerifyOutcome(folder=folder, manifest=manifest, cells=results, toolchain=mine)


def launch_key_sha() -> str:
    import hashlib

    from triton.runtime.cache import triton_key

    return hashlib.sha256(triton_key().encode()).hexdigest()


def _miss_reason(cell, here, theirs, folder: Path, manifest) -> str:
    """Which part of Triton's key differs here, or why the entry is not found under the right key."""
    if here["triton_key_sha256"] != theirs.get("triton_key_sha256"):
        python = theirs.get("python", {})
        return (f"another Triton build or Python: this one is Triton {triton_version()}, the bundle's Triton "
                f"{theirs.get('triton')} on Python {python.get('version')} ({python.get('ext_suffix')})")
    if here["env"] != cell.get("env"):
        return f"the cache-invalidating variables set here are {here['env']}, the bundle's {cell.get('env')}"
    if here["backend_hash"] != cell.get("backend_hash"):
        return f"the backend's hash here is {here['backend_hash']!r}, the bundle's {cell.get('backend_hash')!r} (ptxas)"
    if here["options_hash"] != cell.get("options_hash"):
        return ("the options parse otherwise here (a knob such as PTXAS_OPTIONS, or on AMD Triton installed in another "
                f"folder than {theirs.get('triton_dir')})")
    if here["key"] != cell["key"]:
        return "the key differs here"
    return (f"the key holds, but its group names files under {manifest['deploy_dir']}: put the bundle there and set "
            f"TRITON_CACHE_DIR to it, or export again with --deploy-dir {os.path.abspath(folder)}")
