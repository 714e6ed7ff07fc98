"""Split-KV grouped (GQA) decode attention over a paged KV cache: stage 1 and the reduce stage.

One decode token per sequence. The KV cache holds one row per slot, [slots, kv_heads, head_dim],
and a sequence's keys are the slots kv_indices[kv_indptr[b] : kv_indptr[b + 1]] (a page table
with one-token pages). KV formats (constexpr KV_FMT): bf16; fp8 e4m3 (OCP, stored as uint8
codes) with a float32 scale per (token, kv head); int8 with the same scales.

Stage 1 (grid: batch x kv heads x splits) runs the GROUP query heads that share a kv head
together as the M side of the dots, over one split of the keys, and writes the split's
normalized partial output and its log-sum-exp. The reduce stage (grid: batch x query heads)
merges the splits.

The fp8 reader is a constexpr (see kv_formats.py) picked per target by `decode_config`:
the gfx11 reader decodes e4m3 codes to fp16 bit patterns of value/256 with integer ops, Q is
cast to fp16, the 256 is folded into the K and V scales, and both dots run as
v_wmma_f32_16x16x16_f16. The per-token scales are applied to the scores (K) and to the
probabilities (V), never to the tiles, so decoded tiles are exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import check_utils as cu
from .kv_formats import (KV_BF16, KV_FP8, READER_GFX11, KV_FORMATS, READERS, as_codes,
                         decode_kv_tile, dequant_rows_reference, kv_format_of, quantize_rows,
                         reader_for_arch)

LOG2E = 1.4426950408889634


@triton.jit
def decode_stage1_kernel(
    q_ptr, k_ptr, v_ptr, k_scale_ptr, v_scale_ptr,
    kv_indptr_ptr, kv_indices_ptr,
    part_out_ptr, part_lse_ptr,
    sm_scale, num_splits,
    stride_qb, stride_qh,
    stride_ks, stride_kh, stride_vs, stride_vh,
    stride_scale_s,
    stride_pb, stride_ph, stride_psplit,
    stride_lb, stride_lh,
    GROUP: tl.constexpr,        # query heads per kv head
    BLOCK_H: tl.constexpr,      # GROUP padded to the dot's minimum M (16)
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,      # keys per tile
    KV_FMT: tl.constexpr,
    READER: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)

    seq_start = tl.load(kv_indptr_ptr + b)
    seq_len = tl.load(kv_indptr_ptr + b + 1) - seq_start
    split_len = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    head_mask = offs_h < GROUP
    heads = kvh * GROUP + offs_h
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)

    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=head_mask[:, None], other=0.0)
    # The gfx11 reader turns fp8 and int8 tiles into fp16 (fp8 as value/256): Q follows.
    if READER == READER_GFX11 and KV_FMT != KV_BF16:
        q = q.to(tl.float16)
    else:
        q = q.to(tl.bfloat16)
    if READER == READER_GFX11 and KV_FMT == KV_FP8:
        fold = 256.0
    else:
        fold = 1.0
    qk_scale = sm_scale * 1.4426950408889634  # scores in log2 units

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, HEAD_DIM), dtype=tl.float32)

    for n0 in range(start, end, BLOCK_N):
        offs = n0 + offs_n
        key_mask = offs < end
        slots = tl.load(kv_indices_ptr + seq_start + offs, mask=key_mask, other=0).to(tl.int64)
        k_codes = tl.load(k_ptr + slots[:, None] * stride_ks + kvh * stride_kh + offs_d[None, :],
                          mask=key_mask[:, None], other=0)
        k = decode_kv_tile(k_codes, KV_FMT, READER)
        qk = tl.dot(q, tl.trans(k))
        if KV_FMT == KV_BF16:
            qk = qk * qk_scale
        else:
            k_scale = tl.load(k_scale_ptr + slots * stride_scale_s + kvh, mask=key_mask, other=0.0)
            qk = qk * (k_scale * (qk_scale * fold))[None, :]
        qk = tl.where(key_mask[None, :], qk, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        m_i = m_new

        v_codes = tl.load(v_ptr + slots[:, None] * stride_vs + kvh * stride_vh + offs_d[None, :],
                          mask=key_mask[:, None], other=0)
        v = decode_kv_tile(v_codes, KV_FMT, READER)
        if KV_FMT != KV_BF16:
            v_scale = tl.load(v_scale_ptr + slots * stride_scale_s + kvh, mask=key_mask, other=0.0)
            p = p * (v_scale * fold)[None, :]
        acc = tl.dot(p.to(v.dtype), v, acc)

    # A split with no keys stores lse = -inf and a zero output; the reduce gives it weight 0.
    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    lse = tl.where(has_keys, (m_i + tl.log2(tl.where(has_keys, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    tl.store(part_out_ptr + b * stride_pb + heads[:, None] * stride_ph + split * stride_psplit + offs_d[None, :],
             out, mask=head_mask[:, None])
    tl.store(part_lse_ptr + b * stride_lb + heads * stride_lh + split, lse, mask=head_mask)


@triton.jit
def decode_reduce_kernel(
    part_out_ptr, part_lse_ptr, out_ptr,
    num_splits,
    stride_pb, stride_ph, stride_psplit,
    stride_lb, stride_lh,
    stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,      # splits merged per step
):
    """Merge the splits of one (sequence, query head): out = sum_s w_s * o_s / sum_s w_s with
    w_s = exp(lse_s - max lse), BLOCK_S splits at a time with a running maximum."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    m = float("-inf")
    denom = 0.0
    acc = tl.zeros((HEAD_DIM,), dtype=tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        s_mask = s0 + offs_s < num_splits
        lse = tl.load(part_lse_ptr + b * stride_lb + h * stride_lh + s0 + offs_s, mask=s_mask,
                      other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        w = tl.exp(lse - m_safe)
        parts = tl.load(part_out_ptr + b * stride_pb + h * stride_ph + (s0 + offs_s)[:, None] * stride_psplit
                        + offs_d[None, :], mask=s_mask[:, None], other=0.0)
        acc = acc * alpha + tl.sum(parts * w[:, None], 0)
        denom = denom * alpha + tl.sum(w, 0)
        m = m_new
    out = acc / tl.where(denom > 0, denom, 1.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty))


@dataclass(frozen=True)
class DecodeConfig:
    """Per-target launch configuration of stage 1."""
    block_n: int
    num_stages: int
    num_warps: int
    min_split_len: int
    splits_per_cu: int
    max_splits: int


def decode_config(arch: str, kv_format: str, head_dim: int = 128) -> DecodeConfig:
    """Launch configuration per target. gfx11: 16-key tiles, 1 stage, 2 warps, short splits and
    up to 8 programs per CU (seed 000's RDNA3 settings); gfx12: 32-key tiles, 16 for fp8 at
    head dim 256 (32 spills ~400 VGPRs there); wave64 CDNA: 64-key tiles."""
    if arch.startswith("gfx11"):
        return DecodeConfig(16, 1, 2, 32, 8, 256)
    if arch.startswith("gfx12"):
        return DecodeConfig(16 if kv_format == "fp8" and head_dim > 128 else 32, 2, 4, 64, 4, 128)
    if arch.startswith("gfx9"):
        return DecodeConfig(64, 2, 4, 128, 2, 64)
    return DecodeConfig(64, 2, 4, 128, 2, 64)


def num_kv_splits(cfg: DecodeConfig, batch: int, kv_heads: int, max_seq_len: int, num_cus: int) -> int:
    """Splits per sequence: enough programs to fill splits_per_cu per CU, each split at least
    min_split_len keys, capped at max_splits."""
    want = max(1, (cfg.splits_per_cu * num_cus) // max(1, batch * kv_heads))
    by_len = max(1, max_seq_len // cfg.min_split_len)
    return max(1, min(want, by_len, cfg.max_splits))


def decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                               k_scale: torch.Tensor | None = None,
                               v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """float32 attention of q [B, H, D] over each sequence's dequantized rows; returns q's dtype."""
    B, H, D = q.shape
    kvh = k_cache.shape[1]
    group = H // kvh
    out = torch.empty(B, H, v_cache.shape[-1], dtype=torch.float32, device=q.device)
    for b in range(B):
        idx = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = dequant_rows_reference(k_cache[idx], None if k_scale is None else k_scale[idx])
        v = dequant_rows_reference(v_cache[idx], None if v_scale is None else v_scale[idx])
        k = k.repeat_interleave(group, dim=1)  # [n, H, D]
        v = v.repeat_interleave(group, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), k) * sm_scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("hn,nhd->hd", p, v)
    return out.to(q.dtype)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                     k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None, *,
                     arch: str = "gfx942", reader: str | None = None, num_cus: int = 304,
                     splits: int | None = None, config: DecodeConfig | None = None) -> torch.Tensor:
    """Launch stage 1 and the reduce. q [B, H, D] bf16; caches [slots, kv_heads, D] in bf16,
    fp8 e4m3fn (or its uint8 view) or int8; scales [slots, kv_heads] float32 for quantized caches.
    The reader and launch configuration default to what `arch` uses."""
    fmt = kv_format_of(k_cache)
    if kv_format_of(v_cache) != fmt:
        raise ValueError(f"K and V caches differ in format: {k_cache.dtype} vs {v_cache.dtype}")
    if fmt != "bf16" and (k_scale is None or v_scale is None):
        raise ValueError(f"a {fmt} KV cache needs k_scale and v_scale")
    B, H, D = q.shape
    kvh = k_cache.shape[1]
    if H % kvh:
        raise ValueError(f"{H} query heads are not a multiple of {kvh} kv heads")
    group = H // kvh
    cfg = config or decode_config(arch, fmt, D)
    reader = reader or reader_for_arch(arch, fmt)
    kc, vc = as_codes(k_cache), as_codes(v_cache)
    if k_scale is None:
        k_scale = v_scale = torch.ones(1, 1, dtype=torch.float32, device=q.device)
    max_len = int((kv_indptr[1:] - kv_indptr[:-1]).max()) if B else 0
    n_split = splits or num_kv_splits(cfg, B, kvh, max_len, num_cus)
    part = torch.empty(B, H, n_split, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, n_split, dtype=torch.float32, device=q.device)
    decode_stage1_kernel[(B, kvh, n_split)](
        q, kc, vc, k_scale, v_scale, kv_indptr, kv_indices, part, lse,
        sm_scale, n_split,
        q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), vc.stride(0), vc.stride(1),
        k_scale.stride(0), part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        GROUP=group, BLOCK_H=max(16, triton.next_power_of_2(group)), HEAD_DIM=D, BLOCK_N=cfg.block_n,
        KV_FMT=KV_FORMATS[fmt], READER=READERS[reader],
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    out = torch.empty(B, H, D, dtype=q.dtype, device=q.device)
    decode_reduce_kernel[(B, H)](
        part, lse, out, n_split,
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
        out.stride(0), out.stride(1),
        HEAD_DIM=D, BLOCK_S=min(16, triton.next_power_of_2(n_split)), num_warps=4,
    )
    return out


# --- runtime checks (xisa's on-device tier) ----------------------------------------------------

def _seq_lens(batch: int, slots: int, gen, device) -> list[int]:
    """Sequence lengths for a decode batch: a 1-key and a short sequence, the rest random, the
    total at most half the pool (so the page table is a random subset of the slots)."""
    cap = max(2, slots // (2 * batch))
    lens = torch.randint(1, cap + 1, (batch,), generator=gen, device=device).tolist()
    lens[0] = 1
    if batch > 1:
        lens[1] = min(cap, 37)
    return [int(n) for n in lens]


def _merge_splits(part: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """torch merge of split partials part [B, H, S, D], lse [B, H, S] (-inf: empty split)."""
    m = lse.max(dim=-1, keepdim=True).values
    w = torch.exp(lse - m)
    return (part * w[..., None]).sum(dim=2) / w.sum(dim=-1)[..., None]


def check_decode_stage1(case) -> None:
    """Stage 1 over a random paged cache in the case's KV format, its splits merged in torch,
    against the float32 reference attention over the dequantized rows."""
    dev, gen = case.device, cu.generator(case, 0)
    a, c = case.args, case.constexprs
    q_shape, k_shape = case.shape("q_ptr"), case.shape("k_ptr")
    B, H, D = q_shape
    slots, kvh, _ = k_shape
    num_splits = a["num_splits"]
    fmt = {0: "bf16", 1: "fp8", 2: "int8"}[int(c["KV_FMT"])]
    q = cu.randn(case, q_shape, gen, torch.bfloat16)
    kf = cu.randn(case, k_shape, gen)
    vf = cu.randn(case, k_shape, gen)
    k_cache, k_scale = quantize_rows(kf, fmt)
    v_cache, v_scale = quantize_rows(vf, fmt)
    k_cache = k_cache.to(cu.spec_dtype(case, "k_ptr"))
    v_cache = v_cache.to(cu.spec_dtype(case, "v_ptr"))
    if k_scale is None:  # bf16 caches read no scales; the kernel still takes the pointers
        k_scale = torch.ones(case.shape("k_scale_ptr"), dtype=torch.float32, device=dev)
        v_scale = torch.ones(case.shape("v_scale_ptr"), dtype=torch.float32, device=dev)
    lens = _seq_lens(B, slots, gen, dev)
    indptr = torch.zeros(case.shape("kv_indptr_ptr"), dtype=torch.int32, device=dev)
    indptr[1:B + 1] = torch.tensor(lens, device=dev).cumsum(0).to(torch.int32)
    indices = torch.randperm(slots, generator=gen, device=dev).to(torch.int32)[:case.shape("kv_indices_ptr")[0]]
    part = cu.empty(case, "part_out_ptr")
    lse = cu.empty(case, "part_lse_ptr")
    for name, t in (("q_ptr", q), ("k_ptr", k_cache), ("part_out_ptr", part)):
        assert list(t.shape) == case.shape(name), (name, t.shape)
    case.launch(decode_stage1_kernel, (B, kvh, num_splits),
                q, k_cache, v_cache, k_scale, v_scale, indptr, indices, part, lse,
                a["sm_scale"], num_splits,
                a["stride_qb"], a["stride_qh"], a["stride_ks"], a["stride_kh"], a["stride_vs"], a["stride_vh"],
                a["stride_scale_s"], a["stride_pb"], a["stride_ph"], a["stride_psplit"],
                a["stride_lb"], a["stride_lh"], **cu.launch_kwargs(case))
    out = _merge_splits(part[:, :, :num_splits], lse[:, :, :num_splits])
    ref = decode_attention_reference(q, k_cache, v_cache, indptr, indices, a["sm_scale"],
                                     None if fmt == "bf16" else k_scale, None if fmt == "bf16" else v_scale)
    for b in range(B):  # per sequence: a long sequence's output is much smaller than a 1-key one's
        cu.assert_close(out[b], ref[b].float(), tol=2e-2,
                        what=f"decode stage 1 ({fmt}, READER {int(c['READER'])}), sequence {b} of {lens[b]} keys")


def check_decode_reduce(case) -> None:
    """The reduce stage on random split partials (a few splits empty: lse = -inf) against the
    torch log-sum-exp merge."""
    dev, gen = case.device, cu.generator(case, 1)
    a = case.args
    num_splits = a["num_splits"]
    B, H, S, D = case.shape("part_out_ptr")
    part = cu.randn(case, (B, H, S, D), gen)
    lse = cu.randn(case, (B, H, S), gen, scale=3.0)
    # Empty splits (a short sequence over many splits) and one (sequence, head) with one split.
    lse[:, :, num_splits - 3:num_splits] = float("-inf")
    lse[0, 0, 1:num_splits] = float("-inf")
    out = cu.empty(case, "out_ptr")
    case.launch(decode_reduce_kernel, (B, H), part, lse, out, num_splits,
                a["stride_pb"], a["stride_ph"], a["stride_psplit"], a["stride_lb"], a["stride_lh"],
                a["stride_ob"], a["stride_oh"], **cu.launch_kwargs(case))
    ref = _merge_splits(part[:, :, :num_splits], lse[:, :, :num_splits])
    cu.assert_close(out, ref.to(out.dtype), tol=1e-2, what="decode reduce")
