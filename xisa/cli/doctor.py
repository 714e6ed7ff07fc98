"""`xisa doctor`: the toolchain, the environment, the GPUs and the goldens' toolchain, with a verdict."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from xisa import api
from xisa.render.doctor import render_doctor_text


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (schema in docs/json-schema.md).")] = False,
) -> None:
    """Check that results made here can be trusted: exit 0 all fine, 2 a refused variable is set or the
    goldens were made with another toolchain."""
    info = api.doctor()
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_doctor_text(info))
        for problem in info["problems"]:
            print(f"xisa: doctor: {problem}", file=sys.stderr)
    raise typer.Exit(info["exit_code"])
