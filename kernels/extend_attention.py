"""Prefill / extend attention over a paged bf16 KV cache, causal within the extend part.

Each sequence b has kv_len = kv_indptr[b+1] - kv_indptr[b] keys at slots
kv_indices[kv_indptr[b]:kv_indptr[b+1]] (prefix first, then the extend tokens, whose K/V rows
are already written) and q_len = qo_indptr[b+1] - qo_indptr[b] new queries: the last q_len of
the kv_len positions. Query i (position prefix + i) sees keys 0..prefix + i. GQA: GROUP query
heads per kv head. On gfx11 fp8 caches, seed 000's route is kv_dequant (rows decoded once to
bf16) and then this kernel on identity indices.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_utils as cu


@triton.jit
def extend_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    qo_indptr_ptr, kv_indptr_ptr, kv_indices_ptr,
    sm_scale,
    stride_qt, stride_qh,
    stride_ks, stride_kh, stride_vs, stride_vh,
    stride_ot, stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Grid: (query blocks of the longest extend, batch, query heads)."""
    mblk = tl.program_id(0)
    b = tl.program_id(1)
    h = tl.program_id(2)
    kvh = h // GROUP

    q_start = tl.load(qo_indptr_ptr + b)
    q_len = tl.load(qo_indptr_ptr + b + 1) - q_start
    if mblk * BLOCK_M >= q_len:
        return
    kv_start = tl.load(kv_indptr_ptr + b)
    kv_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    prefix = kv_len - q_len

    offs_m = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < q_len
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + (q_start + offs_m).to(tl.int64)[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                mask=m_mask[:, None], other=0.0)
    qk_scale = sm_scale * 1.4426950408889634
    q_pos = prefix + offs_m

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    kv_hi = tl.minimum(kv_len, prefix + (mblk + 1) * BLOCK_M)
    for n0 in range(0, kv_hi, BLOCK_N):
        offs = n0 + offs_n
        n_mask = offs < kv_hi
        slots = tl.load(kv_indices_ptr + kv_start + offs, mask=n_mask, other=0).to(tl.int64)
        k = tl.load(k_ptr + slots[:, None] * stride_ks + kvh * stride_kh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        visible = n_mask[None, :] & (offs[None, :] <= q_pos[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(qk - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + slots[:, None] * stride_vs + kvh * stride_vh + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(o_ptr + (q_start + offs_m).to(tl.int64)[:, None] * stride_ot + h * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=m_mask[:, None])


def extend_attention_reference(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    """float32 causal attention of each sequence's extend queries over its paged keys."""
    H, kvh = q.shape[1], k_cache.shape[1]
    group = H // kvh
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(len(qo_indptr) - 1):
        qs, qe = int(qo_indptr[b]), int(qo_indptr[b + 1])
        idx = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache[idx].float().repeat_interleave(group, dim=1)
        v = v_cache[idx].float().repeat_interleave(group, dim=1)
        n, ql = len(idx), qe - qs
        s = torch.einsum("qhd,nhd->hqn", q[qs:qe].float(), k) * sm_scale
        causal = torch.arange(n, device=q.device)[None, :] <= (n - ql + torch.arange(ql, device=q.device))[:, None]
        s = s.masked_fill(~causal[None], float("-inf"))
        out[qs:qe] = torch.einsum("hqn,nhd->qhd", torch.softmax(s, dim=-1), v)
    return out.to(q.dtype)


def extend_attention(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, *,
                     block_m: int = 64, block_n: int = 32, num_warps: int = 4, num_stages: int = 1):
    """Launch extend_attention_kernel: q [total_q, H, D] bf16, caches [slots, kv_heads, D] bf16."""
    if k_cache.dtype != torch.bfloat16 or v_cache.dtype != torch.bfloat16:
        raise ValueError("extend_attention reads a bf16 cache; dequantize fp8/int8 rows with kv_dequant first")
    T, H, D = q.shape
    kvh = k_cache.shape[1]
    if H % kvh:
        raise ValueError(f"{H} query heads are not a multiple of {kvh} kv heads")
    B = len(qo_indptr) - 1
    max_q = int((qo_indptr[1:] - qo_indptr[:-1]).max()) if B else 0
    o = torch.empty_like(q)
    grid = (triton.cdiv(max(max_q, 1), block_m), B, H)
    extend_attention_kernel[grid](
        q, k_cache, v_cache, o, qo_indptr, kv_indptr, kv_indices, sm_scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        o.stride(0), o.stride(1),
        GROUP=H // kvh, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )
    return o


def check_extend_attention(case) -> None:
    """One sequence: the spec's extend chunk (q's rows) after a prefix of a quarter of its length,
    at random pool slots, against the float32 causal reference."""
    dev, gen = case.device, cu.generator(case, 2)
    a, c = case.args, case.constexprs
    T, H, D = case.shape("q_ptr")
    slots, kvh, _ = case.shape("k_ptr")
    prefix = min(T // 4 + 3, slots - T)
    q = cu.randn(case, (T, H, D), gen, torch.bfloat16)
    k = cu.randn(case, (slots, kvh, D), gen, torch.bfloat16)
    v = cu.randn(case, (slots, kvh, D), gen, torch.bfloat16)
    o = cu.empty(case, "o_ptr")
    qo_indptr = torch.tensor([0, T], dtype=torch.int32, device=dev)
    kv_indptr = torch.tensor([0, prefix + T], dtype=torch.int32, device=dev)
    kv_indices = torch.randperm(slots, generator=gen, device=dev).to(torch.int32)[:case.shape("kv_indices_ptr")[0]]
    assert list(qo_indptr.shape) == case.shape("qo_indptr_ptr") and list(kv_indptr.shape) == case.shape("kv_indptr_ptr")
    grid = (triton.cdiv(T, c["BLOCK_M"]), 1, H)
    case.launch(extend_attention_kernel, grid, q, k, v, o, qo_indptr, kv_indptr, kv_indices, a["sm_scale"],
                a["stride_qt"], a["stride_qh"], a["stride_ks"], a["stride_kh"], a["stride_vs"], a["stride_vh"],
                a["stride_ot"], a["stride_oh"], **cu.launch_kwargs(case))
    ref = extend_attention_reference(q, k, v, qo_indptr, kv_indptr, kv_indices, a["sm_scale"])
    cu.assert_close(o, ref, tol=2e-2, what=f"extend attention (prefix {prefix}, extend {T})")
