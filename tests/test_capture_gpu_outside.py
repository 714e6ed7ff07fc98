"""`xisa capture --no-run` of libraries that touch the GPU outside a launch, and heuristics a compile cannot run
again (issue 38, item 4).

cut-cross-entropy 25.1.1 stopped in its `@torch.compile(fullgraph=True)` helpers (dynamo asks torch.cuda's RNG
state once `is_available()` is True) with a traceback ending in a line that named xisa's own `targets/sm_90.yaml`;
its backward kernel's `"REQUIRES_GRAD": lambda args: args["REQUIRES_GRAD"]` heuristic was captured so that every
backward cell failed with KeyError while capture exited 0. What a CPU-only program would see is answered (the RNG
state from the CPU generator, a compiled function run as written); the rest stops in one line naming the library's
line and the fix (an import hook, which capture now enters too); a captured heuristic either compiles or capture
says which, per kernel, and exits 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from support import write_files

# A library modelled on cut-cross-entropy's use: torch.compile'd helpers called on the program's tensors, a seeded
# CUDA generator, a kernel whose heuristic reads the value the launch passed itself, another computed from args.
CCE_LIKE = {
    "cce_like/__init__.py": '''import torch
import triton
import triton.language as tl


@torch.compile(fullgraph=True, dynamic=True)
def softcapping(logits, softcap: float):
    return torch.tanh(logits / softcap) * softcap


@torch.compile(fullgraph=True, dynamic=True)
def sort_logit_avg(logit_avg):
    return torch.argsort(logit_avg).to(torch.int32)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0,
                    "HAS_ORDER": lambda args: args["order_ptr"] is not None,
                    "REQUIRES_GRAD": lambda args: args["REQUIRES_GRAD"]})
@triton.jit
def backward(x_ptr, order_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, HAS_ORDER: tl.constexpr,
             REQUIRES_GRAD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if HAS_ORDER:
        offs = tl.load(order_ptr + offs)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if REQUIRES_GRAD:
        x = x * 2
    tl.store(y_ptr + offs, x, mask=offs < n)


def linear_backward(x, requires_grad: bool):
    torch.cuda.manual_seed(0)
    order = sort_logit_avg(softcapping(x, 30.0))
    y = torch.empty_like(x)
    backward[(2,)](x, order, y, x.numel(), BLOCK=128, REQUIRES_GRAD=requires_grad)
    return y
''',
}

CCE_PROGRAM = '''import os

import torch
from cce_like import linear_backward

device = "cpu" if os.environ.get("XISA_CAPTURE_NO_RUN") else "cuda"
x = torch.randn(256, device=device)
for requires_grad in (True, False):
    linear_backward(x, requires_grad)
print("done")
'''


def _project(tmp_path: Path, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A project with `files`, the library in a site folder of its own (installed, not the project's)."""
    site = write_files(tmp_path / "site", {k: v for k, v in files.items() if "/" in k})
    root = write_files(tmp_path / "proj", {"pyproject.toml": '[tool.xisa]\nspecs = ["captured"]\n',
                                           **{k: v for k, v in files.items() if "/" not in k}})
    return root, {"PYTHONPATH": str(site)}


def test_a_library_using_torch_compile_and_the_cuda_rng_is_captured_and_every_case_compiles(tmp_path, run_xisa):
    root, env = _project(tmp_path, {**CCE_LIKE, "run.py": CCE_PROGRAM})
    out = run_xisa("capture", "--no-run", "--targets", "sm_90", "--", sys.executable, "run.py", cwd=root, env=env)
    assert out.code == 0, out.err
    assert "Traceback" not in out.err and "compiled the new cases once for 1 target: 2 cells, 2 ok" in out.err, out.err
    cases = yaml.safe_load((root / "captured" / "backward.yaml").read_text())["cases"]
    # the value the program passed and the heuristic echoes is the case's own, so the heuristic has it to read
    assert [c["constexprs"] for c in cases] == [{"BLOCK": 128, "REQUIRES_GRAD": True},
                                                {"BLOCK": 128, "REQUIRES_GRAD": False}]
    assert [c["heuristics"] for c in cases] == [{"EVEN": True, "HAS_ORDER": True, "REQUIRES_GRAD": r}
                                                for r in (True, False)]


