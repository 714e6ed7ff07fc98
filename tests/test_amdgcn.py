"""The amdgcn parser and normalizer on hand-written snippets."""

from __future__ import annotations

import pytest

from xisa.analyze.amdgcn import analyze_amdgcn, base_mnemonic, classify, parse_stream, resources
from xisa.errors import ParseError

SNIPPET = """\
\t.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
\t.text
\t.globl\tk                               ; -- Begin function k
\t.type\tk,@function
k:                                      ; @k
.Lfunc_begin0:
\t.file\t1 "/home/alice/repo" "kernel.py"
\t.loc\t1 7 0 prologue_end              ; kernel.py:7:0
\ts_load_dwordx2 s[2:3], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\ts_branch .LBB0_0
; %bb.1:
.LBB0_0:
\t.loc\t1 8 9 is_stmt 1                 ; kernel.py:8:9
\tv_and_b32_e32 v1, 63,   v0
\tv_cvt_pk_f32_fp8_e32 v[2:3], v1
\tv_cvt_pk_f32_fp8_sdwa v[4:5], v1 src0_sel:WORD_1
\tv_mfma_f32_16x16x16_bf16 a[0:3], v[0:1], v[2:3], 0
\tds_read_b64 v[6:7], v1
\tbuffer_load_dword v2, v2, s[0:3], 0 offen
\ts_cbranch_scc1 .LBB0_3
.LBB0_2:
\tv_add_f32_dpp v1, v1, v1 row_shr:1
.LBB0_3:
\ts_endpgm
.Ltmp2:
.Lfunc_end0:
\t.size\tk, .Lfunc_end0-k
\t.amdhsa_kernel k
\t\t.amdhsa_group_segment_fixed_size 0
\t\t.amdhsa_private_segment_fixed_size 32
\t\t.amdhsa_next_free_vgpr 12
\t.end_amdhsa_kernel
\t.set .Lk.num_vgpr, 8
\t.set .Lk.num_agpr, 4
; NumVgprs: 8
; NumAgprs: 4
; TotalNumSgprs: 20
; Occupancy: 8
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     4
    .kernarg_segment_size: 48
    .private_segment_fixed_size: 32
    .sgpr_count:     20
    .sgpr_spill_count: 2
    .vgpr_count:     12
    .vgpr_spill_count: 3
    .wavefront_size: 64
...
\t.end_amdgpu_metadata
"""


def test_blocks_labels_and_operands_are_normalized():
    name, stream = parse_stream(SNIPPET)
    assert name == "k"
    text = stream.text()
    assert text.splitlines()[0] == "bb0:"
    assert "s_branch bb1" in text                       # label renumbered to the block it starts
    assert "s_cbranch_scc1 bb3" in text
    assert "v_and_b32_e32 v1, 63, v0" in text           # whitespace collapsed
    assert ".loc" not in text and "alice" not in text and ";" not in text
    assert [len(b.instructions) for b in stream.blocks] == [3, 7, 1, 1]


def test_suffix_variants_count_raw_and_base():
    analysis, _ = analyze_amdgcn(SNIPPET, lds_bytes=0)
    assert analysis.histogram["v_cvt_pk_f32_fp8_e32"] == 1
    assert analysis.histogram["v_cvt_pk_f32_fp8_sdwa"] == 1
    assert analysis.base_histogram["v_cvt_pk_f32_fp8"] == 2
    assert analysis.base_histogram["v_add_f32"] == 1
    assert analysis.instructions == 12
    assert analysis.classes == {"branch": 2, "conversion": 2, "lds": 1, "matrix": 1, "program": 1, "smem": 1,
                                "valu": 2, "vmem": 1, "wait": 1}


@pytest.mark.parametrize("raw,base", [("v_add_f32_e64", "v_add_f32"), ("v_mov_b32_dpp", "v_mov_b32"),
                                      ("v_cvt_f32_f16_sdwa", "v_cvt_f32_f16"), ("v_add_f32_e64_dpp", "v_add_f32"),
                                      ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_f16")])
def test_base_mnemonic(raw, base):
    assert base_mnemonic(raw) == base


def test_classes():
    assert classify("v_wmma_f32_16x16x16_f16") == "matrix"
    assert classify("global_load_dwordx4") == "vmem"
    assert classify("s_waitcnt") == "wait"
    assert classify("s_wait_loadcnt") == "wait"
    assert classify("s_add_u32") == "salu"


def test_metadata_resources_prefer_architectural_vgprs():
    res = resources(SNIPPET, lds_bytes=4096)
    assert res["vgprs"] == 8 and res["agprs"] == 4       # .vgpr_count (12) is both together
    assert res["sgprs"] == 20 and res["vgpr_spills"] == 3 and res["sgpr_spills"] == 2
    assert res["scratch_bytes"] == 32 and res["kernarg_bytes"] == 48
    assert res["lds_bytes"] == 4096                      # Triton's dynamic LDS, not the asm's 0
    assert res["llvm_occupancy"] == 8


def test_debug_info_and_moved_paths_do_not_move_the_fingerprint():
    a, _ = analyze_amdgcn(SNIPPET)
    moved = SNIPPET.replace("/home/alice/repo", "/srv/ci/checkout").replace("kernel.py:8:9", "kernel.py:12:9")
    moved = moved.replace(".LBB0_", ".LBB7_").replace("\t.loc\t1 8 9", "\t.loc\t1 12 9")
    b, _ = analyze_amdgcn(moved)
    assert a.sha256 == b.sha256


def test_a_changed_instruction_moves_the_fingerprint():
    a, _ = analyze_amdgcn(SNIPPET)
    b, _ = analyze_amdgcn(SNIPPET.replace("v_and_b32_e32 v1, 63", "v_and_b32_e32 v1, 31"))
    assert a.sha256 != b.sha256


def test_truncated_assembly_is_a_parse_error_naming_the_line():
    cut = SNIPPET[: SNIPPET.index(".Lfunc_end0:")]
    with pytest.raises(ParseError, match=r"line \d+"):
        parse_stream(cut)


def test_garbage_instruction_is_a_parse_error_naming_the_line():
    broken = SNIPPET.replace("\ts_waitcnt lgkmcnt(0)", "\t%%% what")
    with pytest.raises(ParseError) as info:
        parse_stream(broken)
    assert "line 10" in str(info.value)


def test_no_kernel_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_stream("\t.text\n")


def test_dual_issue_pairs_show_both_halves_and_count_once():
    vopd = SNIPPET.replace("\tv_and_b32_e32 v1, 63,   v0\n",
                           "\tv_dual_mov_b32 v4, 0 :: v_dual_and_b32 v5, 0xfc, v7\n")
    analysis, _ = analyze_amdgcn(vopd)
    assert analysis.histogram["v_dual_mov_b32::v_dual_and_b32"] == 1
    assert "v_dual_mov_b32" not in analysis.histogram
    assert analysis.instructions == sum(analysis.histogram.values()) == 12
    assert "v_dual_mov_b32 v4, 0 :: v_dual_and_b32 v5, 0xfc, v7" in analysis.stream_text
    from xisa.expect import measure

    assert measure("*v_dual_and_b32*", analysis) == 1 and measure("v_dual_mov*", analysis) == 1
