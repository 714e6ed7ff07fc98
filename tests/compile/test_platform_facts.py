"""Every target is its own GPU (issue 35, item 1): a module that reads the platform (torch.version.hip, the
device's SM count, Triton's target) at import or in a heuristic keeps the answer, so its load serves only the
targets on which every platform fact it read has the same value; any order of targets and any -j compiles each
cell as a load for that target alone would."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import one_case_spec, write_files

KERNEL = """import torch
import triton
import triton.language as tl
{imports}


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""

# Each way a module learns the vendor at import: torch.version read directly, through `from torch.version import`,
# through an alias of the module, in a project helper it imports, and through the device's count of SMs.
READS = {
    "attribute": "SCALE = tl.constexpr(5.0 if torch.version.hip else 7.0)",
    "from_import": "from torch.version import hip\nSCALE = tl.constexpr(5.0 if hip is not None else 7.0)",
    "alias": "import torch.version as tv\nSCALE = tl.constexpr(7.0 if tv.cuda else 5.0)",
    "helper": "from platform_helper import SCALE",
}
HELPER = "import torch\nimport triton.language as tl\n\nIS_HIP = torch.version.hip is not None\n" \
         "SCALE = tl.constexpr(5.0 if IS_HIP else 7.0)\n"
TARGETS = ("gfx942", "gfx1100", "sm_90", "sm_80")
EXPECTED = {"gfx942": 5.0, "gfx1100": 5.0, "sm_90": 7.0, "sm_80": 7.0}


def _project(root: Path, imports: str, targets=TARGETS) -> Path:
    return write_files(root, {
        "pyproject.toml": '[tool.xisa]\nspecs = ["kernels"]\n',
        "kernels/platform_helper.py": HELPER,
        "kernels/vendor.py": KERNEL.format(imports=imports),
        "kernels/vendor.yaml": one_case_spec("vendor", "source: vendor.py", ", ".join(targets)),
    })


@pytest.fixture
def fresh_worker(monkeypatch):
    """This process's loads forgotten before and after (compile workers fork from it)."""
    from xisa.compile.worker.state import WORKER

    monkeypatch.setattr(WORKER, "loaded", {})
    yield WORKER


def _load_for(root: Path, target: str):
    from xisa.api import open_workspace
    from xisa.compile.launch.loader import load_kernel_function

    ws = open_workspace(cwd=root)
    spec = next(s for s in ws.specs if s.name == "vendor")
    return load_kernel_function(spec, roots=list(ws.project.kernel_roots), target=ws.targets[target])


@pytest.mark.parametrize("how", sorted(READS))
def test_a_vendor_branch_at_import_is_each_targets_in_every_order(tmp_path, fresh_worker, how):
    root = _project(tmp_path / "p", READS[how])
    for order in (TARGETS, tuple(reversed(TARGETS)), ("sm_90", "gfx942", "sm_80", "gfx1100")):
        fresh_worker.loaded.clear()
        scales = {target: _load_for(root, target).fn.__globals__["SCALE"].value for target in order}
        assert scales == EXPECTED, (how, order)


def test_a_load_serves_exactly_the_targets_whose_facts_it_read_agree(tmp_path, fresh_worker):
    import torch

    root = _project(tmp_path / "p", READS["attribute"], ("gfx1200", "gfx1201", "sm_90", "sm_80"))
    loads = {target: _load_for(root, target) for target in ("gfx1200", "gfx1201", "sm_90", "sm_80")}
    assert loads["gfx1200"] is loads["gfx1201"]          # one vendor: the one fact read is the same
    assert loads["sm_90"] is loads["sm_80"]
    assert loads["gfx1200"] is not loads["sm_90"]
    assert torch.version.hip is None and type(torch.version).__name__ == "module"   # answered for the load only


def test_a_load_that_read_the_sm_count_serves_only_targets_with_that_count(tmp_path, fresh_worker):
    sms = "SCALE = tl.constexpr(float(torch.cuda.get_device_properties(0).multi_processor_count))"
    root = _project(tmp_path / "p", sms, ("gfx942", "gfx1100", "sm_90"))
    values = {t: _load_for(root, t).fn.__globals__["SCALE"].value for t in ("sm_90", "gfx942", "gfx1100")}
    assert values == {"sm_90": 132.0, "gfx942": 304.0, "gfx1100": 96.0}


