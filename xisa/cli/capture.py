"""`xisa capture -- COMMAND`: record the Triton kernel launches of a program or test suite as spec YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.api.capture import CONFIG_POLICIES
from xisa.cli.options import stderr
from xisa.names import display_path
from xisa.render.progress import heartbeat, progress_reporter


def capture(
    command: Annotated[list[str], typer.Argument(help="The command to run, after `--` (e.g. -- python -m pytest tests/).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the spec files (one per kernel; an existing one gets the new launches as cases, nothing else changes).")] = Path("captured"),
    spec_name: Annotated[Optional[list[str]], typer.Option("--spec-name", help="FUNCTION=NAME: the spec name of a captured kernel (repeatable).")] = None,
    targets: Annotated[Optional[list[str]], typer.Option("--targets", help="Compile each new case once for these targets (globs, repeatable; default: all) and leave out of it those that refuse it.")] = None,
    no_check: Annotated[bool, typer.Option("--no-check", help="Do not compile the new cases: write them for every target.")] = False,
    no_run: Annotated[bool, typer.Option("--no-run", help="Record each launch and return without compiling or running it: the program runs whole with no GPU and no interpreter, but every kernel output is garbage (its own checks may fail).")] = False,
    answer_as: Annotated[Optional[list[str]], typer.Option("--as", help="Answer the program's device queries (torch.cuda, Triton's driver, torch.version) as this target's GPU, from its target file (a name or glob, repeatable: with --no-run the program runs once per target, and each case holds what each target's launch binds); default under --no-run on a machine without a GPU: the one target --targets names, else sm_90 (an H200).")] = None,
    config_policy: Annotated[Optional[str], typer.Option("--config-policy", help="How an autotuner with several configs picks one (the case's `config:`); default: bench where kernels run on a GPU, first under --no-run and TRITON_INTERPRET=1. " + "; ".join(f"{name}: {what}" for name, what in CONFIG_POLICIES.items()) + ".")] = None,
) -> None:
    """Run COMMAND and write every Triton kernel launch it makes as spec cases, one per specialization."""
    with heartbeat("capture: the command (then the new cases' compile) is running"):   # a quiet program in a CI log
        outcome = api.capture(command, out=out, spec_names=spec_name, check=not no_check, targets=targets,
                              progress=progress_reporter, no_run=no_run, config_policy=config_policy,
                              answer_as=answer_as)
    cwd = Path.cwd()
    for path, cases in outcome.written:
        typer.echo(f"wrote {display_path(path, cwd)} ({cases} case{'s' if cases != 1 else ''})")
    specs = outcome.specs
    if specs is not None:
        for path, cases in specs.updated:
            typer.echo(f"updated {display_path(path, cwd)} ({cases} new case{'s' if cases != 1 else ''} appended)")
        for path in specs.unchanged:
            typer.echo(f"unchanged {display_path(path, cwd)} (its cases compile every launch)")
        for path, action in specs.kept:
            if action in ("write", "refresh"):
                again = " again" if action == "refresh" else ""
                typer.echo(f"kept {display_path(path, cwd)} (the generated module's text, written{again})")
        _print_trial(specs.trial)
        for note in specs.notes:
            stderr().print(f"xisa: note: {note}", highlight=False, markup=False)
    for note in outcome.notes:
        stderr().print(f"xisa: note: a launch was not recorded: {note}", highlight=False, markup=False)
    if outcome.command_exit:
        stderr().print(f"xisa: note: the command exited with {outcome.command_exit}; the specs hold the launches it "
                       "made before", highlight=False, markup=False)
    if no_run:
        stderr().print("xisa: note: --no-run: no kernel ran, so what they should have written is garbage (a check of "
                       "the program's on them may have failed)", highlight=False, markup=False)
    _print_targets(outcome)
    raise typer.Exit(outcome.exit_code)


def _print_targets(outcome) -> None:
    """Which GPUs the launches are those of, and the targets whose own launches nobody observed."""
    err, answered = stderr(), outcome.answered_as
    if len(answered) == 1:
        err.print(f"xisa: note: the program's device queries were answered as {answered[0]}'s GPU (--as "
                  "TARGET for another)", highlight=False, markup=False)
    elif answered:
        exits = ", ".join(f"{target}: {code}" for target, code in outcome.exits.items())
        err.print(f"xisa: note: the program ran once per target, its device queries answered as each of "
                  f"{', '.join(answered)} (exit codes {exits}); each case holds what those targets' launches bind",
                  highlight=False, markup=False)
    if outcome.ran_on:
        err.print(f"xisa: note: the launches ran on {', '.join(outcome.ran_on)}'s GPU: the cases hold what it bound",
                  highlight=False, markup=False)
    if outcome.unproven:
        observed = ", ".join(outcome.ran_on or answered)
        err.print(f"xisa: note: unproven on {', '.join(outcome.unproven)}: their cases compile what {observed} bound, "
                  "and their own GPUs may bind other values (device-derived constexprs, launch options, configs); "
                  "`xisa capture --no-run --as TARGET ...` records theirs", highlight=False, markup=False)


def _print_trial(trial) -> None:
    if trial is None:
        return
    err = stderr()
    if trial.not_run:
        err.print(f"xisa: warning: the new cases were not compiled: {trial.not_run}", highlight=False, markup=False)
        return
    err.print(f"xisa: compiled the new cases once for {len(trial.targets)} target{'s' if len(trial.targets) != 1 else ''}: "
              f"{trial.cells} cells, {trial.ok} ok, {trial.left_cells} left out, in {trial.seconds:.1f} s "
              "(--no-check skips this; the results stay in xisa's cache)", highlight=False, markup=False)
    for line in trial.left_out:
        err.print(f"xisa: left out {line}", highlight=False, markup=False)
    for line in trial.nowhere:
        err.print(f"xisa: warning: no target compiles {line}", highlight=False, markup=False)
    for line in trial.heuristics:
        err.print(f"xisa: error: {line}", highlight=False, markup=False)
    for line in trial.not_loaded:
        err.print(f"xisa: warning: not compiled, the spec does not load: {line}", highlight=False, markup=False)
