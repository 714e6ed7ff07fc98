"""What `config: all` expands to on each target: the configs a launch there could pick, after the autotuner's
pruning run as that target (`xisa.compile.launch.prune`), for the spec reader (`xisa.spec.cases.ConfigLister`).

It runs in the process that reads the specs, before any compile: an autotuner that prunes nothing is read from one
load for no particular target; one that prunes is loaded and pruned per target, on each target's stand-ins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from xisa.compile.gpu.import_hooks import hooks_entered
from xisa.compile.launch.autotune import autotuner_of, not_autotuned
from xisa.compile.launch.bind import configs_kept_for
from xisa.compile.launch.loader import load_kernel_object, unwrap_kernel
from xisa.compile.launch.prune import listed_index, plain_config, prunes
from xisa.compile.incremental.reads import compiling
from xisa.compile.launch.warm import import_compile_modules
from xisa.spec.cases import Cell, KernelSpec
from xisa.spec.targets import Target


def config_lister(roots: list[Path], targets: list[Target]):
    """What `config: all` expands to on each of `targets` (`xisa.spec.cases.ConfigLister`), for the spec reader."""
    def listed(spec: KernelSpec, field: str, cells_on) -> dict[str | None, list]:
        import_compile_modules()   # as before a compile: torch first imported inside a load breaks (email.parser)
        return kept_per_target(spec, field, cells_on(targets), roots=roots)
    return listed


def kept_per_target(spec: KernelSpec, field: str, cells: list[Cell], *, roots: list[Path]) -> dict[str | None, list]:
    """The configs each cell's target keeps for its arguments, [(index in the autotuner's list or None, values)];
    {None: every config} when the autotuner prunes nothing (one load for no particular target, as before). An
    autotuner that prunes runs its pruner as each target, with each target's load (this imports the kernel module)."""
    tuner = autotuner_of(unwrap_kernel(load_kernel_object(spec, roots=roots), spec)[1], spec, field)
    if tuner is None:
        raise not_autotuned(spec, field)
    if not prunes(tuner):
        return {None: [(index, plain_config(config)) for index, config in enumerate(tuner.configs)]}
    kept = {}
    for cell in cells:
        cell = dataclasses.replace(cell, kernel=spec)   # the spec as loaded (the project's pythonpath, import hooks)
        named = load_kernel_object(spec, roots=roots, target=cell.target)
        with compiling(spec, cell.target), hooks_entered(spec, cell.target):   # the device answers as this target
            tuner, configs = configs_kept_for(cell, named)
        kept[cell.target.name] = [(listed_index(tuner, config), plain_config(config)) for config in configs]
    return kept
