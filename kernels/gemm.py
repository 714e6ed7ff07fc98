"""Tiled GEMM over bf16 or fp8 operands with fp32 accumulation.

C[M, N] = (A[M, K] @ B[K, N]) * a_scale * b_scale, written in C's dtype (bf16 or fp32).

fp8 operands: the dot runs on the fp8 operands directly where the target has fp8 matrix
instructions (gfx942 fnuz MFMA, gfx950 OCP MFMA, gfx12 fp8 WMMA, sm_90 wgmma). gfx11 has
none, so UPCAST_F16 converts the tiles to fp16 before an f16 x f16 -> f32 WMMA. The scales are
per tensor (two float32 values at scale_ptr) and applied once, in the epilogue.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_utils as cu


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, scale_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FP8_IN: tl.constexpr,       # operands are fp8: apply the per-tensor scales in the epilogue
    UPCAST_F16: tl.constexpr,   # convert fp8 tiles to fp16 before the dot (no fp8 matrix ops)
    EVEN_K: tl.constexpr = False,
):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M row tiles share the B column tiles in L2.
    per_group = GROUP_M * num_n
    group = pid // per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - k0
            a = tl.load(a_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        if UPCAST_F16:
            a = a.to(tl.float16)
            b = b.to(tl.float16)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if FP8_IN:
        acc = acc * (tl.load(scale_ptr) * tl.load(scale_ptr + 1))
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2)


def gemm_reference(a: torch.Tensor, b: torch.Tensor, scales: torch.Tensor | None = None,
                   out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp32 matmul of the operands' exact values, times the per-tensor scales."""
    c = a.float() @ b.float()
    if scales is not None:
        c = c * (scales[0].float() * scales[1].float())
    return c.to(out_dtype)


def gemm(a: torch.Tensor, b: torch.Tensor, scales: torch.Tensor | None = None, *,
         out_dtype: torch.dtype = torch.bfloat16, upcast_f16: bool = False,
         block_m: int = 64, block_n: int = 64, block_k: int = 32, group_m: int = 8,
         num_warps: int = 4, num_stages: int = 2) -> torch.Tensor:
    """Launch gemm_kernel. fp8 operands need `scales` (float32 [a_scale, b_scale])."""
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    fp8 = a.dtype in FP8_DTYPES
    if fp8 != (b.dtype in FP8_DTYPES):
        raise ValueError(f"A and B must both be fp8 or both not: {a.dtype}, {b.dtype}")
    if fp8 and scales is None:
        raise ValueError("fp8 operands need scales=[a_scale, b_scale]")
    if scales is None:
        scales = torch.ones(2, dtype=torch.float32, device=a.device)
    c = torch.empty((M, N), dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    gemm_kernel[grid](
        a, b, c, scales, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        FP8_IN=fp8, UPCAST_F16=upcast_f16, EVEN_K=(K % block_k == 0),
        num_warps=num_warps, num_stages=num_stages,
    )
    return c


def check_gemm(case) -> None:
    """C = A @ B (x the per-tensor scales for fp8 operands) on random operands of the spec's
    dtypes (fp8 in the case's own encoding) against the float32 product of the exact values."""
    gen = cu.generator(case, 3)
    a_args, c = case.args, case.constexprs
    M, N, K = a_args["M"], a_args["N"], a_args["K"]
    dt = cu.spec_dtype(case, "a_ptr")
    a = cu.randn(case, case.shape("a_ptr"), gen).to(dt)
    b = cu.randn(case, case.shape("b_ptr"), gen).to(cu.spec_dtype(case, "b_ptr"))
    out = cu.empty(case, "c_ptr")
    fp8 = bool(c["FP8_IN"])
    scales = torch.tensor([0.5, 0.25] if fp8 else [1.0, 1.0], dtype=torch.float32, device=case.device)
    assert list(a.shape) == [M, K] and list(b.shape) == [K, N] and list(out.shape) == [M, N]
    grid = (triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]),)
    case.launch(gemm_kernel, grid, a, b, out, scales, M, N, K,
                a_args["stride_am"], a_args["stride_ak"], a_args["stride_bk"], a_args["stride_bn"],
                a_args["stride_cm"], a_args["stride_cn"], **cu.launch_kwargs(case))
    ref = a.float() @ b.float()
    if fp8:
        ref = ref * (scales[0] * scales[1])
    # bf16 output: 2^-8 relative rounding; atol scaled to the typical magnitude sqrt(K).
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().mean()) + 1e-6,
                               msg=lambda m: f"gemm ({dt}): {m}")
