"""Occupancy from register and LDS use and the target's tables, and whether one workgroup fits at all.

LLVM's `; Occupancy:` comment ignores Triton's dynamic LDS (and honours waves_per_eu), so xisa
computes its own figure; LLVM's is shown beside it.

A kernel whose one workgroup (block) exceeds a per-workgroup limit cannot launch: Triton's
`CompiledKernel._init_handles` raises OutOfResources when `metadata.shared` exceeds the device's
`max_shared_mem` (HIP `sharedMemPerBlock`, CUDA `MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`), and when
`num_warps * warp_size` exceeds the loaded function's `MAX_THREADS_PER_BLOCK` (which the register
use bounds). `*_launch_excess` list what exceeds; occupancy is 0 exactly when one does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol


class Target(Protocol):
    """What occupancy needs of a target (spec's `Target` is one): its cited occupancy table and wave size."""
    occupancy: Mapping[str, Any]
    warp_size: int | None


def _align(value: int, granule: int) -> int:
    return int(math.ceil(value / granule) * granule) if granule > 0 else value


@dataclass(frozen=True)
class Excess:
    """One per-workgroup (per-block) limit a kernel exceeds on a target: why it cannot launch there."""

    resource: str       # the resource key as reports name it (`lds_bytes`, `vgprs`, `registers`)
    used: int
    limit: int
    per: str            # what the limit is counted per: `per workgroup`, `per wave`, `per thread`, ...
    limit_key: str      # the target file's `occupancy` key the limit comes from

    def __str__(self) -> str:
        return f"{self.resource} {self.used} > {self.limit} {self.per}"

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "used": self.used, "limit": self.limit, "per": self.per,
                "limit_key": self.limit_key}


def amd_total_vgprs(target: Target, *, vgprs: int, agprs: int) -> int:
    """LLVM getTotalNumVGPRs: with unified AGPRs, arch VGPRs are rounded to 4 and AGPRs follow."""
    if target.occupancy.get("agpr") == "unified" and agprs > 0:
        return _align(vgprs, 4) + agprs
    return max(vgprs, agprs)


