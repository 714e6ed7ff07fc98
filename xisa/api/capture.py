"""`xisa capture -- COMMAND`: specs written from the kernel launches a program of the user's makes."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xisa.api.workspace import keeps_cache_bounded
from xisa.capture_site._xisa_capture_hook import (ANSWER_AS_VARIABLE, CONFIG_POLICIES, IMPORT_HOOKS_VARIABLE,
                                                  NO_RUN_VARIABLE, POLICY_VARIABLE, RECORDS_VARIABLE,
                                                  TARGET_DIRS_VARIABLE)
from xisa.errors import EXIT_UNTRUSTED, UsageError, XisaError
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
    answered_as: tuple[str, ...] = ()   # the targets whose GPUs answered the device queries, one run each
    exits: dict[str, int] = field(default_factory=dict)   # each target's run's exit code (--as)
    ran_on: tuple[str, ...] = ()        # the targets of the GPUs the kernels ran on
    unproven: tuple[str, ...] = ()      # the targets none of whose launches was observed

    @property
    def exit_code(self) -> int:
        """The command's; 2 where it exited 0 and a captured heuristic compiles nowhere (the specs would fail every
        later compile: capture says which, and why, per kernel)."""
        if self.command_exit == 0 and self.specs is not None and self.specs.trial is not None \
                and self.specs.trial.heuristics:
            return EXIT_UNTRUSTED
        return self.command_exit


CAPTURE_SITE = Path(__file__).resolve().parent.parent / "capture_site"   # the hook: a sitecustomize on PYTHONPATH


@keeps_cache_bounded
def capture(command: list[str], *, out: Path = Path("captured"), spec_names: list[str] | None = None,
            cwd: Path | None = None, check: bool = True, targets: list[str] | None = None,
            progress=None, no_run: bool = False, config_policy: str | None = None,
            answer_as: str | list[str] | None = None) -> CaptureOutcome:
    """`xisa capture -- COMMAND`: run COMMAND with the launch hook in every Python process it starts, and write
    the kernel launches it made (one case per specialization) as spec YAML in `out`, one file per kernel.
    An existing spec of the kernel gets the launches none of its cases compiles as new cases, and nothing
    else changes (`xisa.spec.capture_merge`); nothing is written through a link. With `check`, each new case
    is compiled once for `targets` (globs; default all) and a target that refuses it is left out of it.

    `no_run`: each launch is recorded and returns without compiling or running (the program's outputs are
    garbage). `config_policy` (CONFIG_POLICIES): how an autotuner picks its config; None: it benchmarks where
    the kernels run on a device, and takes the first config after pruning under `no_run` or the interpreter.
    `answer_as`: targets (names or globs) whose GPUs answer the program's device queries (`device_answer_targets`):
    the program runs once per target, and the launches are merged (`xisa.spec.capture_targets`)."""
    from xisa.api.capture_specs import without_interpreter, write_captured
    from xisa.api.run import no_progress
    from xisa.compile.launch.standins import DTYPES
    from xisa.spec.capture import group_launches
    from xisa.spec.capture_targets import merge_targets
    from xisa.spec.portable import portable_command

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
    root = Path(os.path.abspath(project.root))
    if not Path(os.path.abspath(out)).is_relative_to(root):   # its `source:` paths would climb out of a project
        raise UsageError(f"{display_path(out, cwd)} is outside the project at {display_path(root, cwd)}: its specs "
                         "name the kernels' files from there, and that project's compile refuses sources outside "
                         "its kernel roots", field="--out", fix="capture into a folder of the project (default "
                                                                "captured/), or run capture from the project the specs belong to")
    from xisa.spec.targets import load_targets, select_targets

    known = load_targets(list(project.target_dirs), root=project.root)
    chosen = select_targets(known, targets) if targets else []   # an unknown target is refused before the command runs
    answering = device_answer_targets(answer_as, no_run=no_run, chosen=[t.name for t in chosen], known=known)
    started_ns = time.time_ns()   # a kernel module written after this was generated by the command
    by_target, sources, notes, exits = _run_per_target(command, answering, cwd=cwd, project=project, no_run=no_run,
                                                       config_policy=config_policy)
    code = next((c for c in exits.values() if c), 0)
    ran_on = _ran_on(by_target, known)
    with without_interpreter():   # Triton is imported here (its options' backends): never under the interpreter
        option_backends = _option_backends()
        records = merge_targets(by_target, target_backends={name: t.backend for name, t in known.items()},
                                option_backends=option_backends)
        kernels = group_launches(records, names=names, started_ns=started_ns)
        _refuse_nothing_recorded(kernels, code, notes)
        if kernels:
            out.mkdir(parents=True, exist_ok=True)
            _refuse_link_on_the_way(out, cwd)
        specs = write_captured(kernels, sources, out=out, project=project,
                               command=portable_command(command, project.root), check=check, patterns=targets,
                               dtype_names=set(DTYPES), option_backends=option_backends,
                               progress=progress or no_progress)
    return CaptureOutcome(written=specs.written, notes=notes, command_exit=code, specs=specs,
                          answered_as=tuple(answering), exits={t: c for t, c in exits.items() if t},
                          ran_on=tuple(ran_on), unproven=tuple(unproven_targets(
                              ran_on=ran_on, answered=answering, known=[t.name for t in select_targets(known, None)])))


def _run_per_target(command: list[str], answering: list[str], **run) -> tuple[dict, dict, list[str], dict]:
    """The command run once per target answering its device queries (in name order, so any order of --as runs and
    merges the same), or once with none: each run's records by target, the kept module texts, the hook's notes
    and each run's exit code."""
    by_target, sources, notes, exits = {}, {}, [], {}
    for target in answering or [None]:
        records, run_notes, run_sources, exits[target] = _run_once(command, answer_as=target, **run)
        by_target[target] = records
        sources.update(run_sources)
        if len(answering) > 1:   # which run said it
            run_notes = [f"as {target}: {note}" for note in run_notes]
        notes += [note for note in run_notes if note not in notes]
    return by_target, sources, notes, exits


