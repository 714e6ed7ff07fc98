"""`xisa targets`, `xisa kernels`, `xisa cache info`, `xisa cache clear`: what the project holds."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from xisa.api import open_workspace
from xisa.cli.options import ArchOption, SpecOption, stdout
from xisa.compile.incremental.cache import ResultCache
from xisa.golden.verdict import JSON_SCHEMA_VERSION
from xisa.render.formats import fitted_table, show
from xisa.spec.cases import case_targets, choose_targets
from xisa.spec.project import load_project
from xisa.spec.targets import load_targets


def targets(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the known targets (bundled and the project's own targets/)."""
    project = load_project()
    known = load_targets(list(project.target_dirs), root=project.root)
    if as_json:
        typer.echo(json.dumps({"schema": JSON_SCHEMA_VERSION, "kind": "targets",
                               "targets": [known[n].summary() for n in sorted(known)]}, indent=2))
        return
    out = stdout()
    table = Table("target", "backend", "arch", "wave", "family", "fp8", "matrix", "device of", "answers as", "file")
    for name in sorted(known):
        t = known[name]
        table.add_row(name, t.backend, str(t.arch), str(t.warp_size), t.family, t.fp8, t.matrix, t.device_of or "-",
                      t.device.product, t.path)
    out.print(table)
    for backend in sorted({t.backend for t in known.values()}):   # each backend's occupancy tables
        arches = [known[n] for n in sorted(known) if not known[n].device_of]   # a device target's are its arch's
        members = [t for t in arches if t.backend == backend]
        keys = list(dict.fromkeys(key for t in members for key in t.occupancy))
        rows = [[t.name, *(show(t.occupancy.get(key)) for key in keys)] for t in members]
        columns = [("target", "left"), *((key.replace("_", " "), "right") for key in keys)]
        out.print(fitted_table(out, columns, rows, title=f"{backend}: occupancy tables (each target file's "
                                                          f"`occupancy:`; memory in bytes)"))


def kernels(spec: SpecOption = None, arch: ArchOption = None,
            as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List kernels, their cases and the targets each case runs on."""
    ws = open_workspace(spec=spec)
    chosen, asked = choose_targets(ws.targets, arch, ws.specs)
    rows = []
    for kernel_spec in ws.specs:
        for case in kernel_spec.cases:
            rows.append({"kernel": kernel_spec.name, "case": case.name, "spec": kernel_spec.spec_path,
                         "function": kernel_spec.function,
                         "targets": [t.name for t in case_targets(case, chosen, asked)]})
    if as_json:
        typer.echo(json.dumps({"schema": JSON_SCHEMA_VERSION, "kind": "kernels", "kernels": rows}, indent=2))
        return
    table = Table("kernel", "case", "targets", "spec")
    for row in rows:
        table.add_row(row["kernel"], row["case"], " ".join(row["targets"]) or "-", row["spec"])
    out = stdout()
    out.print(table)
    out.print(f"{len(ws.specs)} kernels, {len(rows)} cases, {sum(len(r['targets']) for r in rows)} cells")


def cache_info(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The cache: its size and limit, its entries, and where the last run's cells came from."""
    from xisa.compile.incremental.cache_limit import cache_info as read_info

    project = load_project()
    info = read_info(project.cache_dir, project.cache_limit)
    if as_json:
        typer.echo(json.dumps({"schema": JSON_SCHEMA_VERSION, "kind": "cache", **info.to_json()}, indent=2))
        return
    typer.echo(f"folder: {info.folder}")
    typer.echo(f"size: {_mib(info.size)} of a {_mib(info.limit)} limit ({info.size / info.limit:.0%}; "
               "XISA_CACHE_SIZE or [tool.xisa] cache_size)")
    typer.echo(f"entries: {info.results} results, {info.backend} back-end, {info.front_end} front-end, "
               f"{info.loads} load")
    run = info.last_run
    if run is None or not run.cells:
        typer.echo("last run: none recorded")
        return
    typer.echo(f"last run: {run.cells} cells, hit rate {run.results / run.cells:.0%} ({run.results} from results, "
               f"{run.backend} from the back-end store ({run.front_end} of them without a front-end pass), "
               f"{run.compiled} compiled, "
               f"{run.errors} errors)")


def _mib(size: int) -> str:
    return f"{size / 1024 ** 2:.1f} MiB"


def cache_clear() -> None:
    """Empty xisa's result cache."""
    project = load_project()
    removed = ResultCache(project.cache_dir).clear()
    from xisa.golden.material import MaterialStore

    streams = MaterialStore.in_cache(project.cache_dir).clear()   # compact goldens' review material
    typer.echo(f"removed {removed} cached results and {streams} review streams from {project.cache_dir}")
