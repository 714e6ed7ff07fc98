"""Tensors a library makes on the GPU outside a launch, made on the CPU with the same values while xisa answers as a
target: gemlite builds per-GPU lookup tables at import (`torch.tensor(..., device="cuda:0")`), a program under
`xisa capture --no-run` picks its tensors' device by `torch.cuda.is_available()`, which answers as the GPU. No kernel
runs under xisa, so only such a tensor's dtype, shape and values can matter (to a heuristic, a launch's binding),
and those are the same; on a machine with no GPU the alternative is no load at all.

A `TorchFunctionMode` sees every torch call made in Python, factories included: a GPU `device=` becomes the CPU,
`Tensor.to(GPU)` stays on the CPU, and `Tensor.cuda()` / `pin_memory()` are the tensor itself. What still needs a
live GPU (a stream, an event, memory statistics) reaches `torch.cuda._lazy_init` and is refused, naming its line.
"""

from __future__ import annotations

import functools
from typing import Any

_ITSELF = frozenset({"cuda", "pin_memory"})   # Tensor methods whose GPU result is, here, the tensor


def on_gpu(device: Any) -> bool:
    """A device argument that names a GPU: 'cuda', 'cuda:1', torch.device('cuda'), or a bare index (`.to(0)`)."""
    kind = getattr(device, "type", None)
    if kind is not None:
        return kind == "cuda"
    if isinstance(device, str):
        return device.partition(":")[0] == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


def tensors_on_cpu():
    """A mode to enter while a target answers (torch is imported then: a library asking torch imported it)."""
    return _mode_class()()


@functools.cache
def _mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class TensorsOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if on_gpu(kwargs.get("device")):
                kwargs["device"] = "cpu"
            name = getattr(func, "__name__", "")
            if name in _ITSELF and args and getattr(func, "__self__", None) is None:
                return args[0]
            if name == "to" and len(args) > 1 and on_gpu(args[1]):
                args = (args[0], "cpu", *args[2:])
            return func(*args, **kwargs)

    return TensorsOnCpu
