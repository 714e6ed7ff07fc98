"""An autotuner's `prune_configs_by` run as a launch on each cell's target runs it: `config: all` is what that
target's pruner keeps, a case config it drops is an error naming the kept ones, and a pruner that makes new configs
(gemlite's shape) is followed. The fixture's pruners read the device's shared memory (tests/fixtures/pruned)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support import FIXTURES
from xisa.api import open_workspace
from xisa.compile.runner import RunOptions, run_cells

# What each target's pruner keeps of sum_tiles' four configs (16, 64, 96, 192 KiB of fp16 tiles staged): the
# targets' max_shared_mem is 64 KiB on gfx942 and gfx1100, 160 KiB on gfx950, 163 KiB on sm_80, 227 KiB on sm_90.
KEPT = {"gfx942": [0, 1], "gfx1100": [0, 1], "gfx950": [0, 1, 2], "sm_80": [0, 1, 2], "sm_90": [0, 1, 2, 3]}


@pytest.fixture
def project(tmp_path) -> Path:
    dest = tmp_path / "pruned"
    shutil.copytree(FIXTURES / "pruned", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _spec(project: Path, cases: str, *, function: str = "sum_tiles", targets: str = "[gfx942, gfx1100, sm_90]",
          args: str = "{x_ptr: {tensor: fp16, shape: [4096, 4096]}, y_ptr: {tensor: fp32, shape: [4096]}, "
                      "K: 4096, stride_m: 4096}") -> None:
    (project / "kernels" / "tiles.yaml").write_text(
        f"source: tiles.py\nfunction: {function}\ntargets: {targets}\ndefaults:\n  args: {args}\ncases:\n{cases}")


def _cells(project: Path, arch: list[str] | None = None):
    return open_workspace(cwd=project).select(arch=arch)[1]


def test_config_all_is_the_configs_each_targets_pruner_keeps(project):
    cells = _cells(project)
    found: dict[str, list] = {}
    for cell in cells:
        found.setdefault(cell.target.name, []).append((cell.case, cell.config))
    assert found == {target: [(f"kept-config{i}", i) for i in kept] for target, kept in KEPT.items()}


def test_config_all_is_the_same_per_target_in_any_selection_and_order(project):
    whole = {cell.id: cell.config for cell in _cells(project)}
    for arch in (["sm_90", "gfx1100"], ["gfx1100", "sm_90"], ["gfx1100"], ["sm_*"]):
        chosen = {cell.id: cell.config for cell in _cells(project, arch)}
        assert chosen and chosen == {key: value for key, value in whole.items() if key in chosen}


def test_a_perf_model_keeps_its_top_k_as_each_target(project):
    """32768 rows in tiles of 64, 128, 128, 256 rows: one wave of 304 CUs (gfx942) from config 1 on, of 132 SMs
    (sm_90) only at config 3; top_k 1 keeps the first of the fewest waves."""
    _spec(project, "  - {name: fast, config: all}\n", function="sum_tiles_modelled", targets="[gfx942, sm_90]",
          args="{x_ptr: {tensor: fp16, shape: [32768, 64]}, y_ptr: {tensor: fp32, shape: [32768]}, K: 64, "
               "stride_m: 64}")
    assert {cell.id: cell.config for cell in _cells(project)} == {"tiles:fast-config1@gfx942": 1,
                                                                  "tiles:fast-config3@sm_90": 3}


@pytest.mark.parametrize("order", [["gfx1100", "sm_90"], ["sm_90", "gfx1100"]])
def test_a_pruner_that_caches_the_device_answer_prunes_as_each_target(project, run_xisa, order):
    """`functools.cache` around the device query: one worker compiles both targets, in either order."""
    _spec(project, "  - {name: all, config: all}\n  - {name: big, config: 3}\n", function="sum_tiles_cached",
          targets=f"[{', '.join(order)}]")
    assert {cell.id: cell.config for cell in _cells(project) if cell.case != "big"} == {
        f"tiles:all-config{i}@{target}": i for target in order for i in KEPT[target]}
    out = run_xisa("compile", "-j", "1", "--no-cache", "--kernel", "tiles:big", "--json", "--top", "0", cwd=project)
    assert {c["target"]: c["status"] for c in json.loads(out.out)["cells"]} == {"gfx1100": "error", "sm_90": "ok"}


def test_a_config_the_targets_pruner_drops_is_an_error_naming_the_configs_it_keeps(project, run_xisa):
    _spec(project, "  - {name: big, config: 3}\n  - {name: wide, config: {BLOCK_M: 128, num_warps: 8}}\n")
    out = run_xisa("compile", "--arch", "gfx1100", "--arch", "sm_90", "--json", "--top", "0", cwd=project)
    cells = {(c["case"], c["target"]): c for c in json.loads(out.out)["cells"]}
    assert out.code == 2
    assert cells["big", "sm_90"]["status"] == cells["wide", "sm_90"]["status"] == "ok"
    for case in ("big", "wide"):
        error = cells[case, "gfx1100"]["error"]
        assert error.startswith("kernels/tiles.yaml: ") and f"({case}).config:" in error, error
        assert "gfx1100's pruner" in error and "\n" not in error
        assert "keeps config 0 {BLOCK_M: 64, BLOCK_K: 64, num_warps: 4" in error
        assert "config 1 {BLOCK_M: 128, BLOCK_K: 128, num_warps: 4" in error and "config 2 {" not in error.split("keeps")[1]


def test_the_compile_says_which_kept_config_it_compiled(project, run_xisa):
    _spec(project, "  - {name: wide, config: {BLOCK_M: 128, num_warps: 4}}\n")
    out = run_xisa("compile", "--arch", "gfx942", "--json", "--top", "0", cwd=project)
    (cell,) = json.loads(out.out)["cells"]
    assert out.code == 0 and cell["config"] == {"index": 1, "values": {
        "BLOCK_M": 128, "BLOCK_K": 128, "num_warps": 4, "num_ctas": 1, "num_stages": 2}}


REWRITTEN_ARGS = ("{x_ptr: {tensor: fp16, shape: [64, 4096]}, y_ptr: {tensor: fp32, shape: [64]}, M: 64, K: 4096, "
                  "stride_m: 4096}")


def test_a_pruner_that_makes_configs_is_followed(project):
    """gemlite's shape: the pruner yields new Configs (BLOCK_K doubled for WIDE, stages lowered to fit): `config:
    all` is the ones it made on each target, named by their place in its list, each with its own values."""
    _spec(project, "  - {name: made, config: all, constexprs: {WIDE: true}}\n", function="sum_tiles_rewritten",
          targets="[gfx942, sm_90]", args=REWRITTEN_ARGS)
    made = {}
    for cell in _cells(project):
        made.setdefault(cell.target.name, {})[cell.case] = cell.config
    stages = {"gfx942": 2, "sm_90": 3}   # 96 KiB at three stages: more than gfx942's 64 KiB
    for target in ("gfx942", "sm_90"):
        assert made[target] == {
            "made-pruned0": {"BLOCK_M": 64, "BLOCK_K": 128, "num_warps": 4, "num_ctas": 1, "num_stages": 2},
            "made-pruned1": {"BLOCK_M": 64, "BLOCK_K": 256, "num_warps": 4, "num_ctas": 1, "num_stages": 2},
            "made-pruned2": {"BLOCK_M": 64, "BLOCK_K": 256, "num_warps": 8, "num_ctas": 1,
                             "num_stages": stages[target]}}


def test_a_made_config_named_by_values_compiles_with_each_targets_values(project, run_xisa):
    _spec(project, "  - {name: wide, config: {BLOCK_K: 256, num_warps: 8}, constexprs: {WIDE: true}}\n",
          function="sum_tiles_rewritten", targets="[gfx942, sm_90]", args=REWRITTEN_ARGS)
    out = run_xisa("compile", "--json", "--top", "0", cwd=project)
    cells = {c["target"]: c for c in json.loads(out.out)["cells"]}
    assert out.code == 0, out.err
    for target, stages in (("gfx942", 2), ("sm_90", 3)):
        assert cells[target]["options"]["num_stages"] == stages
        assert cells[target]["constexprs"]["BLOCK_K"] == 256 and cells[target]["constexprs"]["EVEN_K"] is True
        assert cells[target]["config"]["index"] is None   # none of the listed configs: the pruner made it


def _results(project: Path, cache: Path, *, jobs: int, use_cache: bool, arch: list[str]) -> dict:
    ws = open_workspace(cwd=project)
    _, cells = ws.select(arch=arch)
    results = run_cells(cells, roots=list(ws.project.kernel_roots), cache_dir=cache,
                        options=RunOptions(jobs=jobs, use_cache=use_cache))
    assert all(r.ok for r in results), [r.error for r in results]
    return {cell.id: (result.analysis.sha256, result.options["num_stages"]) for cell, result in zip(cells, results)}


@pytest.mark.parametrize("jobs", [1, 2])
def test_cells_are_the_same_cold_and_warm_at_any_jobs_and_order(project, tmp_path, jobs):
    cache = tmp_path / "cache"
    cold = _results(project, cache, jobs=jobs, use_cache=False, arch=["sm_90", "gfx1100"])
    warm = _results(project, cache, jobs=jobs, use_cache=True, arch=["gfx1100", "sm_90"])
    assert cold == warm and len(cold) == len(KEPT["gfx1100"]) + len(KEPT["sm_90"])


def test_a_warm_check_after_a_pruner_edit_prunes_again(project, run_xisa):
    """The guarded config is one gfx1100's pruner keeps; after an edit to the pruner's helper it drops it, and the
    warm check must not answer from the cells compiled before."""
    _spec(project, "  - {name: mid, config: 1}\n", targets="[gfx1100]")
    assert run_xisa("bless", "-j", "1", cwd=project, process=True).code == 0
    assert run_xisa("check", "-j", "1", cwd=project, process=True).code == 0
    budget = project / "kernels" / "budget.py"
    budget.write_text(budget.read_text().replace("* stages", "* stages * 2"))
    out = run_xisa("check", "-j", "1", cwd=project, process=True)
    said = " ".join((out.out + out.err).split())   # the table wraps long lines
    assert out.code == 2 and "pruned away on this target: gfx1100's pruner keeps config 0 {" in said, said


def test_a_warm_check_after_a_pruner_edit_expands_config_all_again(project, run_xisa):
    """`config: all` on gfx1100 guarded configs 0 and 1; after the edit its pruner keeps config 0 alone, so config 1's
    golden guards a config no gfx1100 launch picks: unused, not a green check."""
    _spec(project, "  - {name: kept, config: all}\n", targets="[gfx1100]")
    assert run_xisa("bless", "-j", "1", cwd=project, process=True).code == 0
    blessed = sorted(p.parent.name for p in (project / "golden").rglob("gfx1100.yaml"))
    assert blessed == ["kept-config0", "kept-config1"]
    budget = project / "kernels" / "budget.py"
    budget.write_text(budget.read_text().replace("* stages", "* stages * 2"))
    out = run_xisa("check", "-j", "1", cwd=project, process=True)
    said = " ".join((out.out + out.err).split())
    assert out.code == 1 and "kept-config1" in said and "unused" in said, said


@pytest.mark.parametrize("function, rows, cols", [("sum_tiles", 4096, 4096), ("sum_tiles_modelled", 32768, 64)])
@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "sm_90"])
def test_the_kept_configs_are_tritons_own_prune_configs_on_that_targets_answers(project, function, rows, cols, arch):
    """The oracle: Autotuner.prune_configs itself, on real tensors passed by position, as the target answers."""
    import torch

    from xisa.compile.launch.loader import load_kernel_object
    from xisa.compile.gpu.target_driver import target_driver

    _spec(project, "  - {name: c, config: all}\n", function=function, targets=f"[{arch}]",
          args=f"{{x_ptr: {{tensor: fp16, shape: [{rows}, {cols}]}}, y_ptr: {{tensor: fp32, shape: [{rows}]}}, "
               f"K: {cols}, stride_m: {cols}}}")
    ws = open_workspace(cwd=project)
    cells = ws.select()[1]
    tuner = load_kernel_object(ws.specs[0], roots=list(ws.project.kernel_roots))
    x = torch.empty((rows, cols), dtype=torch.float16)
    tuner.nargs = dict(zip(tuner.arg_names, (x, torch.empty(rows), cols, cols)))
    with target_driver(cells[0].target):
        theirs = tuner.prune_configs({})
    assert [cell.config for cell in cells] == [tuner.configs.index(config) for config in theirs]
