"""An autotuner's pruning (`prune_configs_by`) as a launch on the cell's target runs it.

`Autotuner.run` (Triton 3.8 runtime/autotuner.py) prunes before it benchmarks, and only when it lists more than one
config: `early_config_prune(configs, nargs, **kwargs)` (which may filter the list or make new configs: gemlite's
pruner yields Configs of its own), then, with a `perf_model`, the `top_k` configs it estimates fastest. The launch
picks among what is left, so a case's config must be one of those, and `config: all` means those. Pruners ask the
device (triton.ops.matmul's and gemlite's read `max_shared_mem`), so pruning runs where the cell's target answers the
device (`xisa.compile.incremental.reads.compiling`, `xisa.compile.gpu.target_driver`), never once for every target.

A case does not say which arguments the launch passed by position (`nargs`) and which by keyword, so the pruner finds
each of the case's values in both: gemlite's reads `nargs['M']` and `kwargs['load_scales_as_block']` of one launch.
"""

from __future__ import annotations

from typing import Any

from xisa.compile.launch.standins import plain
from xisa.errors import BindError


def plain_config(config) -> dict[str, Any]:
    """A Triton Config as the values a launch passes (Config.all_kwargs: its kwargs, then the options it sets)."""
    return {name: plain(value) for name, value in config.all_kwargs().items()}


def same_config(one, other) -> bool:
    """Equal as Triton's Config.__eq__ has it: the same values and the same pre_hook."""
    return one.all_kwargs() == other.all_kwargs() and one.pre_hook is other.pre_hook


def listed_index(tuner, config) -> int | None:
    """Where `config` is in the autotuner's own list (the first equal one), or None: the pruner made it."""
    configs = list(tuner.configs)
    found = next((i for i, listed in enumerate(configs) if listed is config), None)
    if found is None:
        found = next((i for i, listed in enumerate(configs) if same_config(listed, config)), None)
    return found


def describe_kept(tuner, kept: list, position: int) -> str:
    """`config 2 {...}` for a listed config, `pruned config 0 {...}` (its place in the pruner's answer) for one the
    pruner made."""
    config = kept[position]
    index = listed_index(tuner, config)
    return describe_config(f"config {index}" if index is not None else f"pruned config {position}", config)


def describe_config(label: str, config) -> str:
    """`LABEL {BLOCK: 64, num_warps: 4, ...}`: a config as errors and results name it."""
    return f"{label} {{{', '.join(f'{k}: {v}' for k, v in plain_config(config).items())}}}"


def prunes(tuner) -> bool:
    """Whether a launch's choice can be narrower than the autotuner's list."""
    from triton.runtime.autotuner import Autotuner

    overridden = type(tuner).prune_configs is not Autotuner.prune_configs
    return len(tuner.configs) > 1 and bool(tuner.early_config_prune or tuner.perf_model or overridden)


def kept_configs(tuner, launch: dict[str, Any], *, path: str, field: str) -> list:
    """The configs a launch with `launch` (the values the autotuner is called with: the case's arguments, stand-ins
    for tensors) is left to choose from after the autotuner's pruning, in the pruner's order. Run it where the
    cell's target answers the device. A pruner's failure is one line naming it; a device query the target cannot
    answer stays the UnansweredDeviceQuery it is (the answering context reports it)."""
    from triton.runtime.autotuner import Autotuner

    configs = list(tuner.configs)
    if not prunes(tuner):
        return configs
    set_by_configs = {name for config in configs for name in config.all_kwargs()}
    values = {name: value for name, value in launch.items() if name not in set_by_configs}
    try:
        if type(tuner).prune_configs is not Autotuner.prune_configs:   # a subclass's own pruning (its run calls it)
            tuner.nargs = dict(values)
            try:
                kept = list(tuner.prune_configs(dict(values)))
            finally:
                tuner.nargs = None
        else:
            kept = _pruned_as_autotuner(tuner, configs, values)
    except Exception as exc:
        raise BindError(f"the autotuner's pruning raised {type(exc).__name__}: {exc}".splitlines()[0], path=path,
                        field=field, fix="give the case the arguments the pruner reads (tensors answer shape, dtype, "
                                         "stride(), element_size())") from None
    if not kept:
        raise BindError("the autotuner's pruning kept no config for this case's arguments", path=path, field=field,
                        fix="a launch fails the same way (Triton: 'No valid autotuner configs after pruning'): give "
                            "the launch's arguments, or fix the pruner")
    return kept


def _pruned_as_autotuner(tuner, configs: list, values: dict[str, Any]) -> list:
    """Autotuner.prune_configs (Triton 3.8), the values given both by name and by keyword (the module docstring)."""
    kept = configs
    if tuner.early_config_prune:
        kept = list(tuner.early_config_prune(configs, dict(values), **values))
        if not kept:
            return []
    if tuner.perf_model:
        top_k = tuner.configs_top_k
        if isinstance(top_k, float) and top_k <= 1.0:
            top_k = int(len(configs) * top_k)
        elif not isinstance(top_k, int):
            raise TypeError("Error while pruning configs, top_k must be either 1) a float <= 1.0 or 2) an int")
        if len(kept) > top_k:
            timing = {config: tuner.perf_model(**{**values, **config.all_kwargs()}) for config in kept}
            kept = sorted(timing, key=lambda config: timing[config])[:top_k]
    return kept
