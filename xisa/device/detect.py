"""Which GPUs are present, and which targets they are: the gate of the on-device tier.

Detection reads torch's device properties: ROCm's `gcnArchName` (feature suffix such as
`:sramecc+:xnack-` stripped) or CUDA's compute capability. Everything else is pure.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from xisa.analyze.backends import BACKENDS, NVIDIA, Backend
from xisa.spec.targets import Target


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    backend: str          # hip | cuda
    arch: str             # gfx942 / 9.0
    target: str | None    # the matching target's name, if any

    def describe(self) -> str:
        return f"GPU {self.index}: {self.name} ({self.arch}{', ' + self.target if self.target else ', no target'})"


def match_target(arch: str, backend: str, targets: dict[str, Target]) -> str | None:
    for name in sorted(targets):
        target = targets[name]
        if target.device_of is not None:
            continue   # a GPU is recognised by its arch; a device target of that arch is chosen by name (--arch)
        if target.backend == backend and any(fnmatch.fnmatchcase(arch, m) for m in target.device_match):
            return name
    return None


def detect_devices(targets: dict[str, Target], *, torch_module: Any = None) -> list[Device]:
    """The GPUs torch can see, each mapped to a target. `torch_module` lets tests fake one."""
    if torch_module is None:
        try:
            import torch as torch_module
        except ImportError:
            return []
    cuda = getattr(torch_module, "cuda", None)
    try:
        if cuda is None or not cuda.is_available():
            return []
        count = cuda.device_count()
    except Exception:  # a broken driver is "no GPU", not a crash
        return []
    backend = built_for(torch_module)
    devices = []
    for index in range(count):
        props = cuda.get_device_properties(index)
        arch = backend.device_arch(props)
        devices.append(Device(index=index, name=str(getattr(props, "name", "GPU")), backend=backend.name, arch=arch,
                              target=match_target(arch, backend.name, targets)))
    return devices


def built_for(torch_module: Any) -> Backend:
    """The backend torch was built for (`torch.version.hip` on ROCm), CUDA's where the build says nothing."""
    version = getattr(torch_module, "version", None)
    return next((b for b in BACKENDS if getattr(version, b.torch_build, None)), NVIDIA)


def present_targets(devices: list[Device]) -> dict[str, Device]:
    found: dict[str, Device] = {}
    for device in devices:
        if device.target and device.target not in found:
            found[device.target] = device
    return found


def gate(pattern: str, devices: list[Device], targets: dict[str, Target]) -> tuple[Device | None, str]:
    """The device a test gated on a target name, glob or family may run on, or the reason to skip."""
    present = present_targets(devices)
    for name, device in sorted(present.items()):
        target = targets.get(name)
        if fnmatch.fnmatchcase(name, pattern) or (target and fnmatch.fnmatchcase(target.family, pattern)):
            return device, ""
    if not devices:
        return None, f"no GPU: needs {pattern}"
    seen = ", ".join(f"{d.arch}" + (f" ({d.target})" if d.target else "") for d in devices)
    return None, f"no {pattern} device present (found {seen})"
