"""A kernel launch on a machine without the target's GPU, as far as Triton's cache lookup: run by the export tests
in a process of their own, with no xisa in it.

The kernel module is imported from its file as a program imports it; Triton's active driver is replaced by one that
answers the target's GPUTarget (and device 0, stream 0); the arguments are CPU torch tensors of the case's dtypes and
shapes. `kernel[(1,)](...)` then runs Triton's own launch path: `JITFunction.run`, its binder, `_pack_args`,
`_do_compile` and `triton.compile`, which computes the key and looks the entry up in TRITON_CACHE_DIR. The launch is
stopped when `triton.compile` returns (there is no GPU to load the code on). Prints one JSON line: the key
`triton.compile` filed the compile under and whether Triton's compilation listener saw a cache hit.

    python launch_probe.py '{"file": ..., "function": ..., "gpu_target": ["hip", "gfx942", 64],
                            "args": {...}, "constexprs": {...}, "options": {...}}'
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton
import triton.compiler
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime import driver

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32}


class Stop(Exception):
    """Raised when `triton.compile` returns: what follows needs a GPU."""


class TargetDriver:
    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


def main(request: dict) -> dict:
    path = Path(request["file"]).resolve()
    parts, folder = [path.stem], path.parent
    while (folder / "__init__.py").exists():   # a module of a package is imported as the package's
        parts.insert(0, folder.name)
        folder = folder.parent
    sys.path.insert(0, str(folder))
    module = importlib.import_module(".".join(parts))
    kernel = getattr(module, request["function"])
    driver.set_active(TargetDriver(GPUTarget(*request["gpu_target"])))
    seen: dict = {}

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        seen["cache_hit"] = cache_hit

    knobs.compilation.listener = listener
    compile = triton.compiler.compile

    def compile_then_stop(*args, **kwargs):
        compiled = compile(*args, **kwargs)
        seen["key"] = compiled.hash
        raise Stop

    triton.compiler.compile = compile_then_stop   # `JITFunction.create_binder` takes it from here
    values = {}
    for name, value in request["args"].items():
        values[name] = torch.empty(value["shape"], dtype=DTYPES[value["tensor"]]) if isinstance(value, dict) else value
    try:
        kernel[(1,)](**values, **request["constexprs"], **request.get("options", {}))
    except Stop:
        pass
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