HEURISTIC = """import functools
import torch
import triton
import triton.language as tl


@functools.cache   # kept by the module, as libraries keep platform answers
def is_hip():
    return torch.version.hip is not None


@triton.heuristics({"SCALE": lambda args: 5.0 if is_hip() else 7.0})
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE)
"""


# cut-cross-entropy's shape: a launch option picked at import from the vendor, applied by a heuristic
LAUNCH_OPTION = """import torch
import triton
import triton.language as tl

BEST = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2 if torch.version.hip else 4)


@triton.heuristics({k: (lambda args, _v=v: _v) for k, v in BEST.all_kwargs().items()})
@triton.jit
def kern(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n, BLOCK):
        acc += tl.load(x_ptr + i + tl.arange(0, BLOCK))
    tl.store(y_ptr + tl.arange(0, BLOCK), acc)
"""
LAUNCH_SPEC = """name: vendor
source: vendor.py
function: kern
targets: [{targets}]
cases:
  - name: c
    args: {{x_ptr: '*fp32', y_ptr: '*fp32', n: 4096}}
"""


def _compiled(root: Path, cache: Path, *, jobs: int, order: tuple[str, ...] | None = None, only=None,
              use_cache: bool = False) -> dict:
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection(arch=[only] if only else None).cells(ws)
    if order is not None:
        cells = sorted(cells, key=lambda cell: order.index(cell.target.name))
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=jobs, use_cache=use_cache))
    assert all(r.ok for r in results), [r.error for r in results]
    return {cell.target.name: (result.analysis.code_sha256, result.options.get("num_stages"))
            for cell, result in zip(cells, results)}


@pytest.mark.parametrize("module", ["import_time", "heuristic", "launch_option"])
def test_mixed_runs_at_any_jobs_and_order_compile_what_each_target_alone_does(tmp_path, fresh_worker, module):
    """The whole path (pool, workers, bind, compile, the result cache): a platform answer kept at import, by a
    heuristic's cache at bind time, or as a launch option, never reaches another vendor's cell, cold or warm."""
    targets = ("gfx942", "sm_90", "gfx1100")
    files = {"heuristic": {"kernels/vendor.py": HEURISTIC},
             "launch_option": {"kernels/vendor.py": LAUNCH_OPTION,
                               "kernels/vendor.yaml": LAUNCH_SPEC.format(targets=", ".join(targets))}}
    root = write_files(_project(tmp_path / "p", READS["helper"], targets), files.get(module, {}))
    alone = {}
    for target in targets:
        alone.update(_compiled(root, tmp_path / f"alone-{target}", jobs=1, only=target))
    if module == "launch_option":
        assert {t: alone[t][1] for t in targets} == {"gfx942": 2, "gfx1100": 2, "sm_90": 4}
    for jobs, order in itertools.product((1, 2), (targets, tuple(reversed(targets)))):
        assert _compiled(root, tmp_path / f"mixed-{jobs}-{order[0]}", jobs=jobs, order=order) == alone, (jobs, order)
    warm = tmp_path / "warm"
    for _ in range(2):   # cold into the cache, then every cell from it
        assert _compiled(root, warm, jobs=2, order=tuple(reversed(targets)), use_cache=True) == alone


def test_torchs_device_generic_doors_answer_as_the_target(tmp_path, fresh_worker):
    """SGLang's and vLLM's kernels size configs through torch.get_device_module() and torch.accelerator."""
    import torch

    sms = ("dev = torch.get_device_module()\nassert torch.accelerator.is_available() and torch.cuda.is_initialized()\n"
           "assert torch.accelerator.current_accelerator().type == 'cuda' and torch.accelerator.device_count() == 1\n"
           "SCALE = tl.constexpr(float(dev.get_device_properties(torch.accelerator.current_device_index())"
           ".multi_processor_count))")
    root = _project(tmp_path / "p", sms, ("gfx942", "sm_90"))
    assert {t: _load_for(root, t).fn.__globals__["SCALE"].value for t in ("gfx942", "sm_90")} == \
        {"gfx942": 304.0, "sm_90": 132.0}
    assert torch.get_device_module() is torch.cpu and torch.accelerator.device_count() == 0   # undone after


