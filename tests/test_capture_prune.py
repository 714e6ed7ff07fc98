"""`xisa capture` of autotuners whose pruner makes configs (gemlite 0.6's shape, re-created in tests/fixtures/pruned:
gemlite itself makes CUDA tensors at import), and what capture says when no launch could be recorded."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from support import FIXTURES

LAUNCH = """
import torch
import triton
from tiles import sum_tiles_rewritten

x = torch.empty((64, 4096), dtype=torch.float16)
y = torch.empty(64, dtype=torch.float32)
# M by position (the pruner reads nargs['M']), WIDE by keyword (it reads kwargs['WIDE']), as gemlite launches
sum_tiles_rewritten[lambda meta: (triton.cdiv(64, meta["BLOCK_M"]),)](x, y, 64, 4096, 4096, WIDE=True)
"""

STACKED = """
import torch
import triton
from tiles import CONFIGS, _sum_tiles

x, y = torch.empty((64, 64), dtype=torch.float16), torch.empty(64)
tuned = triton.autotune(CONFIGS, key=["K"])(_sum_tiles)
# what a library's own config cache would hold: none of the configs, nor one a pruner made
tuned.cache[(64, "torch.float16", "torch.float32")] = triton.Config({"BLOCK_M": 32, "BLOCK_K": 32}, num_warps=2)
tuned[(1,)](x, y, 64, 64)
"""


@pytest.fixture
def project(tmp_path) -> Path:
    dest = tmp_path / "pruned"
    shutil.copytree(FIXTURES / "pruned", dest, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "kernels" / "launch.py").write_text(LAUNCH)
    (dest / "kernels" / "stacked.py").write_text(STACKED)
    return dest


@pytest.mark.parametrize("answer_as, stages", [("sm_90", 3), ("gfx942", 2)])
def test_a_pruner_that_makes_configs_is_captured_and_compiles_with_no_hand_edit(project, run_xisa, answer_as, stages):
    """The launch picks the first config the pruner made (`--config-policy first`): none of the autotuner's own, so
    capture must match it among what the pruning kept, and the compile (pruning again as that target) finds it."""
    out = run_xisa("capture", "--no-run", "--no-check", "--as", answer_as, "--out", "captured", "--", sys.executable,
                   "launch.py", cwd=project / "kernels", process=True)
    assert out.code == 0, out.err
    (case,) = yaml.safe_load((project / "kernels" / "captured" / "sum_tiles_rewritten.yaml").read_text())["cases"]
    assert case["config"] == {"BLOCK_M": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 2}
    compiled = run_xisa("compile", "--spec", "kernels/captured", "--arch", answer_as, "--top", "0", cwd=project)
    assert compiled.code == 0, compiled.out + compiled.err


def test_a_capture_whose_every_launch_was_refused_says_why(project, run_xisa):
    out = run_xisa("capture", "--no-run", "--no-check", "--config-policy", "cached", "--out", "captured", "--",
                   sys.executable, "stacked.py",
                   cwd=project / "kernels", process=True)
    said = " ".join(out.err.split())
    assert out.code == 2 and "made no Triton kernel launch" not in said, said
    assert "no launch was recorded" in said and "none of its 4 configs" in said and "BLOCK_M: 32" in said, said
