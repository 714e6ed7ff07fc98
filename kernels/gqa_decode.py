"""f32-query GQA decode attention with a bf16 or fp8 paged KV cache (the shape of seed 004).

q and out are float32 [B, 16, D] (16 query heads), the cache is blocked:
[num_blocks, BLOCK_SIZE, 4 kv heads, D] in bf16 or fp8 e4m3 (uint8 codes) with per-tensor
k_scale / v_scale, addressed through a block table [B, max_blocks]. One program per (sequence,
kv head) runs the GROUP=4 query heads that share it together over the whole sequence with an
online softmax in registers: float32 products and sums, no matrix instructions (an f32 query
does not fit the bf16 matrix cores). The fp8 reader is a constexpr as in kv_formats.py.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_utils as cu
from .kv_formats import KV_FP8, READER_GFX11, KV_FORMATS, READERS, as_codes, decode_kv_f32, kv_format_of, reader_for_arch


@triton.jit
def gqa_decode_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, block_table_ptr, seq_lens_ptr,
    sm_scale, k_scale, v_scale,
    stride_qb, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_bt,
    stride_ob, stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,   # tokens per cache block; one block per step
    KV_FMT: tl.constexpr,
    READER: tl.constexpr,
):
    """Grid: (batch, kv heads)."""
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + b)
    offs_g = tl.arange(0, GROUP)
    heads = kvh * GROUP + offs_g
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, BLOCK_SIZE)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :])
    if KV_FMT == KV_FP8 and READER == READER_GFX11:
        ks = k_scale * 256.0
        vs = v_scale * 256.0
    else:
        ks = k_scale
        vs = v_scale
    if KV_FMT == KV_FP8:
        q = q * (sm_scale * ks * 1.4426950408889634)
    else:
        q = q * (sm_scale * 1.4426950408889634)

    m_i = tl.full((GROUP,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((GROUP,), dtype=tl.float32)
    acc = tl.zeros((GROUP, HEAD_DIM), dtype=tl.float32)
    for blk in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_table_ptr + b * stride_bt + blk).to(tl.int64)
        t_mask = blk * BLOCK_SIZE + offs_t < seq_len
        k = decode_kv_f32(tl.load(k_ptr + block * stride_kb + offs_t[:, None] * stride_kt + kvh * stride_kh
                                  + offs_d[None, :], mask=t_mask[:, None], other=0), KV_FMT, READER)
        s = tl.sum(q[:, None, :] * k[None, :, :], 2)          # [GROUP, BLOCK_SIZE]
        s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = decode_kv_f32(tl.load(v_ptr + block * stride_vb + offs_t[:, None] * stride_vt + kvh * stride_vh
                                  + offs_d[None, :], mask=t_mask[:, None], other=0), KV_FMT, READER)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    if KV_FMT == KV_FP8:
        out = out * vs
    tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :], out)


def gqa_decode_reference(q, k_cache, v_cache, block_table, seq_lens, sm_scale, k_scale=1.0, v_scale=1.0):
    """float32 GQA decode over the blocked cache (fp8 as e4m3fn or uint8 codes, times the scales)."""
    B, H, D = q.shape
    kvh, bs = k_cache.shape[2], k_cache.shape[1]
    fp8 = kv_format_of(k_cache) == "fp8"

    def rows(cache, b, n, scale):
        blocks = block_table[b, :triton.cdiv(n, bs)].long()
        x = cache[blocks].reshape(-1, kvh, D)[:n]
        return x.view(torch.float8_e4m3fn).float() * scale if fp8 else x.float()

    out = torch.empty(B, H, D, dtype=torch.float32, device=q.device)
    for b in range(B):
        n = int(seq_lens[b])
        k = rows(k_cache, b, n, k_scale).repeat_interleave(H // kvh, dim=1)
        v = rows(v_cache, b, n, v_scale).repeat_interleave(H // kvh, dim=1)
        p = torch.softmax(torch.einsum("hd,nhd->hn", q[b].float(), k) * sm_scale, dim=-1)
        out[b] = torch.einsum("hn,nhd->hd", p, v)
    return out


def gqa_decode(q, k_cache, v_cache, block_table, seq_lens, sm_scale, k_scale: float = 1.0,
               v_scale: float = 1.0, *, arch: str = "gfx1100", reader: str | None = None,
               num_warps: int = 4) -> torch.Tensor:
    """Launch gqa_decode_kernel: q [B, H, D] float32, caches [blocks, block_size, kv_heads, D]."""
    if q.dtype != torch.float32:
        raise ValueError(f"gqa_decode takes a float32 query, not {q.dtype}")
    fmt = kv_format_of(k_cache)
    if fmt == "int8":
        raise ValueError("gqa_decode reads bf16 or fp8 caches")
    B, H, D = q.shape
    _, bs, kvh, _ = k_cache.shape
    if H % kvh:
        raise ValueError(f"{H} query heads are not a multiple of {kvh} kv heads")
    reader = reader or reader_for_arch(arch, fmt)
    kc, vc = as_codes(k_cache), as_codes(v_cache)
    o = torch.empty_like(q)
    gqa_decode_kernel[(B, kvh)](
        q, kc, vc, o, block_table, seq_lens, sm_scale, float(k_scale), float(v_scale),
        q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2), block_table.stride(0), o.stride(0), o.stride(1),
        GROUP=H // kvh, HEAD_DIM=D, BLOCK_SIZE=bs, KV_FMT=KV_FORMATS[fmt], READER=READERS[reader],
        num_warps=num_warps,
    )
    return o


def check_gqa_decode(case) -> None:
    """A batch of sequences over random cache blocks (bf16, or fp8 codes with the spec's per-tensor
    scales) against the float32 reference; lengths cover 1 token, partial blocks and the table's
    full capacity."""
    dev, gen = case.device, cu.generator(case, 4)
    a, c = case.args, case.constexprs
    B, H, D = case.shape("q_ptr")
    nblocks, bs, kvh, _ = case.shape("k_ptr")
    max_blocks = case.shape("block_table_ptr")[1]
    fp8 = int(c["KV_FMT"]) == 1
    k_scale, v_scale = a["k_scale"], a["v_scale"]
    q = cu.randn(case, (B, H, D), gen)
    if fp8:  # codes of values ~ N(0, 1): code = value / scale, in e4m3's range
        kc = (cu.randn(case, (nblocks, bs, kvh, D), gen) / k_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        vc = (cu.randn(case, (nblocks, bs, kvh, D), gen) / v_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
        kc, vc = kc.view(torch.uint8), vc.view(torch.uint8)
    else:
        kc = cu.randn(case, (nblocks, bs, kvh, D), gen, torch.bfloat16)
        vc = cu.randn(case, (nblocks, bs, kvh, D), gen, torch.bfloat16)
    assert kc.dtype == cu.spec_dtype(case, "k_ptr")
    cap = max_blocks * bs
    lens = torch.randint(1, cap + 1, (B,), generator=gen, device=dev)
    lens[0] = 1
    if B > 1:
        lens[1] = cap
    if B > 2:
        lens[2] = bs + 3
    lens = lens.to(torch.int32)
    table = torch.randint(0, nblocks, (B, max_blocks), generator=gen, device=dev).to(torch.int32)
    o = cu.empty(case, "o_ptr")
    case.launch(gqa_decode_kernel, (B, kvh), q, kc, vc, o, table, lens, a["sm_scale"], k_scale, v_scale,
                a["stride_qb"], a["stride_qh"], a["stride_kb"], a["stride_kt"], a["stride_kh"],
                a["stride_vb"], a["stride_vt"], a["stride_vh"], a["stride_bt"], a["stride_ob"], a["stride_oh"],
                **cu.launch_kwargs(case))
    ref = gqa_decode_reference(q, kc, vc, table, lens, a["sm_scale"], k_scale if fp8 else 1.0,
                               v_scale if fp8 else 1.0)
    for b in range(B):
        cu.assert_close(o[b], ref[b], tol=1e-3, what=f"gqa decode ({'fp8' if fp8 else 'bf16'}), sequence {b}")
