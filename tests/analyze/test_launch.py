"""Launchability: one workgroup (block) of a kernel against its target file's per-workgroup limits, and the
spec's `launchable` expectation. Every figure comes from the bundled target files."""

from __future__ import annotations

import pytest

from support import REPO
from xisa.analyze.expect import LAUNCHABLE, evaluate, expected_launchable, judge_launch, parse_expectations
from xisa.analyze.model import Analysis
from xisa.analyze.occupancy import amd_waves_per_simd, cuda_warps_per_sm
from xisa.errors import SpecError
from xisa.spec.targets import load_targets

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

TARGETS = load_targets([REPO / "targets"], root=REPO)
# The key each backend's shared memory per workgroup (block) is limited by in the target files.
LDS_LIMIT_KEY = {"hip": "lds_per_workgroup", "cuda": "smem_per_block"}


def _resources(target, *, lds_bytes: int) -> dict:
    """A small kernel's resources on `target` (few registers) with the given LDS."""
    if target.backend == "hip":
        return {"vgprs": 32, "agprs": 0, "sgprs": 32, "lds_bytes": lds_bytes}
    return {"registers": 32, "lds_bytes": lds_bytes}


def _occupancy(target, res: dict, num_warps: int) -> int:
    if target.backend == "hip":
        return amd_waves_per_simd(target, vgprs=res["vgprs"], agprs=res["agprs"], sgprs=res["sgprs"],
                                  lds_bytes=res["lds_bytes"], num_warps=num_warps)
    return cuda_warps_per_sm(target, regs=res["registers"], smem_bytes=res["lds_bytes"], num_warps=num_warps)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_lds_exactly_at_the_limit_launches_and_one_byte_more_does_not(name):
    target = TARGETS[name]
    limit_key = LDS_LIMIT_KEY[target.backend]
    limit = target.occupancy[limit_key]
    at = _resources(target, lds_bytes=limit)
    assert target.handler.launch_excess(at, num_warps=4, target=target) == []
    assert _occupancy(target, at, 4) > 0
    over = _resources(target, lds_bytes=limit + 1)
    [excess] = target.handler.launch_excess(over, num_warps=4, target=target)
    assert (excess.resource, excess.used, excess.limit, excess.limit_key) == ("lds_bytes", limit + 1, limit, limit_key)
    assert _occupancy(target, over, 4) == 0     # occupancy 0 exactly when it cannot launch


def test_the_limit_is_per_target():
    # gfx950's workgroups may hold more LDS than gfx942's: the same kernel launches on one only.
    gfx942, gfx950 = TARGETS["gfx942"], TARGETS["gfx950"]
    lds = gfx942.occupancy["lds_per_workgroup"] + 1
    assert lds <= gfx950.occupancy["lds_per_workgroup"]
    res = _resources(gfx942, lds_bytes=lds)
    assert gfx942.handler.launch_excess(res, num_warps=8, target=gfx942)
    assert gfx950.handler.launch_excess(res, num_warps=8, target=gfx950) == []


