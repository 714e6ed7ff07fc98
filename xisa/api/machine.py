"""The machine: the on-device tier on the GPUs present, and whether results made here can be trusted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xisa.api.selection import Selection
from xisa.api.workspace import keeps_cache_bounded
from xisa.compile.runner import RunOptions


@keeps_cache_bounded
def device(selection: Selection, *, options: RunOptions = RunOptions(), emit: Path | None = None, devices=None):
    """`xisa device`: the selection's runtime checks on the GPUs present (a `DeviceReport`)."""
    from xisa.device.detect import detect_devices
    from xisa.device.tier import run_device_tier

    ws = selection.workspace()
    devices = detect_devices(ws.targets) if devices is None else devices
    chosen, cells = ws.select(arch=selection.arch, kernel=selection.kernel)
    return run_device_tier(chosen, cells, devices=devices, roots=list(ws.project.kernel_roots),
                           cache_dir=ws.project.cache_dir, options=options, emit=emit, arch=selection.arch,
                           kernel=selection.kernel)


def doctor(*, cwd: Path | None = None, environ: dict[str, str] | None = None, torch_module: Any = None,
           probe_devices: bool = True) -> dict[str, Any]:
    """`xisa doctor`: can results made here be trusted, and do the goldens fit this toolchain (a dict)."""
    from xisa.api.diagnose import diagnose

    return diagnose(cwd=cwd, environ=environ, torch_module=torch_module, probe_devices=probe_devices)
