"""Occupancy from register and LDS use and the target's tables.

LLVM's `; Occupancy:` comment ignores Triton's dynamic LDS (and honours waves_per_eu), so xisa
computes its own figure; LLVM's is shown beside it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Protocol


class Target(Protocol):
    """What occupancy needs of a target (spec's `Target` is one): its cited occupancy table and wave size."""
    occupancy: Mapping[str, Any]
    warp_size: int | None


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
    """Resident warps per SM, following cudaOccMaxActiveBlocksPerMultiprocessor in the cuda_occupancy.h
    the Triton wheel carries (triton/backends/nvidia/include), with the default carveout (all shared
    memory), partitioned global caching off, and `smem_bytes` all of a block's shared memory.

    blocks = min(warp limit, register limit, shared-memory limit, max_blocks_per_sm); result = blocks * num_warps.
    """
    occ = target.occupancy
    warp_size = target.warp_size or 32
    warps = max(num_warps, 1)
    # Constants of cuda_occupancy.h that the target files leave out (same for CC 8.x-12.x):
    max_threads_per_block = occ.get("max_threads_per_block", 1024)  # cudaDevAttrMaxThreadsPerBlock
    sub_partitions = occ.get("sub_partitions", 4)                   # cudaOccSubPartitionsPerMultiprocessor
    regs_per_block = occ.get("regs_per_block", occ["regs_per_sm"])  # cudaDevAttrMaxRegistersPerBlock = 64 K
    smem_granule = occ.get("smem_alloc_unit", 128)                  # cudaOccSMemAllocationGranularity, CC 8+

    # cudaOccMaxBlocksPerSMWarpsLimit
    if warps * warp_size > max_threads_per_block:
        return 0
    limit_warps = occ["max_warps_per_sm"] // warps

    # cudaOccMaxBlocksPerSMRegsLimit: registers go to warps in units of reg_alloc_unit, each warp
    # lives in one of the register file's sub-partitions (regs_per_sm / 4 registers each).
    if regs > occ["max_regs_per_thread"]:
        return 0
    per_warp = _align(max(regs, 0) * warp_size, occ["reg_alloc_unit"])
    if per_warp * _align(warps, sub_partitions) > regs_per_block or per_warp * warps > regs_per_block:
        return 0
    if per_warp > 0:
        warps_per_partition = (occ["regs_per_sm"] // sub_partitions) // per_warp
        limit_regs = (warps_per_partition * sub_partitions) // warps
    else:
        limit_regs = occ["max_blocks_per_sm"]

    # cudaOccMaxBlocksPerSMSmemLimit: the driver reserves smem_reserved_per_block for each block;
    # the total is rounded up to the 128-byte granule; a block may use smem_per_block (opt-in) plus
    # the reservation; the SM has smem_per_sm (default carveout = the maximum).
    reserved = occ.get("smem_reserved_per_block", 0)
    smem_block = _align(max(smem_bytes, 0) + reserved, smem_granule)
    if smem_block > occ["smem_per_block"] + reserved:
        return 0
    limit_smem = occ["smem_per_sm"] // smem_block if smem_block > 0 else occ["max_blocks_per_sm"]

    blocks = min(limit_warps, limit_regs, limit_smem, occ["max_blocks_per_sm"])
    return max(blocks, 0) * warps