GPULIB = {
    "gpulib/__init__.py": '''import torch
import triton
import triton.language as tl


@triton.jit
def fill(y_ptr, BLOCK: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), 1.0, tl.float32))


def workspace():
    free, total = torch.cuda.mem_get_info()   # sizes its workspace by the GPU's memory: a live GPU's
    return 256 if total > 100 * 2**30 else 128


def run(y):
    fill[(1,)](y, BLOCK=workspace())
''',
    "run.py": "import torch\nimport gpulib\n\ngpulib.run(torch.empty(256))\n",
}

# The fix the one line names: a hook that answers the library per target, entered around kernel loads and, under
# `xisa capture --as`, in the captured program.
HOOK = '''import contextlib
from unittest import mock

MEMORY = {"gfx942": 192 * 2**30, 90: 141 * 2**30, 86: 24 * 2**30}   # the targets' GPUs' memory, as the project states it


@contextlib.contextmanager
def xisa_import_hook(target):
    total = MEMORY[target.arch]
    with mock.patch("torch.cuda.mem_get_info", return_value=(total, total)):
        yield
'''


def test_a_library_touching_the_gpu_outside_a_launch_stops_in_one_line_naming_its_line_and_the_hook(tmp_path,
                                                                                                   run_xisa):
    root, env = _project(tmp_path, GPULIB)
    out = run_xisa("capture", "--no-run", "--no-check", "--", sys.executable, "run.py", cwd=root, env=env)
    assert out.code == 1 and "Traceback" not in out.err, out.err
    (line,) = [line for line in out.err.splitlines() if "mem_get_info" in line]
    assert line.startswith("xisa: error: gpulib/__init__.py:12 (in workspace): torch.cuda.mem_get_info() is refused "
                           "while xisa answers as sm_90"), line
    assert "(fix: stub it in an import hook" in line and "docs/platform.md#stub-it-in-an-import-hook" in line
    assert "targets/sm_90.yaml" not in out.err and "XISA_CAPTURE_NO_RUN=1" in line


def test_a_refusal_the_program_swallows_is_named_when_it_ends(tmp_path, run_xisa):
    swallowing = GPULIB["gpulib/__init__.py"].replace(
        "    free, total = torch.cuda.mem_get_info()",
        "    try:\n        free, total = torch.cuda.mem_get_info()\n    except:\n        total = 0   # a fallback")
    root, env = _project(tmp_path, {**GPULIB, "gpulib/__init__.py": swallowing})
    out = run_xisa("capture", "--no-run", "--no-check", "--", sys.executable, "run.py", cwd=root, env=env)
    assert out.code == 0, out.err
    (line,) = [line for line in out.err.splitlines() if "mem_get_info" in line]
    assert line.startswith("xisa: warning: the program went on past a refused device query: gpulib/__init__.py:13 "
                           "(in workspace): torch.cuda.mem_get_info() is refused"), line


def test_the_import_hook_that_fixes_it_is_entered_in_the_captured_program_per_target(tmp_path, run_xisa):
    root, env = _project(tmp_path, {**GPULIB, "xisa_hooks.py": HOOK})
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\nimport_hooks = ["xisa_hooks.py"]\n')
    out = run_xisa("capture", "--no-run", "--no-check", "--as", "sm_86", "--as", "gfx942", "--", sys.executable,
                   "run.py", cwd=root, env=env)
    assert out.code == 0, out.err
    (case,) = yaml.safe_load((root / "captured" / "fill.yaml").read_text())["cases"]
    assert case["overrides"] == {"gfx942": {"constexprs": {"BLOCK": 256}}, "sm_86": {"constexprs": {"BLOCK": 128}}}