PROBES = {
    "nvidia_smi": "subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv'], capture_output=True)",
    "rocminfo_shell": "subprocess.run('rocminfo | grep -m1 gfx', shell=True, capture_output=True)",
    "nvml": "ctypes.CDLL('libnvidia-ml.so.1')",
    "os_system": "os.system('amd-smi static')",
    "shell_pipe_no_spaces": "os.popen('rocminfo|grep gfx').read()",
    "llvm_arch_tool": "subprocess.run(['amdgpu-arch'], capture_output=True)",
    "cudart": "ctypes.CDLL('libcudart.so.12')",
}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_a_gpu_probe_behind_torchs_back_is_one_line_naming_the_librarys_line(tmp_path, fresh_worker, probe):
    """vLLM's platform (NVML, amdsmi), aiter's arch (rocminfo), FlagGems' vendor (the vendors' tools): this machine's
    GPU would answer, or with none the library's own fallback, silently; the library's `except Exception` too."""
    from xisa.errors import TargetError

    asks = (f"import ctypes, os, subprocess\ntry:\n    {PROBES[probe]}\nexcept Exception:\n    pass\n"
            "SCALE = tl.constexpr(2.0)")
    root = _project(tmp_path / "p", asks, ("gfx942",))
    with pytest.raises(TargetError) as caught:
        _load_for(root, "gfx942")
    # the library's own line, never the standard library's (os.popen) or a target file
    assert re.match(r"(\S*/)?kernels/vendor.py:6: \S+ \((subprocess.Popen|ctypes.dlopen|os.system)\) is refused while xisa "
                    r"answers as gfx942 \(AMD Instinct MI300X\): it asks this machine's GPU", str(caught.value)), \
        str(caught.value)


def test_a_subprocess_that_asks_no_gpu_runs(tmp_path, fresh_worker):
    root = _project(tmp_path / "p", "import subprocess\nsubprocess.run(['true'], check=True)\n"
                                    "SCALE = tl.constexpr(2.0)", ("gfx942",))
    assert _load_for(root, "gfx942").fn.__globals__["SCALE"].value == 2.0


KEPT = """import torch
import triton
import triton.language as tl
from torch.cuda import get_device_properties

DRIVER = triton.runtime.driver.active     # kept from the load, as FlagGems and fla keep them


@triton.heuristics({"A": lambda args: get_device_properties(0).multi_processor_count,
                    "B": lambda args: DRIVER.utils.get_device_properties(0)["multiprocessor_count"],
                    "D": lambda args: 64 if DRIVER.get_current_target().backend == "hip" else 32})
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * (A + B * 1000 + D * 1000000))
"""


def test_a_function_or_driver_a_module_kept_from_its_load_answers_as_the_cell_being_compiled(tmp_path, fresh_worker):
    """`from torch.cuda import get_device_properties` or `DRIVER = triton.runtime.driver.active` at import, called
    in a heuristic at bind time: the cell's target answers, and the bound constexprs are each target's alone."""
    targets = ("gfx942", "sm_90", "gfx1100")
    root = write_files(_project(tmp_path / "p", READS["helper"], targets), {"kernels/vendor.py": KEPT})
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection().cells(ws)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=tmp_path / "c",
                        options=RunOptions(jobs=1, use_cache=False))
    bound = {cell.target.name: {k: r.binding["constexprs"][k] for k in "ABD"} for cell, r in zip(cells, results)}
    assert bound == {"gfx942": {"A": 304, "B": 304, "D": 64}, "sm_90": {"A": 132, "B": 132, "D": 32},
                     "gfx1100": {"A": 96, "B": 96, "D": 64}}


GPU_TABLE = """import torch
import triton.language as tl

# gemlite's shape: a lookup table per GPU, made at import
TABLES = [torch.tensor([1, 2, 3], dtype=torch.int8, device="cuda:" + str(i)) for i in range(torch.cuda.device_count())]
MOVED = torch.arange(4).cuda().to("cuda:0").to(0)
SCALE = tl.constexpr(float(TABLES[0].sum().item() + MOVED.sum().item()))   # 6 + 6
"""


