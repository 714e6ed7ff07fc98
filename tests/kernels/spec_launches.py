"""Launch hand-written spec cases (kernels/*.yaml) through their runtime checks, as a program would.

    python tests/kernels/spec_launches.py KERNEL:CASE@TARGET ...     (default: SMALL below)

Each cell's values (arguments, constexprs, launch options, the target's overrides) come from the
spec; the kernel module's `check_<kernel>(case)` builds the tensors and launches. On a GPU the
launches are real; without one run it with TRITON_INTERPRET=1 (the CPU interpreter), or under
`xisa capture --no-run` (CPU tensors, no kernel runs, every check fails on garbage). Its purpose
is `xisa capture`: the cases captured from these launches must compile to the spec cells'
fingerprints (tests/test_capture.py, on the CPU). On a GPU machine, the same proof with real launches:

    xisa capture --out captured-gpu -- python tests/kernels/spec_launches.py
    xisa compile --spec captured-gpu --spec kernels --arch sm_90 --json   # captured vs hand cells, per target

Prints one JSON line: {"KERNEL:CASE@TARGET": "pass" | error}.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from xisa.compile.launch.standins import constexpr_value  # noqa: E402
from xisa.device.launch import RuntimeCase  # noqa: E402
from xisa.spec.cases import load_spec, resolve_cell  # noqa: E402
from xisa.spec.targets import load_targets  # noqa: E402

# The cheapest launches of two kernels under the interpreter (their specialization is the same on every target).
SMALL = ["decode_reduce:d256_s64@gfx942", "kv_dequant:int8_d128@sm_90"]


def launch(cell_id: str, device) -> None:
    kernel_case, _, target_name = cell_id.partition("@")
    kernel, _, case_name = kernel_case.partition(":")
    spec = load_spec(ROOT / "kernels" / f"{kernel}.yaml")
    target = load_targets([ROOT / "targets"], root=ROOT)[target_name]
    (case,) = [c for c in spec.cases if c.name == case_name]
    cell = resolve_cell(spec, case, target)
    module = importlib.import_module(f"kernels.{spec.source_file.stem}")
    constexprs = {k: constexpr_value(v, path=spec.spec_path, field="constexprs") for k, v in cell.constexprs.items()}
    getattr(module, cell.runtime)(RuntimeCase(kernel=kernel, case=case_name, target=target_name, args=dict(cell.args),
                                              constexprs=constexprs, options=dict(cell.options), device=device))


if __name__ == "__main__":
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    not_run = os.environ.get("XISA_CAPTURE_NO_RUN") == "1"   # `xisa capture --no-run`: launches return unrun
    if not interpreted and not not_run and not torch.cuda.is_available():
        raise SystemExit("no GPU: run with TRITON_INTERPRET=1")
    device = torch.device("cpu" if interpreted or not_run else "cuda")
    if interpreted:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import interp_checks  # noqa: F401  (the interpreter's bf16 dot and f32 -> bf16 rounding, as on a GPU)
    results = {}
    for cell_id in sys.argv[1:] or SMALL:
        try:
            launch(cell_id, device)
            results[cell_id] = "pass"
        except Exception:
            results[cell_id] = traceback.format_exc()[-1500:]
    print(json.dumps(results))
    sys.exit(0 if all(v == "pass" for v in results.values()) else 1)
