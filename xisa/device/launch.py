"""The on-device tier: run a case's runtime check on the GPU present, and prove fidelity.

A case names a runtime check (`runtime: check_fn`), a function of the kernel module that takes a
`RuntimeCase`, builds inputs, launches through `case.launch(...)` and compares with the torch
reference (raising AssertionError on a mismatch). Fidelity: the kernel the real launch compiled,
normalized, must have the fingerprint that xisa computes ahead of time for the cell.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xisa.compile.launch.bind import BoundCell, bind_values
from xisa.compile.launch.loader import load_kernel_function
from xisa.compile.launch.standins import constexpr_value
from xisa.errors import XisaError
from xisa.names import CellKey
from xisa.spec.cases import Cell


@dataclass
class Launch:
    fn: Any
    args: tuple
    kwargs: dict
    compiled: Any


@dataclass
class RuntimeCase:
    """What a runtime check gets: the case's values and a launch that records what was compiled."""

    kernel: str
    case: str
    target: str
    args: dict[str, Any]          # the spec's argument values (tensor specs as written, scalars)
    constexprs: dict[str, Any]    # resolved (dtype constexprs are triton.language dtypes)
    options: dict[str, Any]       # launch options: num_warps, num_stages, waves_per_eu, ...
    device: Any                   # torch.device
    launches: list[Launch] = field(default_factory=list)

    def shape(self, name: str) -> list[int]:
        value = self.args[name]
        return list(value.get("shape", [1])) if isinstance(value, dict) else [1]

    def launch(self, fn, grid, *args, **kwargs):
        """`fn[grid](*args, **kwargs)`, remembered so xisa can compare it with the AOT compile."""
        compiled = fn[grid](*args, **kwargs)
        self.launches.append(Launch(fn=fn, args=args, kwargs=kwargs, compiled=compiled))
        return compiled


@dataclass
class RuntimeResult:
    kernel: str
    case: str
    target: str
    status: str                     # pass | fail | skip | error
    message: str = ""
    seconds: float = 0.0
    launch_sha256: str | None = None
    aot_sha256: str | None = None
    binding_diff: list[str] = field(default_factory=list)
    launch_binding: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return str(CellKey(self.kernel, self.case, self.target))

    @property
    def fidelity(self) -> str:
        if self.launch_sha256 is None or self.aot_sha256 is None:
            return "-"
        return "equal" if self.launch_sha256 == self.aot_sha256 else "differs"

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "case": self.case, "target": self.target, "status": self.status,
                "message": self.message, "seconds": round(self.seconds, 3), "fidelity": self.fidelity,
                "launch_sha256": self.launch_sha256, "aot_sha256": self.aot_sha256,
                "binding_diff": self.binding_diff}


def run_check(cell: Cell, device, *, roots: list[Path]) -> tuple[RuntimeResult, Launch | None]:
    """Run the cell's runtime check; returns the result and the launch of the cell's own kernel."""
    result = RuntimeResult(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, status="error")
    started = time.perf_counter()
    try:
        fn = load_kernel_function(cell.kernel, roots=roots, target=cell.target)
        check = fn.fn.__globals__.get(cell.runtime)   # the kernel module's namespace (no load stays in sys.modules)
        if check is None:
            raise XisaError(f"runtime check {cell.runtime!r} is not defined in the kernel module",
                            path=cell.kernel.spec_path, field=f"{cell.field_path}.runtime")
        constexprs = {k: constexpr_value(v, path=cell.kernel.spec_path, field="constexprs")
                      for k, v in cell.constexprs.items()}
        case = RuntimeCase(kernel=cell.kernel.name, case=cell.case, target=cell.target.name, args=dict(cell.args),
                           constexprs=constexprs, options=dict(cell.options), device=device)
        check(case)
        own = [launch for launch in case.launches if launch.fn is fn]
        if not own:
            result.status, result.message = "fail", f"the check never launched {cell.kernel.function} via case.launch"
            return result, None
        result.status, result.message = "pass", f"{len(case.launches)} launch(es) matched the reference"
        return result, own[-1]
    except AssertionError as exc:
        result.status = "fail"
        result.message = (str(exc).strip().splitlines() or ["assertion failed"])[0][:300]
    except XisaError as exc:
        result.message = str(exc)
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        result.message = f"{type(exc).__name__}: {exc}{where}".splitlines()[0][:300]
    finally:
        result.seconds = time.perf_counter() - started
    return result, None


def launch_binding(cell: Cell, launch: Launch) -> BoundCell:
    """Triton's binder on the launch's real arguments, for the cell's target."""
    fn = launch.fn
    names = [p.name for p in fn.params]
    kwargs = dict(zip(names, launch.args))
    option_keys = {k: v for k, v in launch.kwargs.items() if k not in names}
    kwargs.update({k: v for k, v in launch.kwargs.items() if k in names})
    return bind_values(fn, cell.target.gpu_target(), kwargs, option_keys, path=cell.kernel.spec_path,
                       target_name=cell.target.name)


def diff_bindings(aot: dict[str, Any], launch: dict[str, Any]) -> list[str]:
    """Human-readable differences between two signature records (signature, constexprs, attrs)."""
    lines = []
    for section in ("signature", "constexprs", "attrs"):
        a, b = aot.get(section, {}), launch.get(section, {})
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                lines.append(f"{section}.{name}: ahead-of-time {a.get(name)!r}, launch {b.get(name)!r}")
    return lines


def launch_fingerprint(cell: Cell, launch: Launch) -> str:
    """The `code_sha256` of the code object the launch loaded (`xisa.analyze.codeobject`), as an ahead-of-time
    cell's is taken."""
    from xisa.compile.cell import analyze_compiled

    compiled = launch.compiled
    return analyze_compiled(cell, compiled, compiled.metadata).code_sha256


def fresh_launch_cache() -> str:
    """Launches compile into an empty Triton cache, so what they run is compiled now."""
    folder = tempfile.mkdtemp(prefix="xisa-launch-cache-")
    os.environ["TRITON_CACHE_DIR"] = folder
    return folder
