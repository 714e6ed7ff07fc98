"""The amdgcn parser and normalizer on hand-written snippets."""

from __future__ import annotations

import pytest

from xisa.analyze.amdgcn import analyze_amdgcn, base_mnemonic, classify, parse_stream, resources
from xisa.errors import ParseError

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

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
    from xisa.analyze.expect import measure

    assert measure("*v_dual_and_b32*", analysis) == 1 and measure("v_dual_mov*", analysis) == 1


# --- every function of the code object (issue 11 item 1) -----------------------------------------
# LLVM prints a noinline callee before the kernel; the kernel is the function with `.amdhsa_kernel`.
CALLEE = """\
\t.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
\t.text
\t.type\thelper,@function
helper:                                 ; @helper
\ts_waitcnt vmcnt(0) expcnt(0) lgkmcnt(0)
\tv_cmp_lt_i32_e32 vcc, v4, v5
\ts_cbranch_execz .LBB0_2
; %bb.1:
\tglobal_store_dword v[0:1], v6, off
.LBB0_2:
\ts_setpc_b64 s[30:31]
.Lfunc_end0:
\t.set .Lhelper.num_vgpr, 7
\t.set .Lhelper.numbered_sgpr, 32
; Function info:
; TotalNumSgprs: 36
; NumVgprs: 7
; ScratchSize: 0
"""
KERNEL = """\
\t.text
\t.type\tk,@function
k:                                      ; @k
\ts_load_dwordx2 s[2:3], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\ts_branch .LBB1_0
.LBB1_0:
\ts_getpc_b64 s[0:1]
\ts_add_u32 s0, s0, helper@rel32@lo+4
\tv_mov_b32_e32 v0, s2
\ts_swappc_b64 s[30:31], s[0:1]
\ts_endpgm
.Lfunc_end1:
\t.amdhsa_kernel k
\t\t.amdhsa_next_free_vgpr 40
\t\t.amdhsa_next_free_sgpr 38
\t.end_amdhsa_kernel
\t.set .Lk.num_vgpr, max(40, .Lhelper.num_vgpr)
\t.set .Lk.numbered_sgpr, max(33, .Lhelper.numbered_sgpr)
; Kernel info:
; TotalNumSgprs: 38
; NumVgprs: 40
; NumAgprs: 0
; Occupancy: 8
"""


def _instruction_lines(asm: str) -> int:
    """An independent count: tab-indented lines that start with a lower-case mnemonic."""
    import re

    return sum(1 for line in asm.splitlines() if re.match(r"^\t[a-z][a-z0-9_]*(\s|$)", line))


def test_a_noinline_callee_printed_first_does_not_hide_the_kernel():
    name, stream = parse_stream(CALLEE + KERNEL)
    assert name == "k"
    kernel_only, _ = analyze_amdgcn(KERNEL)
    both, _ = analyze_amdgcn(CALLEE + KERNEL)
    # the kernel first, written as it would be alone, so kernels without callees keep their fingerprint
    head, callee = both.stream_text.split("function helper:\n")
    assert head == kernel_only.stream_text
    assert "s_cbranch_execz bb2" in callee and "global_store_dword v[0:1], v6, off" in callee
    assert both.instructions == _instruction_lines(CALLEE + KERNEL) == sum(both.histogram.values())
    assert both.histogram["s_setpc_b64"] == 1 and both.histogram["s_endpgm"] == 1
    assert both.blocks == len(list(stream.all_blocks()))


def test_a_change_in_the_kernel_or_the_callee_moves_the_fingerprint():
    base, _ = analyze_amdgcn(CALLEE + KERNEL)
    store = "\tv_mov_b32_e32 v0, s2\n\tglobal_store_dword v[2:3], v0, off\n"
    kernel_edit, _ = analyze_amdgcn(CALLEE + KERNEL.replace("\tv_mov_b32_e32 v0, s2\n", store))
    callee_edit, _ = analyze_amdgcn(CALLEE.replace("v6, off", "v7, off") + KERNEL)
    assert len({base.sha256, kernel_edit.sha256, callee_edit.sha256}) == 3


def test_resources_are_the_kernels_with_the_callee_folded_in_not_the_callees():
    res = resources(CALLEE + KERNEL, lds_bytes=0)
    assert res["vgprs"] == 40 and res["sgprs"] == 38 and res["llvm_occupancy"] == 8


def test_two_kernels_in_one_code_object_is_a_parse_error():
    second = (KERNEL.replace("\tk,@function", "\tk2,@function").replace("\nk:", "\nk2:")
              .replace(".amdhsa_kernel k\n", ".amdhsa_kernel k2\n").replace(".Lfunc_end1", ".Lfunc_end2"))
    with pytest.raises(ParseError, match="more than one kernel"):
        parse_stream(KERNEL + second)


# --- inline asm: directives are assembled after printing (issue 11 item 4) -------------------------
def _with_asm(*body: str) -> str:
    asm = "\t;;#ASMSTART\n" + "".join(f"{line}\n" for line in body) + "\t;;#ASMEND\n"
    return SNIPPET.replace("\tv_and_b32_e32 v1, 63,   v0\n", "\tv_and_b32_e32 v1, 63,   v0\n" + asm)


def test_data_directives_in_inline_asm_are_stream_entries():
    a, _ = analyze_amdgcn(_with_asm("\tv_mov_b32 v1, v1", ".long 0xbf800007"))
    b, _ = analyze_amdgcn(_with_asm("\tv_mov_b32 v1, v1", ".long 0xbf810000"))
    assert a.histogram[".long"] == 1 and a.classes["data"] == 1 and ".long 0xbf800007" in a.stream_text
    assert a.sha256 != b.sha256 and a.opaque_asm == []