def _run_once(command: list[str], *, cwd: Path, project, no_run: bool, config_policy: str | None,
              answer_as: str | None) -> tuple[list[dict], list[str], dict[str, str], int]:
    """One run of the command with the hook: its launch records, the hook's notes, the kept module texts and the
    command's exit code (a signal's as the shell gives it)."""
    import shutil
    import subprocess

    from xisa.spec.capture import read_records, read_sources

    records_dir = Path(tempfile.mkdtemp(prefix="xisa-capture-"))
    try:
        env = _hook_environment(records_dir, no_run=no_run, config_policy=config_policy)
        if answer_as is not None:
            env[ANSWER_AS_VARIABLE] = answer_as
            env[TARGET_DIRS_VARIABLE] = os.pathsep.join(str(d) for d in project.target_dirs)
            # the project's stubs of what a library asks the GPU: the same hooks as its kernel loads, as that target
            env[IMPORT_HOOKS_VARIABLE] = os.pathsep.join(str(hook) for hook in project.import_hooks)
        try:
            code = subprocess.run(command, cwd=cwd, env=env).returncode
        except (FileNotFoundError, PermissionError) as exc:
            raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}", field="COMMAND",
                             fix="name a program on PATH, e.g. `xisa capture -- python -m pytest`") from None
        records, notes = read_records(records_dir)
        sources = read_sources(records_dir)
    finally:
        shutil.rmtree(records_dir, ignore_errors=True)
    return records, notes, sources, 128 - code if code < 0 else code   # killed by a signal: the shell's convention