def amd_launch_excess(target: Target, *, vgprs: int, agprs: int, lds_bytes: int, num_warps: int) -> list[Excess]:
    """The per-workgroup limits a kernel exceeds on an AMD target: its LDS (HIP's `sharedMemPerBlock`,
    what Triton compares `metadata.shared` with), the VGPRs one wave may address, and the VGPRs of the
    waves one SIMD must hold at once (a workgroup's waves spread over the CU's SIMDs and must all be
    resident together for its barriers)."""
    occ = target.occupancy
    excess = []
    if lds_bytes > occ["lds_per_workgroup"]:
        excess.append(Excess("lds_bytes", lds_bytes, occ["lds_per_workgroup"], "per workgroup", "lds_per_workgroup"))
    total = amd_total_vgprs(target, vgprs=vgprs, agprs=agprs)
    if total > occ["vgpr_max_per_wave"]:
        excess.append(Excess("vgprs", total, occ["vgpr_max_per_wave"], "per wave", "vgpr_max_per_wave"))
    else:
        waves_per_simd = -(-max(num_warps, 1) // occ["simds_per_cu"])
        need = waves_per_simd * _align(max(total, 1), occ["vgpr_granule"])
        if need > occ["vgpr_budget"]:
            excess.append(Excess("vgprs", need, occ["vgpr_budget"],
                                 f"per SIMD ({waves_per_simd} waves of {max(num_warps, 1)} per workgroup)",
                                 "vgpr_budget"))
    return excess


def amd_waves_per_simd(target: Target, *, vgprs: int, agprs: int, sgprs: int, lds_bytes: int, num_warps: int) -> int:
    occ = target.occupancy
    max_waves = occ["max_waves_per_simd"]
    if amd_launch_excess(target, vgprs=vgprs, agprs=agprs, lds_bytes=lds_bytes, num_warps=num_warps):
        return 0
    total = amd_total_vgprs(target, vgprs=vgprs, agprs=agprs)
    waves = min(max_waves, occ["vgpr_budget"] // _align(max(total, 1), occ["vgpr_granule"]))
    if occ.get("sgpr_budget"):
        waves = min(waves, occ["sgpr_budget"] // _align(max(sgprs, 1), occ.get("sgpr_granule") or 1))
    if lds_bytes > 0:
        groups = occ["lds_per_cu"] // lds_bytes
        if occ.get("max_workgroups_per_cu"):
            groups = min(groups, occ["max_workgroups_per_cu"])
        # A workgroup's waves spread over the SIMDs that share the LDS.
        waves = min(waves, max(1, (groups * num_warps) // occ["simds_per_cu"]) if groups else 0)
    return max(waves, 0)


# Constants of cuda_occupancy.h that the target files leave out (same for CC 8.x-12.x).
_CUDA_DEFAULTS = {
    "max_threads_per_block": 1024,   # cudaDevAttrMaxThreadsPerBlock
    "sub_partitions": 4,             # cudaOccSubPartitionsPerMultiprocessor
    "smem_alloc_unit": 128,          # cudaOccSMemAllocationGranularity, CC 8+
}


def _cuda(occ: Mapping[str, Any], key: str) -> int:
    if key == "regs_per_block":      # cudaDevAttrMaxRegistersPerBlock = 64 K = the SM's register file
        return occ.get(key, occ["regs_per_sm"])
    return occ.get(key, _CUDA_DEFAULTS[key])


def _cuda_regs_per_warp(target: Target, regs: int) -> int:
    return _align(max(regs, 0) * (target.warp_size or 32), target.occupancy["reg_alloc_unit"])


def cuda_launch_excess(target: Target, *, regs: int, smem_bytes: int, num_warps: int) -> list[Excess]:
    """The per-block limits a kernel exceeds on an NVIDIA target: its shared memory (the opt-in maximum,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, what Triton compares `metadata.shared` with),
    its threads, its registers per thread, and its block's registers (cuda_occupancy.h
    cudaOccMaxBlocksPerSMRegsLimit: a block that does not fit the register file gets 0 blocks; the
    driver's MAX_THREADS_PER_BLOCK, which Triton compares `num_warps * 32` with, follows from it)."""
    occ = target.occupancy
    warp_size = target.warp_size or 32
    warps = max(num_warps, 1)
    excess = []
    if smem_bytes > occ["smem_per_block"]:
        excess.append(Excess("lds_bytes", smem_bytes, occ["smem_per_block"], "per block", "smem_per_block"))
    if warps * warp_size > _cuda(occ, "max_threads_per_block"):
        excess.append(Excess("threads", warps * warp_size, _cuda(occ, "max_threads_per_block"), "per block",
                             "max_threads_per_block"))
    if regs > occ["max_regs_per_thread"]:
        excess.append(Excess("registers", regs, occ["max_regs_per_thread"], "per thread", "max_regs_per_thread"))
    else:
        per_warp = _cuda_regs_per_warp(target, regs)
        need = per_warp * max(_align(warps, _cuda(occ, "sub_partitions")), warps)
        if need > _cuda(occ, "regs_per_block"):
            excess.append(Excess("registers", need, _cuda(occ, "regs_per_block"),
                                 f"per block ({regs} per thread x {warps} warps)", "regs_per_sm"))
    return excess


def cuda_warps_per_sm(target: Target, *, regs: int, smem_bytes: int, num_warps: int) -> int:
    """Resident warps per SM, following cudaOccMaxActiveBlocksPerMultiprocessor in the cuda_occupancy.h
    the Triton wheel carries (triton/backends/nvidia/include), with the default carveout (all shared
    memory), partitioned global caching off, and `smem_bytes` all of a block's shared memory.

    blocks = min(warp limit, register limit, shared-memory limit, max_blocks_per_sm); result = blocks * num_warps;
    0 when one block exceeds a per-block limit (`cuda_launch_excess`).
    """
    occ = target.occupancy
    warps = max(num_warps, 1)
    if cuda_launch_excess(target, regs=regs, smem_bytes=smem_bytes, num_warps=num_warps):
        return 0
    sub_partitions = _cuda(occ, "sub_partitions")

    # cudaOccMaxBlocksPerSMWarpsLimit
    limit_warps = occ["max_warps_per_sm"] // warps

    # cudaOccMaxBlocksPerSMRegsLimit: registers go to warps in units of reg_alloc_unit, each warp
    # lives in one of the register file's sub-partitions (regs_per_sm / 4 registers each).
    per_warp = _cuda_regs_per_warp(target, regs)
    if per_warp > 0:
        warps_per_partition = (occ["regs_per_sm"] // sub_partitions) // per_warp
        limit_regs = (warps_per_partition * sub_partitions) // warps
    else:
        limit_regs = occ["max_blocks_per_sm"]

    # cudaOccMaxBlocksPerSMSmemLimit: the driver reserves smem_reserved_per_block for each block;
    # the total is rounded up to the 128-byte granule; the SM has smem_per_sm (default carveout = the
    # maximum). (A block over smem_per_block, the opt-in maximum, was refused above.)
    reserved = occ.get("smem_reserved_per_block", 0)
    smem_block = _align(max(smem_bytes, 0) + reserved, _cuda(occ, "smem_alloc_unit"))
    limit_smem = occ["smem_per_sm"] // smem_block if smem_block > 0 else occ["max_blocks_per_sm"]

    blocks = min(limit_warps, limit_regs, limit_smem, occ["max_blocks_per_sm"])
    return max(blocks, 0) * warps
