"""The platform facts a kernel's module, helpers and heuristics can read, and what each is on a target.

A module keeps what it read of the platform (`IS_HIP = torch.version.hip is not None`, `NUM_SMS` from the device,
a table picked by the device's name), so its load may serve another target only where each fact it read has the
same value (`same_platform`). `xisa.compile.gpu.device_answers` records the facts as it answers them; this is the one
home of what each recorded fact means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xisa.spec.device_facts import device_fact

# Always the environment, wherever they are installed from (an editable Triton is still the toolchain): never a
# project module, never loaded anew, never a package that asks the platform for a library.
ENVIRONMENT_PACKAGES = {"triton", "torch", "xisa", "__main__"}

# Facts that are no device fact of a target file: torch.version.hip/cuda, Triton's current target, and the device
# itself (an object that answers later, such as torch's device properties, stands for every fact of the device).
BACKEND, GPU_TARGET, DEVICE = "backend", "gpu_target", "device"


def platform_fact(target, fact: str) -> Any:
    """The value of `fact` on `target` (None: a load for no particular target, which answers as no target)."""
    if target is None:
        return None
    if fact == BACKEND:
        return target.backend
    if fact == GPU_TARGET:
        return [target.backend, str(target.arch), target.warp_size]
    if fact == DEVICE:
        return target.name
    value = device_fact(target, fact)
    return list(value) if isinstance(value, tuple) else value


def same_platform(facts: Mapping[str, Any], target) -> bool:
    """Whether every platform fact a load (and the compiles since) read has the same value on `target`: only then
    may `target`'s cells use that load."""
    return all(platform_fact(target, fact) == value for fact, value in facts.items())
