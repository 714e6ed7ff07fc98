"""Occupancy: xisa's own figure against LLVM's, and the LDS limit LLVM cannot see."""

from __future__ import annotations

import pytest

from support import REPO
from xisa.analyze.occupancy import amd_waves_per_simd
from xisa.spec.targets import load_targets

TARGETS = load_targets([REPO / "targets"])


@pytest.mark.slow
def test_register_occupancy_equals_llvm_for_every_bundled_cell(corpus_cells):
    """LLVM's figure counts registers and ignores Triton's dynamic LDS; with LDS left out ours must agree."""
    compared = 0
    for cell in corpus_cells:
        if cell["status"] != "ok" or cell["options"].get("waves_per_eu"):
            continue
        res = cell["resources"]
        ours = amd_waves_per_simd(TARGETS[cell["target"]], vgprs=res["vgprs"], agprs=res["agprs"],
                                  sgprs=res["sgprs"], lds_bytes=0, num_warps=cell["options"]["num_warps"])
        assert ours == res["llvm_occupancy"], cell["kernel"] + ":" + cell["case"] + "@" + cell["target"]
        if res["lds_bytes"] == 0:
            assert res["occupancy"] == res["llvm_occupancy"]
        compared += 1
    assert compared >= 20


@pytest.mark.unit
def test_lds_limits_occupancy_where_llvm_does_not_see_it():
    gfx942 = TARGETS["gfx942"]
    # 64 VGPRs alone allow 8 waves per SIMD; 32 KiB of LDS per 4-wave workgroup allows 2 groups per CU,
    # i.e. 8 waves over 4 SIMDs = 2 per SIMD.
    assert amd_waves_per_simd(gfx942, vgprs=64, agprs=0, sgprs=32, lds_bytes=0, num_warps=4) == 8
    assert amd_waves_per_simd(gfx942, vgprs=64, agprs=0, sgprs=32, lds_bytes=32768, num_warps=4) == 2
    # gfx950 has 160 KiB: 5 such groups -> 20 waves / 4 SIMDs = 5
    assert amd_waves_per_simd(TARGETS["gfx950"], vgprs=64, agprs=0, sgprs=32, lds_bytes=32768, num_warps=4) == 5
    # more LDS than a workgroup may have: cannot launch
    assert amd_waves_per_simd(gfx942, vgprs=64, agprs=0, sgprs=32, lds_bytes=65537, num_warps=4) == 0


@pytest.mark.unit
@pytest.mark.parametrize("target,vgprs,agprs,expected", [
    ("gfx942", 128, 0, 4), ("gfx942", 256, 160, 1), ("gfx942", 129, 0, 3), ("gfx942", 100, 28, 4),
    ("gfx1100", 96, 0, 16), ("gfx1100", 97, 0, 12), ("gfx1100", 256, 0, 5), ("gfx1201", 192, 0, 8),
    # LLVM's '; Occupancy:' for these (targets/gfx90a.yaml, gfx1151.yaml): gfx1151 has gfx1100's 1.5x file
    # (gfx1150 would give 9 for 97 VGPRs); gfx90a is gfx942's unified 512.
    ("gfx1151", 96, 0, 16), ("gfx1151", 97, 0, 12), ("gfx1151", 256, 0, 5),
    ("gfx90a", 64, 0, 8), ("gfx90a", 65, 1, 7), ("gfx90a", 3, 61, 7), ("gfx90a", 129, 0, 3), ("gfx90a", 128, 128, 2),
])
def test_vgpr_granules(target, vgprs, agprs, expected):
    # gfx90a/gfx942: unified 512, granule 8, AGPRs after VGPRs rounded to 4; gfx11/12 wave32: 1536, granule 24.
    assert amd_waves_per_simd(TARGETS[target], vgprs=vgprs, agprs=agprs, sgprs=32, lds_bytes=0,
                              num_warps=4) == expected


@pytest.mark.unit
def test_lds_per_cu_of_the_added_targets():
    # What LLVM printed for a static-LDS kernel (targets/*.yaml sources): gfx90a has 64 KiB per CU, so
    # one 64 KiB 4-wave workgroup -> 1 wave per SIMD, 32 KiB -> 2; gfx1151 has 128 KiB per WGP, so two
    # 64 KiB 8-wave workgroups -> 16 waves / 4 SIMDs = 4; one byte over 64 KiB cannot launch on either.
    gfx90a, gfx1151 = TARGETS["gfx90a"], TARGETS["gfx1151"]
    assert amd_waves_per_simd(gfx90a, vgprs=2, agprs=0, sgprs=32, lds_bytes=65536, num_warps=4) == 1
    assert amd_waves_per_simd(gfx90a, vgprs=2, agprs=0, sgprs=32, lds_bytes=32768, num_warps=4) == 2
    assert amd_waves_per_simd(gfx1151, vgprs=2, agprs=0, sgprs=32, lds_bytes=65536, num_warps=8) == 4
    for target in (gfx90a, gfx1151):
        assert amd_waves_per_simd(target, vgprs=2, agprs=0, sgprs=32, lds_bytes=65537, num_warps=4) == 0
