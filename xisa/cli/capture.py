"""`xisa capture -- COMMAND`: record the Triton kernel launches of a program or test suite as spec YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from xisa import api
from xisa.api.capture import CONFIG_POLICIES
from xisa.cli.options import stderr
from xisa.names import display_path


def capture(
    command: Annotated[list[str], typer.Argument(help="The command to run, after `--` (e.g. -- python -m pytest tests/).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the spec files (one per kernel; never replaced).")] = Path("captured"),
    spec_name: Annotated[Optional[list[str]], typer.Option("--spec-name", help="FUNCTION=NAME: the spec name of a captured kernel (repeatable).")] = None,
    no_run: Annotated[bool, typer.Option("--no-run", help="Record each launch and return without compiling or running it: the program runs whole with no GPU and no interpreter, but every kernel output is garbage (its own checks may fail).")] = False,
    config_policy: Annotated[Optional[str], typer.Option("--config-policy", help="How an autotuner with several configs picks one (the case's `config:`); default: bench where kernels run on a GPU, first under --no-run and TRITON_INTERPRET=1. " + "; ".join(f"{name}: {what}" for name, what in CONFIG_POLICIES.items()) + ".")] = None,
) -> None:
    """Run COMMAND and write every Triton kernel launch it makes as spec cases, one per specialization."""
    outcome = api.capture(command, out=out, spec_names=spec_name, no_run=no_run, config_policy=config_policy)
    for path, cases in outcome.written:
        typer.echo(f"wrote {display_path(path, Path.cwd())} ({cases} case{'s' if cases != 1 else ''})")
    for note in outcome.notes:
        stderr().print(f"xisa: note: a launch was not recorded: {note}", highlight=False, markup=False)
    if outcome.command_exit:
        stderr().print(f"xisa: note: the command exited with {outcome.command_exit}; the specs hold the launches it "
                       "made before", highlight=False, markup=False)
    if no_run:
        stderr().print("xisa: note: --no-run: no kernel ran, so what they should have written is garbage (a check of "
                       "the program's on them may have failed)", highlight=False, markup=False)
    raise typer.Exit(outcome.exit_code)
