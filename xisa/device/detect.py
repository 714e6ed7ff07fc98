"""Which GPUs are present, and which targets they are: the gate of the on-device tier.

Detection reads torch's device properties: ROCm's `gcnArchName` (feature suffix such as
`:sramecc+:xnack-` stripped) or CUDA's compute capability. Everything else is pure.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

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


def base_gcn_arch(gcn_arch_name: str) -> str:
    """`gfx942:sramecc+:xnack-` -> `gfx942`."""
    return gcn_arch_name.split(":", 1)[0].strip()


def arch_of(props: Any, *, is_hip: bool) -> str:
    if is_hip:
        return base_gcn_arch(str(getattr(props, "gcnArchName", "") or ""))
    return f"{props.major}.{props.minor}"


def match_target(arch: str, backend: str, targets: dict[str, Target]) -> str | None:
    for name in sorted(targets):
        target = targets[name]
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
    is_hip = bool(getattr(getattr(torch_module, "version", None), "hip", None))
    backend = "hip" if is_hip else "cuda"
    devices = []
    for index in range(count):
        props = cuda.get_device_properties(index)
        arch = arch_of(props, is_hip=is_hip)
        devices.append(Device(index=index, name=str(getattr(props, "name", "GPU")), backend=backend, arch=arch,
                              target=match_target(arch, backend, targets)))
    return devices


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
