"""`xisa capture -- COMMAND`: specs written from the kernel launches a program of the user's makes."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from xisa.capture_site._xisa_capture_hook import CONFIG_POLICIES, NO_RUN_VARIABLE, POLICY_VARIABLE, RECORDS_VARIABLE
from xisa.errors import UsageError
from xisa.names import display_path
from xisa.spec.project import load_project


@dataclass
class CaptureOutcome:
    """What `capture` wrote: one spec per kernel, the hook's notes, and the command's exit code."""

    written: list[tuple[Path, int]]     # (spec file, its cases)
    notes: list[str]
    command_exit: int

    @property
    def exit_code(self) -> int:
        return self.command_exit


CAPTURE_SITE = Path(__file__).resolve().parent.parent / "capture_site"   # the hook: a sitecustomize on PYTHONPATH




def capture(command: list[str], *, out: Path = Path("captured"), spec_names: list[str] | None = None,
            cwd: Path | None = None, no_run: bool = False, config_policy: str | None = None) -> CaptureOutcome:
    """`xisa capture -- COMMAND`: run COMMAND with the launch hook in every Python process it starts, and write
    the kernel launches it made (one case per specialization) as spec YAML in `out`, one file per kernel.
    An existing file is never replaced, and nothing is written through a link.

    `no_run`: each launch is recorded and returns without compiling or running (the program's outputs are
    garbage). `config_policy` (CONFIG_POLICIES): how an autotuner picks its config; None: it benchmarks where
    the kernels run on a device, and takes the first config after pruning under `no_run` or the interpreter."""
    import shlex
    import shutil
    import subprocess

    from xisa.compile.standins import DTYPES
    from xisa.spec.capture import group_launches, read_records, render_spec

    if not command:
        raise UsageError("no command to run", field="COMMAND", fix="xisa capture -- python -m pytest tests/")
    names = {}
    for item in spec_names or []:
        function, sep, name = item.partition("=")
        if not sep or not function or not name:
            raise UsageError(f"{item!r} is not FUNCTION=NAME", field="--spec-name", fix="e.g. --spec-name gemm_kernel=gemm")
        names[function] = name
    _check_policy(no_run, config_policy)
    cwd = Path(os.path.abspath(cwd or Path.cwd()))
    out = out if out.is_absolute() else cwd / out
    _refuse_link_on_the_way(out, cwd)
    project = load_project(cwd=cwd)
    records_dir = Path(tempfile.mkdtemp(prefix="xisa-capture-"))
    try:
        env = _hook_environment(records_dir, no_run=no_run, config_policy=config_policy)
        try:
            code = subprocess.run(command, cwd=cwd, env=env).returncode
        except (FileNotFoundError, PermissionError) as exc:
            raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}", field="COMMAND",
                             fix="name a program on PATH, e.g. `xisa capture -- python -m pytest`") from None
        records, notes = read_records(records_dir)
    finally:
        shutil.rmtree(records_dir, ignore_errors=True)
    code = 128 - code if code < 0 else code   # killed by a signal: the shell's convention
    kernels = group_launches(records, names=names)
    if not kernels and code == 0:
        raise UsageError("the command made no Triton kernel launch", field="COMMAND",
                         fix="run the program or tests that launch the kernels (a Python started with -E or -I "
                             "ignores PYTHONPATH, which the capture hook needs)")
    paths = [out / f"{kernel.name}.yaml" for kernel in kernels]
    for path in paths:
        if os.path.lexists(path):
            raise UsageError("a spec of that name already exists; capture never replaces a file",
                             path=display_path(path, cwd),
                             fix="remove it, capture into another folder (--out DIR), or rename the kernel "
                                 "(--spec-name FUNCTION=NEW_NAME)")
    option_backends = _option_backends()
    shown = shlex.join(command)
    written = []
    if kernels:
        out.mkdir(parents=True, exist_ok=True)
        _refuse_link_on_the_way(out, cwd)
    for kernel, path in zip(kernels, paths):
        text = render_spec(kernel, spec_dir=out, project_root=project.root, command=shown, dtype_names=set(DTYPES),
                           option_backends=option_backends)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        written.append((path, len(kernel.launches)))
    return CaptureOutcome(written=written, notes=notes, command_exit=code)


def _check_policy(no_run: bool, config_policy: str | None) -> None:
    if config_policy is not None and config_policy not in CONFIG_POLICIES:
        raise UsageError(f"{config_policy!r} is not a config policy", field="--config-policy",
                         fix=f"one of {', '.join(CONFIG_POLICIES)}")
    if no_run and config_policy == "bench":
        raise UsageError("--config-policy bench benchmarks the kernels, and --no-run runs none", field="--config-policy",
                         fix="first, cached or all (or drop --no-run)")


def _hook_environment(records_dir: Path, *, no_run: bool, config_policy: str | None) -> dict[str, str]:
    """The command's environment: the hook first on PYTHONPATH, where to write, and how (the caller's own
    settings of the hook's variables do not leak into the capture)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CAPTURE_SITE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[RECORDS_VARIABLE] = str(records_dir)
    env.pop(NO_RUN_VARIABLE, None)
    env.pop(POLICY_VARIABLE, None)
    if no_run:
        env[NO_RUN_VARIABLE] = "1"
    if config_policy is not None:
        env[POLICY_VARIABLE] = config_policy
    return env


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