def test_rept_with_a_literal_count_is_unrolled():
    a, _ = analyze_amdgcn(_with_asm(".rept 64", "s_nop 0", ".endr"))
    b, _ = analyze_amdgcn(_with_asm(".rept 2", "s_nop 0", ".endr"))
    plain, _ = analyze_amdgcn(SNIPPET)
    assert a.histogram["s_nop"] == 64 and b.histogram["s_nop"] == 2
    assert a.instructions == plain.instructions + 64 and a.sha256 != b.sha256
    nested, _ = analyze_amdgcn(_with_asm(".rept 3", ".rept 0x2", "s_nop 1", ".endr", ".endr"))
    assert nested.histogram["s_nop"] == 6


def test_literal_conditionals_are_decided():
    plain, _ = analyze_amdgcn(SNIPPET)
    skipped, _ = analyze_amdgcn(_with_asm(".if 0", "v_add_u32 v1, v1, v1", ".endif"))
    other_body, _ = analyze_amdgcn(_with_asm(".if 0", "v_sub_u32 v1, v1, v1", ".endif"))
    assert skipped.sha256 == other_body.sha256 == plain.sha256       # the assembler never sees the body
    taken, _ = analyze_amdgcn(_with_asm(".if 1", "s_nop 1", ".else", "s_nop 2", ".endif"))
    assert "s_nop 1" in taken.stream_text and "s_nop 2" not in taken.stream_text
    zero, _ = analyze_amdgcn(_with_asm(".ifeq 0", "s_nop 3", ".else", "s_nop 4", ".endif"))
    assert "s_nop 3" in zero.stream_text and "s_nop 4" not in zero.stream_text


@pytest.mark.parametrize("body,directive", [
    ((".ifdef FOO", "s_nop 5", ".endif"), ".ifdef"),
    ((".if FOO - 1", "s_nop 5", ".endif"), ".if"),
    ((".rept N", "s_nop 5", ".endr"), ".rept"),
    ((".rept 100000000", "s_nop 5", ".endr"), ".rept"),       # bounded: not unrolled
    ((".macro m", "s_nop 5", ".endm"), ".macro"),
    ((".p2align 8",), ".p2align"),
])
def test_undecidable_directives_stay_verbatim_and_mark_the_cell(body, directive):
    analysis, _ = analyze_amdgcn(_with_asm(*body))
    assert directive in analysis.opaque_asm
    assert analysis.to_record()["opaque_asm"] == analysis.opaque_asm
    changed, _ = analyze_amdgcn(_with_asm(*(line.replace("5", "6") for line in body)))
    if any("5" in line for line in body):
        assert changed.sha256 != analysis.sha256                  # kept verbatim: an edit still shows


def test_unterminated_inline_asm_is_a_parse_error_naming_the_line():
    broken = SNIPPET.replace("\ts_endpgm\n", "\t;;#ASMSTART\n\ts_endpgm\n")
    with pytest.raises(ParseError, match="ASMEND") as info:
        parse_stream(broken)
    assert "line " in str(info.value)


def test_a_code_object_that_is_not_an_elf_is_a_parse_error_naming_it():
    from xisa.analyze.codeobject import code_sha256

    for broken in (b"", b"not an elf at all", b"\x7fELF\x02\x01" + b"\0" * 58 + b"\xff" * 64):
        with pytest.raises(ParseError, match="code object is not a readable ELF"):
            code_sha256(broken)


# --- the backend table (xisa.analyze.backends) ---------------------------------------------------

def test_the_amd_entry_analyzes_with_occupancy_and_names_every_resource_it_reports():
    from pathlib import Path

    from xisa.analyze.backends import AMD, backend, backend_of_isa
    from xisa.analyze.occupancy import amd_waves_per_simd
    from xisa.spec.targets import load_targets

    repo = Path(__file__).resolve().parents[2]
    gfx942 = load_targets([repo / "targets"])["gfx942"]
    asm = (repo / "tests" / "fixtures" / "asm" / "scale_gfx942.amdgcn").read_text()
    assert gfx942.handler is backend("hip") is backend_of_isa("amdgcn") is AMD
    plain, _ = analyze_amdgcn(asm, lds_bytes=2048)
    analysis = AMD.analyze(asm, _elf_with_text(b"\x00" * 8), None, shared_bytes=2048, num_warps=4, target=gfx942)
    assert analysis.sha256 == plain.sha256 and analysis.code_sha256 is not None
    res = analysis.resources
    assert set(res) == set(AMD.resources)
    assert res["occupancy"] == amd_waves_per_simd(gfx942, vgprs=res["vgprs"], agprs=res["agprs"], sgprs=res["sgprs"],
                                                  lds_bytes=res["lds_bytes"], num_warps=4)


def _elf_with_text(code: bytes) -> bytes:
    """The smallest ELF `codeobject.loaded_sections` reads: a header, `.text` and the section-name table."""
    import struct

    names = b"\0.text\0.shstrtab\0"
    shoff = 64 + len(code) + len(names)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 3, 224, 1, 0, 0, shoff, 0, 64, 0,
                         0, 64, 3, 2)
    section = struct.Struct("<IIQQQQIIQQ")
    table = (section.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + section.pack(1, 1, 0x6, 0, 64, len(code), 0, 0, 4, 0)
             + section.pack(7, 3, 0, 0, 64 + len(code), len(names), 0, 0, 1, 0))
    return header + code + names + table
