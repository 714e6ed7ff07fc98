"""`xisa capture -- COMMAND`: specs written from the kernel launches a program of the user's makes."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xisa.errors import UsageError
from xisa.names import display_path
from xisa.spec.project import load_project

if TYPE_CHECKING:
    from xisa.api.capture_specs import WrittenSpecs


@dataclass
class CaptureOutcome:
    """What `capture` wrote: one spec per kernel, the hook's notes, and the command's exit code; `specs` says
    which files were new, updated or unchanged, the kept sources and what the compile of the new cases found."""

    written: list[tuple[Path, int]]     # (spec file, its cases)
    notes: list[str]
    command_exit: int
    specs: "WrittenSpecs | None" = None

    @property
    def exit_code(self) -> int:
        return self.command_exit


CAPTURE_SITE = Path(__file__).resolve().parent.parent / "capture_site"   # the hook: a sitecustomize on PYTHONPATH


def capture(command: list[str], *, out: Path = Path("captured"), spec_names: list[str] | None = None,
            cwd: Path | None = None, check: bool = True, targets: list[str] | None = None,
            progress=None) -> CaptureOutcome:
    """`xisa capture -- COMMAND`: run COMMAND with the launch hook in every Python process it starts, and write
    the kernel launches it made (one case per specialization) as spec YAML in `out`, one file per kernel.
    An existing spec of the kernel gets the launches none of its cases compiles as new cases, and nothing
    else changes (`xisa.spec.capture_merge`); nothing is written through a link. With `check`, each new case
    is compiled once for `targets` (globs; default all) and a target that refuses it is left out of it."""
    import shutil
    import subprocess

    from xisa.api.capture_specs import without_interpreter, write_captured
    from xisa.api.run import no_progress
    from xisa.compile.standins import DTYPES
    from xisa.spec.capture import group_launches, read_records, read_sources
    from xisa.spec.portable import portable_command

    if not command:
        raise UsageError("no command to run", field="COMMAND", fix="xisa capture -- python -m pytest tests/")
    names = {}
    for item in spec_names or []:
        function, sep, name = item.partition("=")
        if not sep or not function or not name:
            raise UsageError(f"{item!r} is not FUNCTION=NAME", field="--spec-name", fix="e.g. --spec-name gemm_kernel=gemm")
        names[function] = name
    cwd = Path(os.path.abspath(cwd or Path.cwd()))
    out = out if out.is_absolute() else cwd / out
    _refuse_link_on_the_way(out, cwd)
    project = load_project(cwd=cwd)
    if targets:   # an unknown target is refused before the command runs
        from xisa.spec.targets import load_targets, select_targets

        select_targets(load_targets(list(project.target_dirs), root=project.root), targets)
    records_dir = Path(tempfile.mkdtemp(prefix="xisa-capture-"))
    try:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(CAPTURE_SITE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["XISA_CAPTURE_RECORDS"] = str(records_dir)
        try:
            code = subprocess.run(command, cwd=cwd, env=env).returncode
        except (FileNotFoundError, PermissionError) as exc:
            raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}", field="COMMAND",
                             fix="name a program on PATH, e.g. `xisa capture -- python -m pytest`") from None
        records, notes = read_records(records_dir)
        sources = read_sources(records_dir)
    finally:
        shutil.rmtree(records_dir, ignore_errors=True)
    code = 128 - code if code < 0 else code   # killed by a signal: the shell's convention
    kernels = group_launches(records, names=names)
    if not kernels and code == 0:
        raise UsageError("the command made no Triton kernel launch", field="COMMAND",
                         fix="run the program or tests that launch the kernels (a Python started with -E or -I "
                             "ignores PYTHONPATH, which the capture hook needs)")
    if kernels:
        out.mkdir(parents=True, exist_ok=True)
        _refuse_link_on_the_way(out, cwd)
    with without_interpreter():
        specs = write_captured(kernels, sources, out=out, project=project,
                               command=portable_command(command, project.root), check=check, patterns=targets,
                               dtype_names=set(DTYPES), option_backends=_option_backends(), progress=progress or no_progress)
    return CaptureOutcome(written=specs.written, notes=notes, command_exit=code, specs=specs)


def _refuse_link_on_the_way(folder: Path, cwd: Path) -> None:
    """`folder` and each of its existing parents below the working folder must not be a link."""
    for path in (folder, *folder.parents):
        if path == cwd or (path != folder and not path.is_relative_to(cwd)):
            break
        if os.path.islink(path):
            raise UsageError(f"is a link (to {os.readlink(path)}): capture never writes through a link",
                             path=display_path(path, cwd), fix="pass --out a real folder")


def _option_backends() -> dict[str, set[str]]:
    """Launch option -> the backends (`hip`, `cuda`) whose options dataclass has it."""
    import dataclasses as dc

    from triton.backends.amd.compiler import HIPOptions
    from triton.backends.nvidia.compiler import CUDAOptions

    owners: dict[str, set[str]] = {}
    for backend, options in (("hip", HIPOptions), ("cuda", CUDAOptions)):
        for option in dc.fields(options):
            owners.setdefault(option.name, set()).add(backend)
    return owners
