"""Kernel checks run on the CPU through Triton's interpreter.

Run as a script in its own process (the tests in this folder do that, with TRITON_INTERPRET=1
set before triton is imported, so no other test sees the interpreter): each named check prints
one JSON object of measurements, which the pytest tests assert on.

    TRITON_INTERPRET=1 python tests/kernels/interp_checks.py gfx11_reader decode_fp8 ...
"""
from __future__ import annotations

import json
import os
import sys
import traceback

if os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("run with TRITON_INTERPRET=1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels import decode_attention as da  # noqa: E402
from kernels import extend_attention as ea  # noqa: E402
from kernels import gemm as gm  # noqa: E402
from kernels import gqa_decode as gq  # noqa: E402
from kernels import kv_dequant as kd  # noqa: E402
from kernels import sparse_mla as sm  # noqa: E402
from kernels.kv_formats import e4m3_gfx11_f16, e4m3_to_f32_bits, quantize_rows  # noqa: E402

NAN_CODES = (0x7F, 0xFF)


def _patch_interpreter():
    """Two bf16 gaps of Triton 3.8's interpreter, fixed here so it computes what the GPU does:
    tl.dot on bf16 operands multiplies their raw uint16 storage (garbage), and float32 -> bf16
    casts truncate (and its own round-to-nearest-even path mis-rounds at binade edges), where the
    GPU rounds to nearest even. Only this process,
    which runs the kernels under the interpreter, is patched."""
    import numpy as np
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    orig_dot, orig_cast = builder.create_dot, builder.cast_impl

    def bf16_as_f32(h):
        return (h.data.astype(np.uint32) << 16).view(np.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            fa = bf16_as_f32(a) if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            fb = bf16_as_f32(b) if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            return interp.TensorHandle(np.matmul(fa, fb, dtype=d.data.dtype) + d.data, d.dtype.scalar)
        return orig_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            nan = np.isnan(src.data)
            rounded[nan] = 0x7FC0
            return interp.TensorHandle(rounded, tl.bfloat16)
        return orig_cast(self, src, dst_type)

    builder.create_dot, builder.cast_impl = create_dot, cast_impl


_patch_interpreter()


@triton.jit
def _readers_kernel(c_ptr, h_ptr, f_ptr, n_ptr):
    o = tl.arange(0, 256)
    c = tl.load(c_ptr + o)
    tl.store(h_ptr + o, e4m3_gfx11_f16(c))
    tl.store(f_ptr + o, e4m3_to_f32_bits(c))
    tl.store(n_ptr + o, c.to(tl.float8e4nv, bitcast=True).to(tl.float32))


def _bits_mismatch(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    return [i for i in range(a.numel()) if a.view(-1)[i].item() != b.view(-1)[i].item()]


def check_readers():
    codes = torch.arange(256, dtype=torch.uint8)
    h = torch.empty(256, dtype=torch.float16)
    f = torch.empty(256, dtype=torch.float32)
    n = torch.empty(256, dtype=torch.float32)
    _readers_kernel[(1,)](codes, h, f, n)
    ref = codes.view(torch.float8_e4m3fn).float()
    finite = [c for c in range(256) if c not in NAN_CODES]
    ref16 = (ref / 256).half().view(torch.int16)
    return {
        "finite_codes": len(finite),
        "gfx11_bit_mismatches": _bits_mismatch(h.view(torch.int16)[finite], ref16[finite]),
        "gfx11_neg_zero_bits": int(h.view(torch.int16)[0x80].item()) & 0xFFFF,
        "gfx11_subnormal_codes_exact": all(h[c].item() * 256 == ref[c].item() for c in range(1, 8)),
        "generic_bit_mismatches": _bits_mismatch(f.view(torch.int32)[finite], ref.view(torch.int32)[finite]),
        "generic_nan_codes_nan": all(bool(torch.isnan(f[c])) for c in NAN_CODES),
        "native_mismatches": _bits_mismatch(n.view(torch.int32)[finite], ref.view(torch.int32)[finite]),
    }


def _cache(slots, heads, dim, fmt, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(slots, heads, dim, generator=g) * 2.0
    return quantize_rows(x, fmt)


def check_kv_dequant():
    out = {}
    idx = torch.randperm(200, generator=torch.Generator().manual_seed(1))[:77].to(torch.int32)
    for fmt, readers in (("fp8", ("generic", "native", "gfx11")), ("int8", ("generic",))):
        codes, scales = _cache(200, 2, 64, fmt)
        ref = kd.kv_dequant_reference(codes, scales, idx)
        for r in readers:
            got = kd.kv_dequant(codes, scales, idx, reader=r, block_rows=16)
            out[f"{fmt}_{r}_bit_equal"] = torch.equal(got.view(torch.int16), ref.view(torch.int16))
    codes, scales = _cache(200, 2, 64, "fp8")
    typed = kd.kv_dequant(codes.view(torch.float8_e4m3fn), scales, idx, reader="gfx11", block_rows=16)
    out["typed_fp8_equal_uint8_view"] = torch.equal(typed, kd.kv_dequant(codes, scales, idx, reader="gfx11", block_rows=16))
    return out


def _decode_problem(fmt, lens=(1, 33, 300), H=8, KVH=2, D=64, slots=700, seed=0):
    g = torch.Generator().manual_seed(seed)
    kc, ks = _cache(slots, KVH, D, fmt, seed)
    vc, vs = _cache(slots, KVH, D, fmt, seed + 1)
    perm = torch.randperm(slots, generator=g).to(torch.int32)
    indptr = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    indices = perm[: int(indptr[-1])]
    q = torch.randn(len(lens), H, D, generator=g).to(torch.bfloat16)
    return q, kc, vc, ks, vs, indptr, indices


def check_decode():
    out = {}
    D = 64
    sm_scale = D ** -0.5
    cfg = {"generic": da.DecodeConfig(32, 2, 4, 32, 4, 8), "native": da.DecodeConfig(32, 2, 4, 32, 4, 8),
           "gfx11": da.DecodeConfig(16, 1, 2, 32, 8, 8)}
    for fmt, readers in (("fp8", ("generic", "native", "gfx11")), ("int8", ("generic",))):
        q, kc, vc, ks, vs, indptr, indices = _decode_problem(fmt)
        # The bf16 kernel on the dequantized rows (row i = slot i): what the fp8 path must match.
        all_slots = torch.arange(kc.shape[0], dtype=torch.int32)
        kb = kd.kv_dequant(kc, ks, all_slots, reader="generic")
        vb = kd.kv_dequant(vc, vs, all_slots, reader="generic")
        bf16_out = da.decode_attention(q, kb, vb, indptr, indices, sm_scale, splits=4, config=cfg["generic"])
        ref = da.decode_attention_reference(q, kc, vc, indptr, indices, sm_scale, ks, vs).float()
        out[f"bf16_on_dequant_vs_ref_{fmt}"] = (bf16_out.float() - ref).abs().max().item()
        for r in readers:
            got = da.decode_attention(q, kc, vc, indptr, indices, sm_scale, ks, vs, reader=r, splits=4, config=cfg[r])
            out[f"{fmt}_{r}_vs_bf16_kernel"] = (got.float() - bf16_out.float()).abs().max().item()
            out[f"{fmt}_{r}_vs_ref"] = (got.float() - ref).abs().max().item()
    # Split count must not change the result beyond rounding; 1 split vs many, bf16 cache.
    q, kc, vc, _, _, indptr, indices = _decode_problem("bf16")
    ref = da.decode_attention_reference(q, kc, vc, indptr, indices, sm_scale).float()
    one = da.decode_attention(q, kc, vc, indptr, indices, sm_scale, splits=1, config=cfg["generic"])
    many = da.decode_attention(q, kc, vc, indptr, indices, sm_scale, splits=7, config=cfg["generic"])
    out["bf16_1split_vs_ref"] = (one.float() - ref).abs().max().item()
    out["bf16_7split_vs_ref"] = (many.float() - ref).abs().max().item()
    return out


def check_extend():
    g = torch.Generator().manual_seed(3)
    H, KVH, D = 8, 2, 64
    prefix, qlens = (0, 40), (37, 20)
    kv_lens = [p + q for p, q in zip(prefix, qlens)]
    slots = 200
    kc = torch.randn(slots, KVH, D, generator=g).to(torch.bfloat16)
    vc = torch.randn(slots, KVH, D, generator=g).to(torch.bfloat16)
    perm = torch.randperm(slots, generator=g).to(torch.int32)
    kv_indptr = torch.tensor([0, kv_lens[0], sum(kv_lens)], dtype=torch.int32)
    qo_indptr = torch.tensor([0, qlens[0], sum(qlens)], dtype=torch.int32)
    indices = perm[: sum(kv_lens)]
    q = torch.randn(sum(qlens), H, D, generator=g).to(torch.bfloat16)
    got = ea.extend_attention(q, kc, vc, qo_indptr, kv_indptr, indices, D ** -0.5, block_m=16, block_n=16)
    ref = ea.extend_attention_reference(q, kc, vc, qo_indptr, kv_indptr, indices, D ** -0.5)
    # Causality: changing the last key of sequence 1 must leave all but its last query unchanged.
    kc2 = kc.clone()
    kc2[indices[kv_indptr[2] - 1].long()] += 3.0
    got2 = ea.extend_attention(q, kc2, vc, qo_indptr, kv_indptr, indices, D ** -0.5, block_m=16, block_n=16)
    changed = (got2 != got).any(dim=-1).any(dim=-1).nonzero().flatten().tolist()
    # Prefill on fp8 rows the seed-000 way: kv_dequant, then the bf16 kernel on identity indices.
    kq, ksc = quantize_rows(kc.float(), "fp8")
    rows = kd.kv_dequant(kq, ksc, indices, reader="gfx11")
    ident = torch.arange(len(indices), dtype=torch.int32)
    via_rows = ea.extend_attention(q, rows, vc[indices.long()], qo_indptr, kv_indptr, ident, D ** -0.5,
                                   block_m=16, block_n=16)
    kb = kd.kv_dequant_reference(kq, ksc, torch.arange(slots, dtype=torch.int32))
    direct = ea.extend_attention(q, kb, vc, qo_indptr, kv_indptr, indices, D ** -0.5, block_m=16, block_n=16)
    return {"vs_ref": (got.float() - ref.float()).abs().max().item(), "changed_queries": changed,
            "last_query": int(qo_indptr[2]) - 1,
            "dequant_route_bit_equal": torch.equal(via_rows.view(torch.int16), direct.view(torch.int16))}


def _tail_problem(fnuz: bool, D=64, H=16, topk=2048):
    """Seed 002's case: key 0 scores 9 above 2047 tail keys that carry a fifth of the output.
    Latent dims [0, D/2) score, dims [D/2, D) carry only the tail's values."""
    dt = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    half = D // 2
    rows = torch.zeros(topk + 16, D)
    rows[0, :half] = 4.0
    rows[1:topk, half:] = (torch.arange(half) % 4 + 1).float() * 2.0
    cache = rows.to(dt)
    kv_scale = 0.25
    q = torch.zeros(1, H, D)
    q[:, :, :half] = 1.0
    q = q.to(torch.bfloat16)
    sm_scale = 9.0 / (half * 4.0 * kv_scale)
    idx = torch.full((1, topk), -1, dtype=torch.int32)
    idx[0] = torch.arange(topk, dtype=torch.int32)
    return q, cache, kv_scale, idx, sm_scale


def _rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def check_sparse_mla():
    out = {}
    for fnuz, arch in ((True, "gfx942"), (False, "gfx950")):
        q, cache, kv_scale, idx, sm_scale = _tail_problem(fnuz)
        ref = sm.sparse_mla_reference(q, cache, kv_scale, idx, sm_scale, fnuz).float()
        half = q.shape[-1] // 2
        out[f"{arch}_ref_tail_share"] = (ref[0, 0, half:].sum() / ref[0, 0].sum()).item()
        for name, kw in (("bf16", {}), ("fp8_p128", {"fp8_dots": True, "p_scale": 128}),
                         ("fp8_p1", {"fp8_dots": True, "p_scale": 1})):
            got = sm.sparse_mla_fwd(q, cache, kv_scale, idx, sm_scale, arch=arch, block_k=64, **kw).float()
            out[f"{arch}_{name}_rel_l2"] = _rel_l2(got, ref)
            out[f"{arch}_{name}_tail_norm"] = got[0, :, half:].norm().item() / ref[0, :, half:].norm().item()
    # Random inputs with skipped (-1) indices, bf16 dots on both encodings.
    g = torch.Generator().manual_seed(5)
    for fnuz, arch in ((True, "gfx942"), (False, "gfx950")):
        dt = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
        cache = (torch.randn(300, 64, generator=g) * 8).to(dt)
        q = torch.randn(3, 16, 64, generator=g).to(torch.bfloat16)
        idx = torch.randint(0, 300, (3, 96), generator=g, dtype=torch.int32)
        idx[1, 50:] = -1
        ref = sm.sparse_mla_reference(q, cache, 0.1, idx, 0.125, fnuz)
        got = sm.sparse_mla_fwd(q, cache, 0.1, idx, 0.125, arch=arch)
        out[f"{arch}_random_bf16_rel_l2"] = _rel_l2(got, ref)
    return out


def check_gemm():
    g = torch.Generator().manual_seed(7)
    a = torch.randn(96, 80, generator=g)
    b = torch.randn(80, 72, generator=g)
    out = {}
    got = gm.gemm(a.to(torch.bfloat16), b.to(torch.bfloat16), block_m=32, block_n=32, block_k=32)
    ref = gm.gemm_reference(a.to(torch.bfloat16), b.to(torch.bfloat16))
    out["bf16_rel"] = _rel_l2(got, ref)
    for dt in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        sc = torch.tensor([0.5, 0.25])
        a8, b8 = (a * 2).to(dt), (b * 4).to(dt)
        ref = gm.gemm_reference(a8, b8, sc)
        for up in (False, True):
            got = gm.gemm(a8, b8, sc, upcast_f16=up, block_m=32, block_n=32, block_k=32)
            out[f"{dt}_up{up}_rel"] = _rel_l2(got, ref)
    return out


def check_gqa_decode():
    g = torch.Generator().manual_seed(9)
    B, H, KVH, BS = 2, 16, 4, 16
    out = {}
    for D in (128, 256):
        lens = torch.tensor([5, 40], dtype=torch.int32)
        nblk = 8
        table = torch.randperm(nblk, generator=g).to(torch.int32).view(2, 4)
        q = torch.randn(B, H, D, generator=g)
        kf = torch.randn(nblk, BS, KVH, D, generator=g)
        vf = torch.randn(nblk, BS, KVH, D, generator=g)
        kb, vb = kf.to(torch.bfloat16), vf.to(torch.bfloat16)
        ref = gq.gqa_decode_reference(q, kb, vb, table, lens, D ** -0.5)
        out[f"bf16_d{D}"] = (gq.gqa_decode(q, kb, vb, table, lens, D ** -0.5) - ref).abs().max().item()
        k8 = (kf * 16).to(torch.float8_e4m3fn).view(torch.uint8)
        v8 = (vf * 16).to(torch.float8_e4m3fn).view(torch.uint8)
        ref8 = gq.gqa_decode_reference(q, k8, v8, table, lens, D ** -0.5, 1 / 16, 1 / 16)
        for r in ("generic", "native", "gfx11"):
            got = gq.gqa_decode(q, k8, v8, table, lens, D ** -0.5, 1 / 16, 1 / 16, reader=r)
            out[f"fp8_{r}_d{D}"] = (got - ref8).abs().max().item()
    return out


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    results = {}
    for name in sys.argv[1:] or CHECKS:
        try:
            results[name] = CHECKS[name]()
        except Exception:  # reported to the test, which fails on it
            results[name] = {"error": traceback.format_exc()}
    print("RESULTS " + json.dumps(results))
