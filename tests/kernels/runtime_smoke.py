"""Smoke test of the runtime checks (`check_<kernel>(case)`) on the CPU under Triton's interpreter.

Run as a script with TRITON_INTERPRET=1 (test_runtime_checks.py does, in a child process): each
check is called with a fake RuntimeCase on the CPU device, with small shapes and strides that are
consistent with them, covering every KV format and every reader but the inline-asm gfx12 one
(inline asm does not run in the interpreter). Prints one JSON line: {variant: "pass" | error}.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

if os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("run with TRITON_INTERPRET=1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

import interp_checks  # noqa: E402,F401  (patches the interpreter's bf16 dot and f32 -> bf16 rounding)
from kernels import decode_attention, extend_attention, gemm, gqa_decode, kv_dequant, sparse_mla  # noqa: E402


class FakeCase:
    """The attributes of xisa.device.launch.RuntimeCase that the checks use."""

    def __init__(self, kernel, args, constexprs, options=None, target="sm_90"):
        self.kernel, self.case, self.target = kernel, "smoke", target
        self.args, self.constexprs = args, constexprs
        self.options = options or {"num_warps": 4, "num_stages": 1}
        self.device = torch.device("cpu")
        self.launches = []

    def shape(self, name):
        value = self.args[name]
        return list(value.get("shape", [1])) if isinstance(value, dict) else [1]

    def launch(self, fn, grid, *args, **kwargs):
        compiled = fn[grid](*args, **kwargs)
        self.launches.append((fn, args, kwargs))
        return compiled


def T(dtype, *shape):
    return {"tensor": dtype, "shape": list(shape)}


def decode_stage1_case(kv_dtype, kv_fmt, reader, D=64):
    B, S, slots = 2, 4, 256
    args = {"q_ptr": T("bf16", B, 16, D), "k_ptr": T(kv_dtype, slots, 4, D), "v_ptr": T(kv_dtype, slots, 4, D),
            "k_scale_ptr": T("fp32", slots, 4), "v_scale_ptr": T("fp32", slots, 4),
            "kv_indptr_ptr": T("i32", B + 1), "kv_indices_ptr": T("i32", slots),
            "part_out_ptr": T("fp32", B, 16, S, D), "part_lse_ptr": T("fp32", B, 16, S),
            "sm_scale": D ** -0.5, "num_splits": S, "stride_qb": 16 * D, "stride_qh": D,
            "stride_ks": 4 * D, "stride_kh": D, "stride_vs": 4 * D, "stride_vh": D, "stride_scale_s": 4,
            "stride_pb": 16 * S * D, "stride_ph": S * D, "stride_psplit": D, "stride_lb": 16 * S, "stride_lh": S}
    cx = {"GROUP": 4, "BLOCK_H": 16, "HEAD_DIM": D, "BLOCK_N": 16, "KV_FMT": kv_fmt, "READER": reader}
    return FakeCase("decode_stage1", args, cx)


def decode_reduce_case():
    B, H, S, D, n = 2, 16, 8, 64, 6
    args = {"part_out_ptr": T("fp32", B, H, S, D), "part_lse_ptr": T("fp32", B, H, S), "out_ptr": T("bf16", B, H, D),
            "num_splits": n, "stride_pb": H * S * D, "stride_ph": S * D, "stride_psplit": D,
            "stride_lb": H * S, "stride_lh": S, "stride_ob": H * D, "stride_oh": D}
    return FakeCase("decode_reduce", args, {"HEAD_DIM": D, "BLOCK_S": 4})


def extend_case():
    Tq, slots, D = 40, 128, 32
    args = {"q_ptr": T("bf16", Tq, 16, D), "k_ptr": T("bf16", slots, 4, D), "v_ptr": T("bf16", slots, 4, D),
            "o_ptr": T("bf16", Tq, 16, D), "qo_indptr_ptr": T("i32", 2), "kv_indptr_ptr": T("i32", 2),
            "kv_indices_ptr": T("i32", slots), "sm_scale": D ** -0.5, "stride_qt": 16 * D, "stride_qh": D,
            "stride_ks": 4 * D, "stride_kh": D, "stride_vs": 4 * D, "stride_vh": D,
            "stride_ot": 16 * D, "stride_oh": D}
    return FakeCase("extend_attention", args, {"GROUP": 4, "HEAD_DIM": D, "BLOCK_M": 16, "BLOCK_N": 16})


def gemm_case(dtype, fp8):
    M = N = K = 64
    args = {"a_ptr": T(dtype, M, K), "b_ptr": T(dtype, K, N), "c_ptr": T("bf16", M, N), "scale_ptr": T("fp32", 2),
            "M": M, "N": N, "K": K, "stride_am": K, "stride_ak": 1, "stride_bk": N, "stride_bn": 1,
            "stride_cm": N, "stride_cn": 1}
    cx = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2, "FP8_IN": fp8, "UPCAST_F16": False,
          "EVEN_K": True}
    return FakeCase("gemm", args, cx)


def gqa_case(kv_dtype, kv_fmt, reader, D=32):
    B, nblk, bs, maxb = 4, 16, 16, 4
    args = {"q_ptr": T("fp32", B, 16, D), "o_ptr": T("fp32", B, 16, D), "k_ptr": T(kv_dtype, nblk, bs, 4, D),
            "v_ptr": T(kv_dtype, nblk, bs, 4, D), "block_table_ptr": T("i32", B, maxb), "seq_lens_ptr": T("i32", B),
            "sm_scale": D ** -0.5, "k_scale": 0.0125, "v_scale": 0.0125, "stride_bt": maxb,
            "stride_qb": 16 * D, "stride_qh": D, "stride_kb": bs * 4 * D, "stride_kt": 4 * D, "stride_kh": D,
            "stride_vb": bs * 4 * D, "stride_vt": 4 * D, "stride_vh": D, "stride_ob": 16 * D, "stride_oh": D}
    cx = {"GROUP": 4, "BLOCK_SIZE": bs, "READER": reader, "HEAD_DIM": D, "KV_FMT": kv_fmt}
    return FakeCase("gqa_decode", args, cx)


def kv_dequant_case(dtype, kv_fmt, reader):
    slots, heads, D, n = 64, 2, 32, 40
    args = {"codes_ptr": T(dtype, slots, heads, D), "scales_ptr": T("fp32", slots, heads), "idx_ptr": T("i32", n),
            "out_ptr": T("bf16", n, heads, D), "n_rows": n, "stride_code_slot": heads * D,
            "stride_code_head": D, "stride_scale_slot": heads, "stride_out_row": heads * D, "stride_out_head": D}
    return FakeCase("kv_dequant", args, {"BLOCK_ROWS": 16, "READER": reader, "HEAD_DIM": D, "KV_FMT": kv_fmt})


def sparse_mla_case(fnuz, fp8_dots):
    Tq, slots, D, topk = 3, 256, 64, 64
    args = {"q_ptr": T("bf16", Tq, 16, D), "kv_ptr": T("u8", slots, D), "idx_ptr": T("i32", Tq, topk),
            "o_ptr": T("bf16", Tq, 16, D), "kv_scale": 0.0125, "sm_scale": D ** -0.5, "topk": topk,
            "stride_qt": 16 * D, "stride_qh": D, "stride_kv": D, "stride_it": topk, "stride_ot": 16 * D,
            "stride_oh": D}
    cx = {"HEAD_DIM": D, "BLOCK_H": 16, "BLOCK_K": 32 if fp8_dots else 16, "FP8_FNUZ": fnuz, "FP8_DOTS": fp8_dots,
          "P_SCALE": 128 if fp8_dots else 1}
    return FakeCase("sparse_mla", args, cx, target="gfx942" if fnuz else "sm_90")


# Reader 3 (inline-asm v_cvt_f32_fp8, gfx12) is skipped: inline asm does not run in the interpreter.
VARIANTS = {
    "decode_stage1:bf16": (decode_attention.check_decode_stage1, lambda: decode_stage1_case("bf16", 0, 0)),
    "decode_stage1:int8": (decode_attention.check_decode_stage1, lambda: decode_stage1_case("i8", 2, 0)),
    "decode_stage1:fp8_generic": (decode_attention.check_decode_stage1, lambda: decode_stage1_case("u8", 1, 0)),
    "decode_stage1:fp8_native": (decode_attention.check_decode_stage1, lambda: decode_stage1_case("u8", 1, 1)),
    "decode_stage1:fp8_gfx11": (decode_attention.check_decode_stage1, lambda: decode_stage1_case("u8", 1, 2)),
    "decode_reduce": (decode_attention.check_decode_reduce, decode_reduce_case),
    "extend_attention": (extend_attention.check_extend_attention, extend_case),
    "gemm:bf16": (gemm.check_gemm, lambda: gemm_case("bf16", False)),
    "gemm:fp8_ocp": (gemm.check_gemm, lambda: gemm_case("fp8e4nv", True)),
    "gemm:fp8_fnuz": (gemm.check_gemm, lambda: gemm_case("fp8e4b8", True)),
    "gqa_decode:bf16": (gqa_decode.check_gqa_decode, lambda: gqa_case("bf16", 0, 0)),
    "gqa_decode:fp8_generic": (gqa_decode.check_gqa_decode, lambda: gqa_case("u8", 1, 0)),
    "gqa_decode:fp8_native": (gqa_decode.check_gqa_decode, lambda: gqa_case("u8", 1, 1)),
    "gqa_decode:fp8_gfx11": (gqa_decode.check_gqa_decode, lambda: gqa_case("u8", 1, 2)),
    "kv_dequant:fp8_generic": (kv_dequant.check_kv_dequant, lambda: kv_dequant_case("u8", 1, 0)),
    "kv_dequant:fp8_native": (kv_dequant.check_kv_dequant, lambda: kv_dequant_case("u8", 1, 1)),
    "kv_dequant:fp8_gfx11": (kv_dequant.check_kv_dequant, lambda: kv_dequant_case("u8", 1, 2)),
    "kv_dequant:int8": (kv_dequant.check_kv_dequant, lambda: kv_dequant_case("i8", 2, 0)),
    "sparse_mla:ocp_bf16": (sparse_mla.check_sparse_mla, lambda: sparse_mla_case(False, False)),
    "sparse_mla:ocp_fp8": (sparse_mla.check_sparse_mla, lambda: sparse_mla_case(False, True)),
    "sparse_mla:fnuz_bf16": (sparse_mla.check_sparse_mla, lambda: sparse_mla_case(True, False)),
    "sparse_mla:fnuz_fp8": (sparse_mla.check_sparse_mla, lambda: sparse_mla_case(True, True)),
}

if __name__ == "__main__":
    results = {}
    for name in sys.argv[1:] or VARIANTS:
        check, make = VARIANTS[name]
        case = make()
        started = time.perf_counter()
        try:
            check(case)
            results[name] = {"status": "pass" if case.launches else "no launch", "launches": len(case.launches)}
        except Exception:
            results[name] = {"status": "error", "error": traceback.format_exc()[-2000:]}
        results[name]["seconds"] = round(time.perf_counter() - started, 2)
    print("RESULTS " + json.dumps(results))
