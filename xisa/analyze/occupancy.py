"""Occupancy from register and LDS use and the target's tables.

LLVM's `; Occupancy:` comment ignores Triton's dynamic LDS (and honours waves_per_eu), so xisa
computes its own figure; LLVM's is shown beside it.
"""

from __future__ import annotations

import math

from xisa.target import Target


def _align(value: int, granule: int) -> int:
    return int(math.ceil(value / granule) * granule) if granule > 0 else value


def amd_waves_per_simd(target: Target, *, vgprs: int, agprs: int, sgprs: int, lds_bytes: int, num_warps: int) -> int:
    occ = target.occupancy
    max_waves = occ["max_waves_per_simd"]
    # LLVM getTotalNumVGPRs: with unified AGPRs, arch VGPRs are rounded to 4 and AGPRs follow.
    if occ.get("agpr") == "unified" and agprs > 0:
        total = _align(vgprs, 4) + agprs
    else:
        total = max(vgprs, agprs)
    if total > occ["vgpr_max_per_wave"]:
        return 0
    waves = min(max_waves, occ["vgpr_budget"] // _align(max(total, 1), occ["vgpr_granule"]))
    if occ.get("sgpr_budget"):
        waves = min(waves, occ["sgpr_budget"] // _align(max(sgprs, 1), occ.get("sgpr_granule") or 1))
    if lds_bytes > 0:
        if lds_bytes > occ["lds_per_workgroup"]:
            return 0
        groups = occ["lds_per_cu"] // lds_bytes
        if occ.get("max_workgroups_per_cu"):
            groups = min(groups, occ["max_workgroups_per_cu"])
        # A workgroup's waves spread over the SIMDs that share the LDS.
        waves = min(waves, max(1, (groups * num_warps) // occ["simds_per_cu"]) if groups else 0)
    return max(waves, 0)


def cuda_warps_per_sm(target: Target, *, regs: int, smem_bytes: int, num_warps: int) -> int:
    occ = target.occupancy
    per_warp = _align(max(regs, 1) * 32, occ["reg_alloc_unit"])
    if regs > occ["max_regs_per_thread"]:
        return 0
    blocks = occ["max_blocks_per_sm"]
    blocks = min(blocks, occ["max_warps_per_sm"] // num_warps)
    blocks = min(blocks, occ["regs_per_sm"] // (per_warp * num_warps))
    if smem_bytes > occ["smem_per_block"]:
        return 0
    smem_block = smem_bytes + occ["smem_reserved_per_block"]
    blocks = min(blocks, occ["smem_per_sm"] // smem_block)
    return blocks * num_warps