# cut-cross-entropy's perf model (CCE_AUTOTUNE=1) asks nvidia-smi for the SM clock while its autotuner prunes: at the
# launch in the captured program, and again at each cell's bind in capture's own compile.
CLOCKLIB = {
    "clocklib/__init__.py": '''import functools
import subprocess

import triton
import triton.language as tl


@functools.lru_cache()
def sm_clock_mhz():
    return int(subprocess.check_output(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]))


@triton.heuristics({"UNROLL": lambda args: 4 if sm_clock_mhz() > 1800 else 2})
@triton.jit
def scale(x_ptr, UNROLL: tl.constexpr):
    for i in tl.static_range(UNROLL):
        tl.store(x_ptr + i, tl.load(x_ptr + i) * 2)
''',
    "run.py": "import torch\nimport clocklib\n\nclocklib.scale[(1,)](torch.ones(8))\n",
    "xisa_hooks.py": '''import contextlib
from unittest import mock

SM_CLOCK_MHZ = {90: 1980, 86: 1695}   # the boost clocks of an H200 and an RTX 3090


@contextlib.contextmanager
def xisa_import_hook(target):
    with mock.patch("clocklib.sm_clock_mhz", return_value=SM_CLOCK_MHZ[target.arch]):
        yield
''',
}


def test_the_import_hook_also_answers_what_a_heuristic_asks_when_capture_compiles_the_case(tmp_path, run_xisa):
    root, env = _project(tmp_path, CLOCKLIB)
    out = run_xisa("capture", "--no-run", "--targets", "sm_90,sm_86", "--", sys.executable, "run.py", cwd=root, env=env)
    (line,) = [line for line in out.err.splitlines() if "nvidia-smi" in line]
    assert out.code == 1 and line.startswith("xisa: error: clocklib/__init__.py:10 (in sm_clock_mhz): nvidia-smi "
                                             "(subprocess.Popen) is refused"), out.err
    (root / "pyproject.toml").write_text('[tool.xisa]\nspecs = ["captured"]\nimport_hooks = ["xisa_hooks.py"]\n')
    out = run_xisa("capture", "--no-run", "--as", "sm_90", "--as", "sm_86", "--", sys.executable, "run.py",
                   cwd=root, env=env)
    assert out.code == 0 and "2 cells, 2 ok" in out.err, out.err
    (case,) = yaml.safe_load((root / "captured" / "scale.yaml").read_text())["cases"]
    assert case["overrides"] == {"sm_86": {"heuristics": {"UNROLL": 2}}, "sm_90": {"heuristics": {"UNROLL": 4}}}


MODES = {
    "modes.py": '''import triton
import triton.language as tl

MODE = {}   # set by the program at run time: no compile of the kernel's module sees it


@triton.heuristics({"FAST": lambda args: MODE["fast"]})
@triton.jit
def fill(y_ptr, FAST: tl.constexpr):
    tl.store(y_ptr, 2.0 if FAST else 1.0)
''',
    "run.py": "import torch\nimport modes\n\nmodes.MODE['fast'] = True\nmodes.fill[(1,)](torch.empty(4))\n",
}


def test_a_captured_heuristic_no_compile_can_run_again_fails_the_capture_naming_kernel_and_heuristic(tmp_path,
                                                                                                  run_xisa):
    root, env = _project(tmp_path, MODES)
    out = run_xisa("capture", "--no-run", "--targets", "sm_90", "--", sys.executable, "run.py", cwd=root, env=env)
    assert out.code == 2, out.err
    (line,) = [line for line in out.err.splitlines() if line.startswith("xisa: error:")]
    assert line.startswith("xisa: error: captured/fill.yaml: the captured heuristic 'FAST' compiles on no target, in "
                           "1 case (launch1): raised KeyError: 'fast' (fix: the heuristic reads what the program set at "
                           "run time, not its arguments"), line


# cut-cross-entropy's default (no CCE_AUTOTUNE): its best config applied as constant heuristics.
CONFIG_AS_HEURISTICS = {
    "tuned.py": '''import triton
import triton.language as tl


def best_config():
    return triton.Config(dict(BLOCK=128), num_warps=4, num_stages=2)


@triton.heuristics({k: (lambda args, _v=v: _v) for k, v in best_config().all_kwargs().items()})
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
''',
    "run.py": "import torch\nimport tuned\n\nx = torch.randn(512)\ntuned.copy[(4,)](x, torch.empty_like(x), 512)\n",
}