def test_a_tensor_a_library_makes_on_the_gpu_at_import_is_made_on_the_cpu_with_its_values(tmp_path, fresh_worker):
    """gemlite builds per-GPU tables at import: with no GPU here, the load would fail on every target. No kernel runs
    under xisa, so the table is made on the CPU with the same values; a stream still needs a live GPU."""
    import torch

    from xisa.errors import TargetError

    root = _project(tmp_path / "p", "from platform_helper import IS_HIP\nfrom gpu_table import SCALE", ("gfx942",))
    write_files(root, {"kernels/gpu_table.py": GPU_TABLE})
    assert _load_for(root, "gfx942").fn.__globals__["SCALE"].value == 12.0
    assert torch.zeros(2).device.type == "cpu" and torch.get_default_device().type == "cpu"
    fresh_worker.loaded.clear()
    write_files(root, {"kernels/gpu_table.py": GPU_TABLE + "torch.cuda.synchronize()\n"})
    with pytest.raises(TargetError, match=r"^(\S*/)?gpu_table.py:8: torch.cuda.synchronize\(\) is refused"):
        _load_for(root, "gfx942")


TORCH_KEEPS = """import torch
import triton
import triton.language as tl
from torch.utils._triton import has_triton_tma_device   # a functools.cache over the device's capability

PROPS = torch.cuda.get_device_properties(0)


@triton.heuristics({"SCALE": lambda args: 5.0 if has_triton_tma_device() else 7.0,
                    "SMEM": lambda args: getattr(PROPS, "shared_memory_per_block_optin", 1)})   # absent on ROCm
@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr, SCALE: tl.constexpr, SMEM: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * SCALE + SMEM)
"""


def test_a_platform_answer_torch_itself_keeps_is_each_targets(tmp_path, fresh_worker):
    """Red team: torch.utils._triton caches has_triton_tma_device() (torch is never imported anew, so the first
    target's answer stayed for every later one), and a properties object kept at import listed the creating target's
    attributes (ROCm's torch has no shared_memory_per_block_optin)."""
    targets = ("gfx942", "sm_90", "sm_80")
    root = write_files(_project(tmp_path / "p", READS["helper"], targets), {"kernels/vendor.py": TORCH_KEEPS})
    alone = {}
    for target in targets:
        alone.update(_compiled(root, tmp_path / f"alone-{target}", jobs=1, only=target))
    for order in (targets, tuple(reversed(targets))):
        assert _compiled(root, tmp_path / f"mixed-{order[0]}", jobs=1, order=order) == alone, order


TORCH_REGISTERS = """import torch
import triton
import triton.language as tl
import torch._inductor.kernel.mm   # inductor's config reads torch.version.hip at import; its templates register


@triton.jit
def kern(x_ptr, y_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(y_ptr + r, tl.load(x_ptr + r) * 2.0)
"""


def test_a_module_of_torch_that_asked_at_import_is_not_imported_again(tmp_path):
    """fla's `fla.modules` imports torch's inductor, whose config reads torch.version.hip at import: importing those
    modules of torch anew for the next target failed (`duplicate template name`, `torch._dynamo has no attribute
    decorators`), and every fla cell of that kernel after a worker's first target was an error. Each in a fresh
    process, as a worker is."""
    root = write_files(_project(tmp_path / "p", READS["helper"], ("gfx942", "sm_90")),
                       {"kernels/vendor.py": TORCH_REGISTERS})
    for order in (("gfx942", "sm_90", "gfx942"), ("sm_90", "gfx942", "sm_90")):
        code = ("import sys, json\nfrom xisa.api import Selection, open_workspace\n"
                "from xisa.compile.launch.warm import import_compile_modules\nimport_compile_modules()\n"
                "from xisa.compile.cell import compile_cell\nws = open_workspace()\n"
                "cells = {c.target.name: c for c in Selection().cells(ws)[1]}\n"
                f"out = [compile_cell(cells[t], roots=list(ws.project.kernel_roots)) for t in {order!r}]\n"
                "print(json.dumps([[r.target, r.status, r.error] for r in out]))\n")
        done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                              env={**os.environ, "XISA_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        results = json.loads(done.stdout.strip().splitlines()[-1])
        assert [status for _, status, _ in results] == ["ok"] * 3, results
