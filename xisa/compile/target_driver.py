"""The GPU driver Triton sees while a kernel module loads or a cell compiles: it answers for the cell's target."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class LoadTargetDriver:
    """Triton's active driver while a kernel module loads: it answers `get_current_target()` with the target the
    load is for (a module sizing a kernel from it then gets that target's value, and the module is loaded once
    per target) and `get_active_torch_device()` with the device a launch would use. Any other query goes to the
    machine's own driver where there is one, else is an error naming it (an invented answer would compile
    something else)."""

    def __init__(self, target, real):
        self._target = target
        self._real = real
        self.asked_target = False

    def get_current_target(self):
        if self._target is None:
            if self._real is not None:
                return self._real.get_current_target()
            raise RuntimeError("xisa loads this kernel for no particular target, so it has no current target")
        self.asked_target = True
        return self._target.gpu_target()

    def get_active_torch_device(self):
        import torch

        return torch.device("cuda")   # what a launch on either vendor's GPU uses (ROCm's torch says cuda too)

    def is_active(self) -> bool:
        return True

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._real is not None:
            return getattr(self._real, name)
        raise RuntimeError(f"the kernel module asked the GPU driver for {name!r} at import; xisa compiles without a "
                           "GPU: compute it in the launch function, or stub it (docs/spec-format.md, import hooks)")


@contextlib.contextmanager
def target_driver(target) -> Iterator[LoadTargetDriver]:
    from triton.runtime.driver import driver

    saved = driver._active
    try:
        real = driver.active     # the machine's GPU driver; none on a machine without a GPU
    except RuntimeError:
        real = None
    stand_in = LoadTargetDriver(target, real)
    driver.set_active(stand_in)
    try:
        yield stand_in
    finally:
        driver._active = saved

