"""KV-row dequantization: quantized KV rows gathered by an index table -> a dense bf16 buffer.

The prefill path of seed 000: on targets whose in-kernel fp8 reader is expensive (gfx11), the
batch's KV rows are decoded once into a transient bf16 buffer (row i = slot kv_indices[i]) and
the bf16 extend kernel then runs on identity indices, instead of every query block re-decoding
every key tile. Output is bit-identical to the torch reference (code * scale rounded to bf16).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_utils as cu
from .kv_formats import (KV_FP8, READER_GFX11, KV_FORMATS, READERS, as_codes, decode_kv_tile,
                         dequant_rows_reference, kv_format_of, quantize_rows, reader_for_arch)


@triton.jit
def kv_dequant_kernel(
    codes_ptr, scales_ptr, idx_ptr, out_ptr,
    n_rows,
    stride_code_slot, stride_code_head,
    stride_scale_slot,
    stride_out_row, stride_out_head,
    HEAD_DIM: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    KV_FMT: tl.constexpr,
    READER: tl.constexpr,
):
    """out[i, h, :] = bf16(decode(codes[idx[i], h, :]) * scales[idx[i], h]); grid (row blocks, heads)."""
    pid = tl.program_id(0)
    head = tl.program_id(1)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    slots = tl.load(idx_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    codes = tl.load(codes_ptr + slots[:, None] * stride_code_slot + head * stride_code_head + d[None, :],
                    mask=row_mask[:, None], other=0)
    scale = tl.load(scales_ptr + slots * stride_scale_slot + head, mask=row_mask, other=0.0)
    if KV_FMT == KV_FP8 and READER == READER_GFX11:
        scale = scale * 256.0
    vals = decode_kv_tile(codes, KV_FMT, READER).to(tl.float32) * scale[:, None]
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * stride_out_row + head * stride_out_head + d[None, :],
             vals.to(tl.bfloat16), mask=row_mask[:, None])


def kv_dequant_reference(cache: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """torch: rows cache[indices] times their scales, rounded to bf16."""
    idx = indices.long()
    return dequant_rows_reference(cache[idx], scales[idx]).to(torch.bfloat16)


def kv_dequant(cache: torch.Tensor, scales: torch.Tensor, indices: torch.Tensor, *,
               arch: str = "gfx942", reader: str | None = None, block_rows: int = 32,
               num_warps: int = 4) -> torch.Tensor:
    """Launch kv_dequant_kernel: cache [slots, kv_heads, head_dim] fp8 (e4m3fn or its uint8
    view) or int8, scales [slots, kv_heads] float32, indices [n] int32 -> bf16 [n, kv_heads, head_dim].
    The reader defaults to the one `arch` would use."""
    fmt = kv_format_of(cache)
    if fmt == "bf16":
        raise ValueError("kv_dequant takes a quantized cache (fp8 or int8); a bf16 cache needs no dequantization")
    reader = reader or reader_for_arch(arch, fmt)
    codes = as_codes(cache)
    n = indices.numel()
    _, heads, dim = codes.shape
    if codes.stride(2) != 1 or scales.stride(1) != 1:
        raise ValueError("the head_dim of the cache and the heads of the scales must be contiguous")
    out = torch.empty((n, heads, dim), dtype=torch.bfloat16, device=cache.device)
    grid = (triton.cdiv(n, block_rows), heads)
    kv_dequant_kernel[grid](
        codes, scales, indices, out, n,
        codes.stride(0), codes.stride(1), scales.stride(0), out.stride(0), out.stride(1),
        HEAD_DIM=dim, BLOCK_ROWS=block_rows, KV_FMT=KV_FORMATS[fmt], READER=READERS[reader],
        num_warps=num_warps,
    )
    return out


def check_kv_dequant(case) -> None:
    """Random rows (fp8 e4m3 or int8, per-row scales) gathered by a random index table (repeats
    allowed): the bf16 output must equal the torch reference bit for bit."""
    dev, gen = case.device, cu.generator(case, 5)
    a, c = case.args, case.constexprs
    slots, heads, dim = case.shape("codes_ptr")
    n_rows = a["n_rows"]
    fmt = {1: "fp8", 2: "int8"}[int(c["KV_FMT"])]
    codes, scales = quantize_rows(cu.randn(case, (slots, heads, dim), gen, scale=2.0), fmt)
    assert codes.dtype == cu.spec_dtype(case, "codes_ptr") and list(scales.shape) == case.shape("scales_ptr")
    idx = torch.randint(0, slots, tuple(case.shape("idx_ptr")), generator=gen, device=dev).to(torch.int32)
    out = cu.empty(case, "out_ptr")
    grid = (triton.cdiv(n_rows, c["BLOCK_ROWS"]), heads)
    case.launch(kv_dequant_kernel, grid, codes, scales, idx, out, n_rows,
                a["stride_code_slot"], a["stride_code_head"], a["stride_scale_slot"],
                a["stride_out_row"], a["stride_out_head"], **cu.launch_kwargs(case))
    ref = kv_dequant_reference(codes, scales, idx[:n_rows])
    torch.testing.assert_close(out[:n_rows], ref, rtol=0, atol=0,
                               msg=lambda m: f"kv_dequant ({fmt}, READER {int(c['READER'])}) not bit-exact: {m}")