def test_an_intended_config_change_is_an_error_whose_fix_is_the_new_value_not_the_tensor_strides(tmp_path, run_xisa):
    root, env = _project(tmp_path, CONFIG_AS_HEURISTICS)
    out = run_xisa("capture", "--no-run", "--targets", "sm_90", "--", sys.executable, "run.py", cwd=root, env=env)
    assert out.code == 0, out.err
    kernel = root / "tuned.py"
    kernel.write_text(kernel.read_text().replace("dict(BLOCK=128)", "dict(BLOCK=64)"))   # a new config, on purpose
    out = run_xisa("compile", "--arch", "sm_90", cwd=root)
    assert out.code == 2, out.err
    (line,) = [line for line in out.err.splitlines() if "heuristics.BLOCK" in line]
    assert "the kernel's heuristic 'BLOCK' computes 64 on the case's arguments, but the launch had 128: it reads no " \
           "tensor's layout" in line and "(fix: if the change is on purpose (a new config), set heuristics.BLOCK: 64 " \
           "in the spec" in line, line
    assert "strides" not in line, line


@pytest.mark.slow
def test_cut_cross_entropy_itself_is_captured_forward_and_backward_and_compiles(tmp_path, run_xisa):
    """cut-cross-entropy 25.1.1 from PyPI (skipped where it is not installed): forward and backward, bf16 and fp16,
    shifted and not, captured on this CPU machine with --no-run; every case compiles for sm_90."""
    pytest.importorskip("cut_cross_entropy")
    program = '''import os

import torch
from cut_cross_entropy import linear_cross_entropy

device = "cpu" if os.environ.get("XISA_CAPTURE_NO_RUN") else "cuda"
for dtype in (torch.bfloat16, torch.float16):
    for shift in (False, True):
        e = torch.randn(2, 32, 128, dtype=dtype, device=device, requires_grad=True)
        c = torch.randn(1024, 128, dtype=dtype, device=device, requires_grad=True)
        t = torch.randint(0, 1024, (2, 32), device=device)
        linear_cross_entropy(e, c, t, shift=shift).backward()
'''
    root, env = _project(tmp_path, {"run_cce.py": program})
    out = run_xisa("capture", "--no-run", "--targets", "sm_90", "--", sys.executable, "run_cce.py", cwd=root)
    assert out.code == 0, out.err
    assert "12 cells, 12 ok" in out.err and "Traceback" not in out.err, out.err
    assert sorted(p.name for p in (root / "captured").glob("*.yaml")) == [
        "_cce_backward_kernel.yaml", "_cce_lse_forward_kernel.yaml", "_indexed_neg_dot_forward_kernel.yaml"]


TOP_LEVEL_LAUNCH = '''import torch
import triton
import triton.language as tl


@triton.jit
def add(x, y, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)


x, y, o = torch.randn(1000), torch.randn(1000), torch.empty(1000)
add[(4,)](x, y, o, 1000, B=256)
'''


def test_a_script_launching_at_its_top_level_is_told_to_guard_its_launches(tmp_path, run_xisa):
    """A first script outside the project, its launch unguarded: the kept copy of it launches again when a cell
    loads it. The one line names the copy's line and says to guard the launches, not to stub a query in a hook."""
    root, env = _project(tmp_path, {})
    script = write_files(tmp_path / "elsewhere", {"kern.py": TOP_LEVEL_LAUNCH}) / "kern.py"
    out = run_xisa("capture", "--no-run", "--targets", "gfx942", "--", sys.executable, str(script), cwd=root, env=env)
    assert (root / "captured" / "generated" / "add.py").exists(), out.err
    compiled = run_xisa("compile", "--spec", "captured/add.yaml", "--arch", "gfx942", cwd=root, env=env)
    assert compiled.code == 2, compiled.err
    assert "captured/generated/add.py:13 launches a kernel while its module loads" in compiled.err, compiled.err
    assert 'if __name__ == "__main__":' in compiled.err and "import hook" not in compiled.err, compiled.err
