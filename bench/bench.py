"""Benchmark: a serial loop of compiles (what the seeds did by hand) against `xisa check` cold and warm.

Runs side by side in one invocation and prints ratios, since the machines are shared and noisy:

    python bench/bench.py                 # bundled corpus + a generated matrix of 500 cells
    python bench/bench.py --cells 100     # a smaller generated matrix

For each workload: the cell count, the wall time of (1) one process calling xisa's compile for
every cell in turn with nothing cached, (2) `xisa check --no-cache` with all cores and an empty
Triton cache, (3) `xisa check` again, warm; then serial/cold and warm/cold, cost per cell, and the
largest resident memory of any process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def tile_kernel(a_ptr, b_ptr, c_ptr, n, scale, BLOCK: tl.constexpr, DOT: tl.constexpr, ACT: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    if DOT:
        c = tl.dot(a, b)
    else:
        c = a.to(tl.float32) * b.to(tl.float32)
    if ACT == 1:
        c = tl.maximum(c, 0.0)
    elif ACT == 2:
        c = c * tl.sigmoid(c)
    c = c * scale
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c, mask=r[:, None] < n)
'''


def generated_project(folder: Path, cells: int) -> Path:
    """A spec whose matrix expands to `cells` cells over the five AMD targets."""
    (folder / "kernels").mkdir(parents=True)
    (folder / "kernels" / "tile.py").write_text(KERNEL)
    (folder / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["kernels"]\n')
    per_target = max(1, cells // 5)
    combos = []
    for block in (16, 32, 64, 128):
        for dot in (True, False):
            for act in (0, 1, 2):
                for dtype in ("fp16", "bf16"):
                    for warps in (1, 2, 4, 8):
                        combos.append((block, dot, act, dtype, warps))
    combos = combos[:per_target]
    values = "\n".join(
        f"        c{i}: {{args: {{a_ptr: '*{d}', b_ptr: '*{d}'}}, constexprs: {{BLOCK: {b}, DOT: {str(t).lower()}, "
        f"ACT: {a}}}, options: {{num_warps: {w}}}}}" for i, (b, t, a, d, w) in enumerate(combos))
    (folder / "kernels" / "tile.yaml").write_text(textwrap.dedent("""\
        source: tile.py
        function: tile_kernel
        targets: [gfx1100, gfx1200, gfx1201, gfx942, gfx950]
        cases:
          - name: m
            args: {c_ptr: '*fp32', n: 4096, scale: 0.5}
            matrix:
              v:
        """) + values + "\n")
    return folder


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - started


SERIAL = '''
import json, sys, time
from pathlib import Path
from xisa.compile.cell import compile_cell
from xisa.compile.worker.toolchain import apply_pinned_env
from xisa.api import open_workspace
ws = open_workspace(cwd=Path(sys.argv[1]))
apply_pinned_env(Path(sys.argv[2]))
_, cells = ws.select(arch=sys.argv[3].split(","), kernel=None)
started = time.perf_counter()
errors = sum(not compile_cell(c, roots=list(ws.project.kernel_roots)).ok for c in cells)
print(json.dumps({"cells": len(cells), "seconds": time.perf_counter() - started, "errors": errors}))
'''


def measure(name: str, project: Path, arch: str, scratch: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    serial_cache = scratch / f"{name}-serial"
    proc = subprocess.run([sys.executable, "-c", SERIAL, str(project), str(serial_cache), arch], cwd=project, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"serial loop failed:\n{proc.stderr[-2000:]}")
    serial = json.loads(proc.stdout.strip().splitlines()[-1])
    env["XISA_CACHE_DIR"] = str(scratch / f"{name}-xisa")          # empty: cold Triton cache too
    xisa = [sys.executable, "-m", "xisa", "check", "--quiet", "--arch", arch]
    cold = run(xisa + ["--no-cache"], project, env)
    warm = run(xisa, project, env)
    return {"workload": name, "cells": serial["cells"], "serial_s": serial["seconds"], "cold_s": cold,
            "warm_s": warm, "serial_over_cold": serial["seconds"] / cold, "warm_over_cold": warm / cold,
            "cold_ms_per_cell": 1000 * cold / serial["cells"], "errors": serial["errors"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=500, help="size of the generated matrix (default 500)")
    parser.add_argument("--small", type=int, default=50, help="a smaller generated matrix, for cost per cell")
    parser.add_argument("--skip-corpus", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="xisa-bench-"))
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {os.uname().machine}, {cores} cores available, Python {sys.version.split()[0]}", flush=True)
    print(f"{'workload':<18}{'cells':>6}{'serial s':>10}{'cold s':>9}{'warm s':>8}{'serial/cold':>13}"
          f"{'warm/cold':>11}{'cold ms/cell':>14}", flush=True)
    try:
        rows = []
        workloads = [] if args.skip_corpus else [("bundled corpus", REPO)]
        workloads += [(f"generated {n}", None) for n in (args.small, args.cells)]
        for name, project in workloads:
            if project is None:
                size = int(name.split()[-1])
                project = generated_project(scratch / f"gen{size}", size)
            r = measure(name, project, "gfx*", scratch)
            rows.append(r)
            print(f"{r['workload']:<18}{r['cells']:>6}{r['serial_s']:>10.1f}{r['cold_s']:>9.1f}{r['warm_s']:>8.2f}"
                  f"{r['serial_over_cold']:>12.2f}x{r['warm_over_cold']:>10.1%}{r['cold_ms_per_cell']:>14.0f}",
                  flush=True)
        small, big = rows[-2], rows[-1]
        print(f"cost per cell, {big['cells']} vs {small['cells']} cells: "
              f"{big['cold_ms_per_cell'] / small['cold_ms_per_cell']:.2f}x (the fixed start-up spread thinner)")
        marginal = 1000 * (big["cold_s"] - small["cold_s"]) / (big["cells"] - small["cells"])
        print(f"marginal cold cost per added cell: {marginal:.0f} ms, against {big['cold_ms_per_cell']:.0f} ms "
              f"average at {big['cells']} cells ({marginal / big['cold_ms_per_cell']:.2f}x)")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"largest resident memory of any process: {peak:.0f} MiB")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
