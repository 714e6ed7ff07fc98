"""A launch's values as a captured spec writes them: its arguments as stand-ins' facts, constexprs, an autotune
config as the spec's `config:` (`sitecustomize._Recorder` calls these in the captured program; they import
nothing, so the program's own imports are untouched)."""

def _config(config, configs, kept=lambda: []) -> dict:
    """An autotune Config as the spec's `config:` holds it: its kwargs, num_warps and num_stages, and num_ctas,
    maxnreg only when not their defaults (1, None) or when another config it could be differs only in them. xisa
    compiles the configs listed or made by the pruning for this launch (`kept()`: gemlite's makes new ones), so one
    that is neither is refused here (a launch not recorded, noted) rather than written as a case its compile refuses."""
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if getattr(config, "num_ctas", 1) not in (1, None):
        options["num_ctas"] = config.num_ctas
    if getattr(config, "maxnreg", None) is not None:
        options["maxnreg"] = config.maxnreg
    if getattr(config, "ir_override", None) is not None:
        options["ir_override"] = _plain(config.ir_override)
    chosen = {"kwargs": {k: _constexpr(v) for k, v in config.kwargs.items()}, "options": options}
    candidates = configs if _configs_matching({**chosen["kwargs"], **options}, configs) else list(kept())
    matching = _configs_matching({**chosen["kwargs"], **options}, candidates)
    if len(matching) > 1:
        options.update(num_ctas=getattr(config, "num_ctas", 1), maxnreg=getattr(config, "maxnreg", None))
        matching = _configs_matching({**chosen["kwargs"], **options}, candidates)
    if not matching:
        pruned = candidates and list(map(id, candidates)) != list(map(id, configs))
        made = f" nor of the {len(candidates)} its pruning kept for this launch" if pruned else ""
        raise ValueError(f"the autotuner launched a config that is none of its {len(configs)} configs{made} ({config}): "
                         "a library's own config cache chose it (fla's FLA_CACHE_MODE); capture with that cache off "
                         "or --config-policy first")
    if any(other.all_kwargs() != matching[0].all_kwargs() or other.pre_hook is not matching[0].pre_hook
           for other in matching[1:]):
        raise ValueError(f"{len(matching)} of the autotuner's configs have the values {config} and differ in their "
                         "pre_hook: a case cannot name one")
    return chosen


def _same(given, value) -> bool:
    """Equal as a spec writes them: True is not 1."""
    return isinstance(given, bool) == isinstance(value, bool) and given == value


def _configs_matching(values: dict, configs) -> list:
    """The configs whose values are `values` on its keys, as the spec's `config:` mapping selects them."""
    missing = object()
    return [config for config in configs
            if all(_same(value, _constexpr(config.all_kwargs().get(name, missing if value is not None else None)))
                   for name, value in values.items())]


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return {"unsupported": type(value).__name__, "repr": repr(value)[:200]}


def _constexpr(value):
    inner = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if type(inner).__name__ == "dtype" and type(inner).__module__.startswith("triton"):
        return {"dtype": str(inner)}
    if inner is None or isinstance(inner, (bool, int, float, str)):
        return inner
    return {"unsupported": type(inner).__name__, "repr": repr(inner)[:200]}


def _argument(value, kind):
    """A runtime argument as a spec stand-in's facts."""
    type_name = kind[0]
    if isinstance(type_name, str) and type_name.startswith("*") and hasattr(value, "data_ptr"):
        pointer = value.data_ptr()
        align = 16
        while align > 1 and pointer % align:
            align //= 2
        shape = [int(s) for s in getattr(value, "shape", [])]
        try:
            strides = [int(s) for s in value.stride()]
        except Exception:
            strides = None
        try:   # elements from the storage's start: with the strides, where the view sits in its allocation
            offset = int(value.storage_offset())
        except Exception:
            offset = None
        # Triton's AMD backend judges the pointer range from ptr_range() if the argument has one, else from
        # a torch tensor's whole storage (not the view), else not at all (no tt.pointer_range 32).
        storage = None
        if hasattr(value, "ptr_range"):
            storage = int(value.ptr_range())
        elif hasattr(value, "untyped_storage"):
            storage = int(value.untyped_storage().size())
        element = type_name[1:]
        return {"tensor": element[1:] if element.startswith("k") and element[1:] else element,
                "torch_dtype": str(getattr(value, "dtype", "")).removeprefix("torch."), "shape": shape,
                "strides": strides, "offset": offset, "align": align, "storage_bytes": storage,
                "element_bytes": getattr(getattr(value, "dtype", None), "itemsize", None)}
    if type(value).__name__ == "TensorDescriptor" and hasattr(value, "block_shape"):   # a host-side TMA descriptor
        if getattr(value, "round_f32_to_tf32", False):
            return {"unsupported": "TensorDescriptor(round_f32_to_tf32=True)", "repr": repr(value)[:200]}
        return {"descriptor": str(value.base.dtype).removeprefix("torch."), "shape": [int(s) for s in value.shape],
                "strides": [int(s) for s in value.strides], "block_shape": [int(s) for s in value.block_shape],
                "padding": str(value.padding)}
    if isinstance(value, bool) or value is None:
        return {"value": value}
    if isinstance(value, int) or type(value).__name__.startswith(("int", "uint")):
        return {"value": int(value)}
    if isinstance(value, float):
        return {"value": value}
    return {"unsupported": type(value).__name__, "repr": repr(value)[:200]}