def _ran_on(by_target: dict, known: dict) -> list[str]:
    """The targets of the GPUs the launches ran on (the hook's `ran_on`: a capture where the kernels run), each
    record's replaced by the target's name (or `backend arch` where no target describes that GPU)."""
    from xisa.device.detect import match_target

    names = set()
    for records in by_target.values():
        for record in records:
            device = record.get("ran_on")
            if isinstance(device, dict) and "arch" in device:
                record["ran_on"] = (match_target(device["arch"], device["backend"], known)
                                    or f"{device['backend']} {device['arch']}")
                names.add(record["ran_on"])
            elif device is not None:
                record["ran_on"] = None
    return sorted(names)


def unproven_targets(*, ran_on: list[str], answered: list[str], known: list[str]) -> list[str]:
    """The targets whose launches the capture did not observe (their values are another target's): all but the GPU
    the kernels ran on, or those that answered a --no-run capture's device queries. None observed: none claimed."""
    observed = set(ran_on) | set(answered)
    return [name for name in known if observed and name not in observed]


def _refuse_nothing_recorded(kernels: list, code: int, notes: list[str]) -> None:
    """A command that exited 0 with no launch recorded: it launched nothing, or xisa refused every launch (why)."""
    if kernels or code != 0:
        return
    if notes:   # it launched, and xisa could record none of its launches
        more = f" ({len(notes) - 1} more refused)" if len(notes) > 1 else ""
        raise UsageError(f"no launch was recorded: {notes[0]}{more}", field="COMMAND",
                         fix="the reason says what to change; a launch xisa cannot compile as the launch did is never "
                             "written as a case")
    raise UsageError("the command made no Triton kernel launch", field="COMMAND",
                     fix="run the program or tests that launch the kernels (a Python started with -E or -I "
                         "ignores PYTHONPATH, which the capture hook needs)")


DEFAULT_ANSWER_TARGET = "sm_90"   # an H200: the GPU `xisa device` and on-device captures run on (targets/sm_90.yaml)


def _has_gpu() -> bool:
    """An NVIDIA or AMD GPU driver on this machine (its device nodes), without importing torch here."""
    return any(os.path.exists(node) for node in ("/dev/nvidiactl", "/dev/kfd"))


def device_answer_targets(answer_as: str | list[str] | None, *, no_run: bool, chosen: list[str],
                          known: dict) -> list[str]:
    """The targets whose GPUs answer the program's device queries, one run of it each, in name order. `--as` names
    them (names or globs); under `--no-run` (no kernel runs, so the machine's own GPU, if any, is not what the cases
    compile for) the one target `--targets` chose, else an H200: a library that builds its configs from the device
    (fla) would otherwise see no GPU and record configs no GPU picks. XISA_CAPTURE_AS in the environment stands for
    `--as`; elsewhere (and under `--no-run` on a machine with a GPU, whose tensors the program still allocates
    there): none, the machine's device answers. Several need --no-run or the interpreter: a launch that runs, runs
    on this machine's GPU, as one target."""
    from xisa.spec.targets import select_targets

    patterns = [answer_as] if isinstance(answer_as, str) else list(answer_as or [])
    if not patterns and os.environ.get(ANSWER_AS_VARIABLE):
        patterns = [os.environ[ANSWER_AS_VARIABLE]]
    if not patterns and no_run and not _has_gpu():
        patterns = [chosen[0] if len(chosen) == 1 else DEFAULT_ANSWER_TARGET]
    try:
        names = [t.name for t in select_targets(known, patterns)] if patterns else []
    except XisaError as exc:
        if len(patterns) == 1 and "," not in patterns[0] and not any(c in patterns[0] for c in "*?["):
            raise UsageError(f"{patterns[0]!r} is not a target of this project", field="--as",
                             fix=f"one of {', '.join(sorted(known))}") from None
        raise UsageError(exc.detail, field="--as", fix=exc.fix) from None
    if len(names) > 1 and not no_run:
        raise UsageError(f"several targets ({', '.join(names)}) answer the device queries only under --no-run: a "
                         "launch that runs, runs on this machine's GPU (or the interpreter), as one target",
                         field="--as", fix="add --no-run, or name one target")
    return names


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
    env.pop(IMPORT_HOOKS_VARIABLE, None)
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
