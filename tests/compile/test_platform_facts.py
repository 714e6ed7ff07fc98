"""Every target is its own GPU (issue 35, item 1): a module that reads the platform (torch.version.hip, the
device's SM count, Triton's target) at import or in a heuristic keeps the answer, so its load serves only the
targets on which every platform fact it read has the same value; any order of targets and any -j compiles each
cell as a load for that target alone would."""

from __future__ import annotations

import itertools
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
    from xisa.compile.state import WORKER

    monkeypatch.setattr(WORKER, "loaded", {})
    yield WORKER


def _load_for(root: Path, target: str):
    from xisa.api import open_workspace
    from xisa.compile.loader import load_kernel_function

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


def _compiled(root: Path, cache: Path, *, jobs: int, order: tuple[str, ...] | None = None, only=None) -> dict:
    from xisa.api import Selection, open_workspace
    from xisa.compile.runner import RunOptions, run_cells

    ws = open_workspace(cwd=root)
    _, cells = Selection(arch=[only] if only else None).cells(ws)
    if order is not None:
        cells = sorted(cells, key=lambda cell: order.index(cell.target.name))
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=jobs, use_cache=False))
    assert all(r.ok for r in results), [r.error for r in results]
    return {cell.target.name: result.analysis.code_sha256 for cell, result in zip(cells, results)}


@pytest.mark.parametrize("module", ["import_time", "heuristic"])
def test_mixed_runs_at_any_jobs_and_order_compile_what_each_target_alone_does(tmp_path, fresh_worker, module):
    """The whole path (pool, workers, bind, compile): a platform answer kept at import or by a heuristic's cache
    at bind time never reaches another vendor's cell."""
    targets = ("gfx942", "sm_90", "gfx1100")
    files = {"kernels/vendor.py": HEURISTIC} if module == "heuristic" else {}
    root = write_files(_project(tmp_path / "p", READS["helper"], targets), files)
    alone = {}
    for target in targets:
        alone.update(_compiled(root, tmp_path / f"alone-{target}", jobs=1, only=target))
    for jobs, order in itertools.product((1, 2), (targets, tuple(reversed(targets)))):
        assert _compiled(root, tmp_path / f"mixed-{jobs}-{order[0]}", jobs=jobs, order=order) == alone, (jobs, order)
