"""KV-cache formats and the per-architecture fp8 e4m3 readers shared by the KV kernels.

A quantized KV cache stores one code byte per element (a uint8 view of OCP float8_e4m3fn, or
int8) and one float32 scale per (token, kv head). The readers turn a tile of codes into numbers
that are exact in the dot's operand type; the scale is applied by the caller (to the scores for
K, to the probabilities for V), so the tile itself is never rounded.

Readers (a constexpr; the host picks one per target, the spec's per-target overrides do too):
- READER_GENERIC: integer decode of e4m3 to the float32 bit pattern, then bf16. Works on every
  target, including those with no fp8 conversion instruction (gfx11, and gfx942, whose native
  fp8 is the fnuz encoding rather than OCP).
- READER_NATIVE: Triton's fp8 type conversion (bitcast the byte to tl.float8e4nv, convert to
  float32); lowers to the hardware conversion on targets with native OCP fp8 (gfx950, gfx12,
  sm_90).
- READER_GFX11: each code c becomes the fp16 bit pattern ((c & 0x80) << 8) | ((c & 0x7F) << 7),
  which is exactly value / 256 for every finite code (e4m3 subnormals become fp16 subnormals),
  with integer ops only. The caller folds 256 into the scales and runs f16 x f16 -> f32 dots
  (v_wmma_f32_16x16x16_f16 on gfx11, which has neither fp8 nor f32->bf16 conversions).
- READER_CVT_ASM: one `v_cvt_f32_fp8` per element through inline asm, for gfx12: Triton 3.8
  lowers the tl.float8e4nv -> float32 conversion in software on gfx12 (no v_cvt_*fp8*, about
  10x the instructions of gfx950's native path), although the hardware has the instruction.
  Not runnable in Triton's interpreter (inline asm).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

KV_BF16: tl.constexpr = tl.constexpr(0)
KV_FP8: tl.constexpr = tl.constexpr(1)
KV_INT8: tl.constexpr = tl.constexpr(2)

READER_GENERIC: tl.constexpr = tl.constexpr(0)
READER_NATIVE: tl.constexpr = tl.constexpr(1)
READER_GFX11: tl.constexpr = tl.constexpr(2)
READER_CVT_ASM: tl.constexpr = tl.constexpr(3)

# Host-side names for the constexpr values above.
KV_FORMATS = {"bf16": 0, "fp8": 1, "int8": 2}
READERS = {"generic": 0, "native": 1, "gfx11": 2, "cvt_asm": 3}
# The factor READER_GFX11 divides every value by; callers multiply their scales by it.
GFX11_SCALE_FOLD = 256.0


@triton.jit
def e4m3_to_f32_bits(c):
    """OCP e4m3fn codes (uint8) -> float32, integer ops only. NaN codes (0x7f, 0xff) -> NaN."""
    c32 = c.to(tl.uint32)
    mag = c32 & 0x7F
    sign = (c32 & 0x80) << 24
    # Normal: rebias the exponent (7 -> 127) and move the 3 mantissa bits to the top.
    normal = (sign | ((mag << 20) + (120 << 23))).to(tl.float32, bitcast=True)
    # Subnormal (exponent field 0): m * 2^-9, exact in float32, sign OR-ed in (keeps -0).
    sub = (((c32 & 0x7).to(tl.float32) * 0.001953125).to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    v = tl.where((mag >> 3) == 0, sub, normal)
    return tl.where(mag == 0x7F, float("nan"), v)


@triton.jit
def e4m3_gfx11_f16(c):
    """OCP e4m3fn codes (uint8) -> fp16 equal to value / 256, exact, integer ops only."""
    c16 = c.to(tl.uint16)
    return (((c16 & 0x80) << 8) | ((c16 & 0x7F) << 7)).to(tl.float16, bitcast=True)


@triton.jit
def decode_kv_tile(codes, KV_FMT: tl.constexpr, READER: tl.constexpr):
    """A loaded tile of KV elements -> the dot operand: bf16, or fp16 (value/256) for READER_GFX11.

    bf16 tiles pass through; int8 codes become bf16 exactly; fp8 codes go through the reader.
    """
    if KV_FMT == KV_BF16:
        out = codes.to(tl.bfloat16)
    elif KV_FMT == KV_INT8:
        if READER == READER_GFX11:
            out = codes.to(tl.float16)
        else:
            out = codes.to(tl.float32).to(tl.bfloat16)
    else:
        if READER == READER_GFX11:
            out = e4m3_gfx11_f16(codes)
        elif READER == READER_CVT_ASM:
            out = tl.inline_asm_elementwise("v_cvt_f32_fp8 $0, $1", "=v,v", [codes.to(tl.uint32)],
                                            dtype=tl.float32, is_pure=True, pack=1).to(tl.bfloat16)
        elif READER == READER_NATIVE:
            out = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32).to(tl.bfloat16)
        else:
            out = e4m3_to_f32_bits(codes).to(tl.bfloat16)
    return out


@triton.jit
def decode_kv_f32(codes, KV_FMT: tl.constexpr, READER: tl.constexpr):
    """A loaded tile of KV elements -> float32 (value / 256 for fp8 through READER_GFX11)."""
    if KV_FMT == KV_BF16:
        out = codes.to(tl.float32)
    elif KV_FMT == KV_INT8:
        out = codes.to(tl.float32)
    else:
        if READER == READER_GFX11:
            out = e4m3_gfx11_f16(codes).to(tl.float32)
        elif READER == READER_CVT_ASM:
            out = tl.inline_asm_elementwise("v_cvt_f32_fp8 $0, $1", "=v,v", [codes.to(tl.uint32)],
                                            dtype=tl.float32, is_pure=True, pack=1)
        elif READER == READER_NATIVE:
            out = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
        else:
            out = e4m3_to_f32_bits(codes)
    return out


def reader_for_arch(arch: str, kv_format: str) -> str:
    """The reader a host launcher picks for a target: gfx11 integer reader, native OCP fp8
    conversion where the hardware has it, the generic integer decode everywhere else."""
    if kv_format != "fp8":
        return "generic"
    if arch.startswith("gfx11"):
        return "gfx11"
    if arch.startswith("gfx12"):
        return "cvt_asm"
    if arch == "gfx950" or arch.startswith(("sm_9", "sm9", "sm_10", "sm10")):
        return "native"
    return "generic"


def kv_format_of(cache: torch.Tensor) -> str:
    """The KV format a cache tensor holds: bf16, fp8 (OCP e4m3fn, typed or a uint8 view) or int8."""
    if cache.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return "bf16"
    if cache.dtype in (torch.float8_e4m3fn, torch.uint8):
        return "fp8"
    if cache.dtype == torch.int8:
        return "int8"
    raise ValueError(f"unsupported KV cache dtype {cache.dtype}: expected bfloat16, float8_e4m3fn "
                     "(or a uint8 view of it) or int8")


def as_codes(cache: torch.Tensor) -> torch.Tensor:
    """The tensor the kernels read: fp8 caches as their uint8 code bytes, others unchanged."""
    return cache.view(torch.uint8) if cache.dtype == torch.float8_e4m3fn else cache


def dequant_rows_reference(codes: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """codes [slots, heads, dim] (fp8 as e4m3fn or uint8, int8, bf16), scales [slots, heads] ->
    float32 values code * scale (bf16 caches are returned as float32 unchanged)."""
    fmt = kv_format_of(codes)
    if fmt == "bf16":
        return codes.float()
    if fmt == "fp8":
        vals = codes.view(torch.float8_e4m3fn).float()
    else:
        vals = codes.float()
    return vals * scales.float()[..., None]


def quantize_rows(x: torch.Tensor, kv_format: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-(token, head) quantization of x [slots, heads, dim] for tests and examples: returns the
    code tensor (uint8 view of e4m3fn for fp8, int8) and float32 scales [slots, heads]."""
    if kv_format == "bf16":
        return x.to(torch.bfloat16), None
    amax = x.float().abs().amax(dim=-1).clamp_min(1e-6)
    if kv_format == "fp8":
        scale = amax / 448.0
        codes = (x.float() / scale[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    elif kv_format == "int8":
        scale = amax / 127.0
        codes = (x.float() / scale[..., None]).round().clamp(-127, 127).to(torch.int8)
    else:
        raise ValueError(f"unknown KV format {kv_format!r}")
    return codes, scale.float()