@pytest.mark.parametrize("name", [n for n in sorted(TARGETS) if TARGETS[n].backend == "cuda"])
def test_nvidia_registers_per_thread_and_per_block(name):
    target = TARGETS[name]
    occ = target.occupancy
    most = occ["max_regs_per_thread"]
    [per_thread] = target.handler.launch_excess({"registers": most + 1, "lds_bytes": 0}, num_warps=1, target=target)
    assert (per_thread.resource, per_thread.used, per_thread.limit) == ("registers", most + 1, most)
    # The most warps a block of `most`-register threads may have: the register file / one warp's allocation,
    # in whole sub-partition groups (cuda_occupancy.h rounds the warps up to 4).
    per_warp = -(-most * target.warp_size // occ["reg_alloc_unit"]) * occ["reg_alloc_unit"]
    fits = occ["regs_per_sm"] // per_warp // 4 * 4
    res = {"registers": most, "lds_bytes": 0}
    assert target.handler.launch_excess(res, num_warps=fits, target=target) == []
    assert cuda_warps_per_sm(target, regs=most, smem_bytes=0, num_warps=fits) > 0
    [block] = target.handler.launch_excess(res, num_warps=fits + 1, target=target)
    assert block.resource == "registers" and block.used > block.limit == occ["regs_per_sm"]
    assert cuda_warps_per_sm(target, regs=most, smem_bytes=0, num_warps=fits + 1) == 0


@pytest.mark.parametrize("name", [n for n in sorted(TARGETS) if TARGETS[n].backend == "hip"])
def test_amd_vgprs_of_the_waves_one_simd_holds(name):
    target = TARGETS[name]
    occ = target.occupancy
    simds, most = occ["simds_per_cu"], occ["vgpr_max_per_wave"]
    res = {"vgprs": most, "agprs": 0, "sgprs": 32, "lds_bytes": 0}
    allocated = -(-most // occ["vgpr_granule"]) * occ["vgpr_granule"]
    waves_fit = occ["vgpr_budget"] // allocated     # waves of `most` VGPRs one SIMD holds
    assert target.handler.launch_excess(res, num_warps=simds * waves_fit, target=target) == []
    [excess] = target.handler.launch_excess(res, num_warps=simds * waves_fit + 1, target=target)
    assert excess.resource == "vgprs" and excess.used > excess.limit == occ["vgpr_budget"]
    [wave] = target.handler.launch_excess({**res, "vgprs": most + 1}, num_warps=1, target=target)
    assert (wave.used, wave.limit) == (most + 1, most)


def _expect(mapping: dict):
    return parse_expectations(mapping, path="k.yaml", field="cases[0]")


def test_launchable_must_be_true_or_false_and_a_typo_is_named():
    with pytest.raises(SpecError, match="not true or false"):
        _expect({"gfx942": {LAUNCHABLE: "no"}})
    with pytest.raises(SpecError, match="did you mean 'launchable'"):
        _expect({"gfx942": {"launchabel": False}})
    assert expected_launchable(_expect({"gfx942": {LAUNCHABLE: False}}), "gfx942") is False
    assert expected_launchable(_expect({"gfx942": {LAUNCHABLE: False}}), "gfx950") is None
    # A contradiction keeps the default: it cannot hide a cell that does not launch.
    assert expected_launchable(_expect({"gfx9*": {LAUNCHABLE: True}, "gfx942": {LAUNCHABLE: False}}), "gfx942") is True


def test_expected_not_to_launch_but_launches_fails_as_an_expectation():
    expect = _expect({"gfx942": {LAUNCHABLE: False}})
    analysis = Analysis(isa="amdgcn", sha256="0" * 64, instructions=0, blocks=0, histogram={}, base_histogram={},
                        classes={}, resources={}, stream_text="")
    [failure] = evaluate(expect, "gfx942", analysis, launchable=True)
    assert str(failure) == "launchable == false expected (target pattern 'gfx942'), got true"
    assert evaluate(expect, "gfx942", analysis, launchable=False) == []
    # `launchable: true` on a cell that does not launch is its launch verdict's to report, not a failure here.
    assert evaluate(_expect({"gfx942": {LAUNCHABLE: True}}), "gfx942", analysis, launchable=False) == []


def test_a_launch_names_the_resource_the_use_the_limit_and_the_target_file():
    target = TARGETS["gfx942"]
    limit = target.occupancy["lds_per_workgroup"]
    excess = target.handler.launch_excess(_resources(target, lds_bytes=limit + 4096), num_warps=4, target=target)
    launch = judge_launch((), "gfx942", excess, target_file=target.path)
    assert launch.unexpected
    assert launch.reason() == f"lds_bytes {limit + 4096} > {limit} per workgroup (targets/gfx942.yaml)"
    expected = judge_launch(_expect({"gfx942": {LAUNCHABLE: False}}), "gfx942", excess, target_file=target.path)
    assert not expected.launchable and not expected.unexpected
