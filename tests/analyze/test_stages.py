"""Stage fingerprints: each stage normalized like the final stream (no paths, no line info, no kernel
name), and which stage two compiles first differ at. Pure: text in, fingerprints out.

Each normalizer is held both ways: what only line info, paths or the kernel's name can move keeps the
fingerprint, and a one-token change of code on a line that also carries line info moves it."""

from __future__ import annotations

import pytest

from xisa.analyze.backends import AMD, NVIDIA
from xisa.analyze.model import Analysis
from xisa.analyze.stages import (KERNEL_TOKEN, NORMALIZERS, StageAttribution, fingerprint, first_changed_stage,
                                 normalize_llir, normalize_mlir, normalize_ptx, stage_fingerprints)

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

# --- samples as Triton 3.8 prints them, with what a moved kernel or checkout moves as placeholders ---------

TTIR = """\
#loc = loc("{path}/kernels/scale.py":{line}:0)
module {{
  tt.func public @{kernel}(%arg0: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("{path}/kernels/scale.py":{line}:0), %arg1: i32 loc("n"(#loc))) attributes {{noinline = false}} {{
    %c256_i32 = arith.constant 256 : i32 loc(#loc1)
    %offsets = tt.get_program_id x : i32 loc(#loc2)
    %1 = arith.muli %offsets, %c256_i32 : i32 loc(#loc3)
    %2 = tt.call @kernels.scale.helper(%1) : (i32) -> i32 loc(callsite(#loc4 at #loc5))
    tt.return loc(#loc6)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc(unknown)
#loc2 = loc("{path}/kernels/scale.py":{line1}:24)
#loc3 = loc("{path}/kernels/scale.py":{line1}:30)
#loc4 = loc("{path}/kernels/scale.py":{line2}:4)
#loc5 = loc("offsets"(#loc3))
#loc6 = loc("{path}/kernels/odd (name).py":{line2}:4)
"""

TTGIR = """\
#blocked = #ttg.blocked<{{sizePerThread = [4], threadsPerWarp = [64], warpsPerCTA = [4], order = [0]}}>
#loc = loc("{path}/kernels/scale.py":{line}:0)
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.target = "hip:gfx942", "ttg.threads-per-warp" = 64 : i32}} {{
  tt.func public @{kernel}(%arg0: !tt.ptr<f32> {{tt.divisibility = 16 : i32}} loc("x_ptr"(#loc))) attributes {{noinline = false}} {{
    %offsets = tt.make_range {{end = 1024 : i32, start = 0 : i32}} : tensor<1024xi32, #blocked> loc(#loc1)
    tt.return loc(#loc2)
  }} loc(#loc)
}} loc(#loc)
#loc1 = loc("{path}/kernels/scale.py":{line1}:41)
#loc2 = loc("{path}/kernels/scale.py":{line2}:4)
"""

LLIR = """\
; ModuleID = 'LLVMDialectModule'
source_filename = "LLVMDialectModule"
target datalayout = "e-p:64:64-p1:64:64"
target triple = "amdgcn-amd-amdhsa"

; Function Attrs: nofree norecurse nounwind
define amdgpu_kernel void @{kernel}(ptr addrspace(1) inreg readonly captures(none) %0, i32 inreg %1) local_unnamed_addr #0 !dbg !{sub} {{
  %3 = tail call i32 @llvm.amdgcn.workgroup.id.x(), !dbg !{loc1}
  %4 = shl i32 %3, 8, !dbg !{loc2}
  %5 = icmp slt i32 %4, %1, !range !{rng}
  br i1 %5, label %6, label %7, !dbg !{loc2}

6:                                                ; preds = %2
  br label %7, !llvm.loop !{loop}

7:                                                ; preds = %6, %2
  ret void, !dbg !{loc3}
}}

declare i32 @llvm.amdgcn.workgroup.id.x() #1

attributes #0 = {{ nofree norecurse nounwind "amdgpu-flat-work-group-size"="1,256" }}
attributes #1 = {{ nocallback nofree nosync nounwind speculatable willreturn memory(none) }}

!llvm.module.flags = !{{!0, !1}}
!llvm.dbg.cu = !{{!2}}

!0 = !{{i32 2, !"Debug Info Version", i32 3}}
!1 = !{{i32 1, !"amdhsa_code_object_version", i32 500}}
!2 = distinct !DICompileUnit(language: DW_LANG_C, file: !3, producer: "triton", isOptimized: true, emissionKind: LineTablesOnly)
!3 = !DIFile(filename: "scale.py", directory: "{path}/kernels")
{debug_nodes}
"""


def _llir(*, path="/home/a/proj", kernel="scale_kernel", line=5, extra_locations=0, range_hi=2, loop_flag="llvm.loop.mustprogress"):
    """LLIR whose debug node count depends on how the source lines fall (`extra_locations`), so every
    non-debug node after them is numbered differently: the normalizer must renumber them back."""
    nodes = [f'distinct !DISubprogram(name: "{kernel}", linkageName: "{kernel}", scope: !3, file: !3, line: {line}, '
             'type: !DISubroutineType(types: !{}), spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !2)']
    for extra in range(extra_locations):
        nodes.append(f"!DILocation(line: {line + 20 + extra}, column: 7, scope: !4)")
    nodes += [f"!DILocation(line: {line + 1}, column: 24, scope: !4)", f"!DILocation(line: {line + 2}, column: 30, scope: !4)",
              f"!DILocation(line: {line + 3}, column: 4, scope: !4)"]
    first = 4
    numbers = {"sub": first, "loc1": first + 1 + extra_locations, "loc2": first + 2 + extra_locations,
               "loc3": first + 3 + extra_locations}
    rng, loop, flag = first + len(nodes), first + len(nodes) + 1, first + len(nodes) + 2
    lines = [f"!{first + i} = {node}" for i, node in enumerate(nodes)]
    lines += [f"!{rng} = !{{i32 0, i32 {range_hi}}}", f"!{loop} = distinct !{{!{loop}, !{flag}}}",
              f'!{flag} = !{{!"{loop_flag}"}}']
    return LLIR.format(path=path, kernel=kernel, rng=rng, loop=loop, debug_nodes="\n".join(lines), **numbers)


PTX = """\
//
// Generated by LLVM NVPTX Back-End
//

.version 8.7
.target sm_90a
.address_size 64

	// .globl	{kernel}                // -- Begin function {kernel}
.visible .entry {kernel}(
	.param .u64 .ptr .global .align 1 {kernel}_param_0,
	.param .u32 {kernel}_param_1
)
.reqntid 128, 1, 1
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<4>;
$L__func_begin0:
	.loc	1 {line} 0                          // scale.py:{line}:0
$L__tmp0:

// %bb.0:
	ld.param.b32 	%r1, [{kernel}_param_1];
	.loc	1 {line1} 24                         // scale.py:{line1}:24
	mov.u32 	%r2, %ctaid.x;
	shl.b32 	%r3, %r2, {shift};                 // shift by BLOCK
	setp.lt.s32 	%p1, %r3, %r1;
$L__tmp1:
	.loc	1 {line2} 4
	ret;
$L__tmp2:
$L__func_end0:
                                        // -- End function
}}
	.file	1 "{path}/kernels/scale.py"
	.section	.debug_abbrev
	{{
.b8 1                                   // Abbreviation Code
.b8 17                                  // DW_TAG_compile_unit
	}}
	.section	.debug_info
	{{
.b32 {info_size}
.b8 2
.b64 $L__func_begin0
.b8 115                                 // DW_AT_name
	}}
	.section	.debug_macinfo	{{	}}
"""


def _mlir(template: str, *, path="/home/a/proj", kernel="scale_kernel", line=5, rename=("", ""), **extra) -> str:
    text = template.format(path=path, kernel=kernel, line=line, line1=line + 1, line2=line + 3, **extra)
    return text.replace(*rename) if rename[0] else text


def _ptx(*, path="/home/a/proj", kernel="scale_kernel", line=5, shift=8) -> str:
    return PTX.format(path=path, kernel=kernel, line=line, line1=line + 1, line2=line + 3, shift=shift,
                      info_size=100 + len(path))


# Each sample as the moved/renamed variants that must keep the fingerprint, then code changes that must not.
SAMPLES = {
    "ttir": (lambda **kw: _mlir(TTIR, **kw), normalize_mlir),
    "ttgir": (lambda **kw: _mlir(TTGIR, **kw), normalize_mlir),
    "llir": (_llir, normalize_llir),
    "ptx": (_ptx, normalize_ptx),
}
MOVES = {
    "lines moved": {"line": 42},
    "variable renamed": {"rename": ("%offsets", "%idx")},
    "checkout moved": {"path": "/srv/ci/build-7/checkout"},
    "kernel renamed": {"kernel": "scale_kernel_v2"},
}


# Only MLIR names values after the Python variables they came from.
@pytest.mark.parametrize(("stage", "move"), [(stage, move) for stage in sorted(SAMPLES) for move in sorted(MOVES)
                                             if move != "variable renamed" or stage in ("ttir", "ttgir")])
def test_moving_lines_or_the_checkout_or_renaming_keeps_each_stage_fingerprint(stage, move):
    make, normalize = SAMPLES[stage]
    original, moved = make(), make(**MOVES[move])
    assert original != moved                                   # the raw stage text does move
    assert normalize(original, "scale_kernel") == normalize(moved, MOVES[move].get("kernel", "scale_kernel"))
    text = normalize(moved, MOVES[move].get("kernel", "scale_kernel"))
    assert "/home/a/proj" not in text and "/srv/ci" not in text and "scale.py" not in text
    assert "scale_kernel" not in text and KERNEL_TOKEN in text


def test_llir_metadata_is_renumbered_when_debug_nodes_come_and_go():
    # More debug locations (lines that fell differently) renumber `!range` and the loop's nodes in the raw IR.
    few, many = _llir(), _llir(extra_locations=3)
    assert "!range !8" in few and "!range !11" in many
    assert normalize_llir(few) == normalize_llir(many)
    text = normalize_llir(few)
    assert "!DI" not in text and "!dbg" not in text and "source_filename" not in text and "ModuleID" not in text
    assert '!{!"llvm.loop.mustprogress"}' in text and "!{i32 0, i32 2}" in text   # code metadata stays


CODE_CHANGES = {
    "ttir": [lambda: _mlir(TTIR).replace("arith.muli %offsets", "arith.addi %offsets"),
             lambda: _mlir(TTIR).replace("arith.muli %offsets, %c256_i32", "arith.muli %c256_i32, %offsets"),
             lambda: _mlir(TTIR).replace("@kernels.scale.helper", "@kernels.scale.helper2"),
             lambda: _mlir(TTIR).replace("tt.divisibility = 16", "tt.divisibility = 8")],
    "ttgir": [lambda: _mlir(TTGIR).replace("sizePerThread = [4]", "sizePerThread = [8]"),
              lambda: _mlir(TTGIR).replace("end = 1024", "end = 512")],
    "llir": [lambda: _llir().replace("shl i32 %3, 8, !dbg", "shl i32 %3, 9, !dbg"),
             lambda: _llir(range_hi=3), lambda: _llir(loop_flag="llvm.loop.unroll.disable"),
             lambda: _llir().replace('"1,256"', '"1,512"')],
    "ptx": [lambda: _ptx(shift=9), lambda: _ptx().replace(".reqntid 128, 1, 1", ".reqntid 256, 1, 1"),
            lambda: _ptx().replace("setp.lt.s32", "setp.le.s32")],
}


@pytest.mark.parametrize("stage", sorted(CODE_CHANGES))
def test_a_code_change_on_a_line_with_line_info_moves_the_fingerprint(stage):
    make, normalize = SAMPLES[stage]
    base = fingerprint(normalize(make(), "scale_kernel"))
    for change in CODE_CHANGES[stage]:
        changed = change()
        assert changed != make(), "the sample edit must apply"
        assert fingerprint(normalize(changed, "scale_kernel")) != base


def test_a_callee_named_like_the_kernel_is_not_renamed():
    text = normalize_mlir("tt.call @scale_kernel_helper() loc(#loc)\ntt.call @mod.scale_kernel() loc(#loc)\n", "scale_kernel")
    assert "@scale_kernel_helper" in text and "@mod.scale_kernel" in text


def _analysis(**kw) -> Analysis:
    return Analysis(isa=kw.pop("isa"), sha256="a" * 64, instructions=0, blocks=0, histogram={}, base_histogram={},
                    classes={}, resources={}, stream_text="", **kw)


def test_amd_fingerprints_every_stage_in_order_final_stream_and_code_bytes_from_the_analysis():
    asm = {"ttir": _mlir(TTIR), "ttgir": _mlir(TTGIR), "llir": _llir(), "amdgcn": "ignored", "hsaco": b"\x7fELF"}
    analysis = _analysis(isa="amdgcn", code_sha256="c" * 64)
    prints = stage_fingerprints(AMD, asm, analysis, kernel="scale_kernel")
    assert tuple(prints) == AMD.fingerprinted_stages == ("ttir", "ttgir", "llir", "amdgcn", "hsaco")
    assert prints["amdgcn"] == analysis.sha256 and prints["hsaco"] == analysis.code_sha256
    for stage in ("ttir", "ttgir", "llir"):
        assert prints[stage] == fingerprint(NORMALIZERS[stage](asm[stage], "scale_kernel"))
    assert len(set(prints.values())) == len(prints)


class _LazyAsm(dict):
    """Triton's `compiled.asm` computes `sass` on first lookup (runs nvdisasm): fingerprints must not."""

    def __missing__(self, key):
        raise AssertionError(f"asked for {key}")


def test_nvidia_cubin_fingerprint_is_its_code_object_and_never_makes_triton_disassemble():
    asm = _LazyAsm(ttir=_mlir(TTIR), ttgir=_mlir(TTGIR), llir=_llir(), ptx=_ptx(), cubin=b"\x7fELF")
    prints = stage_fingerprints(NVIDIA, asm, _analysis(isa="sass", code_sha256="c" * 64), kernel="scale_kernel")
    assert tuple(prints) == NVIDIA.fingerprinted_stages == ("ttir", "ttgir", "llir", "ptx", "sass", "cubin")
    assert prints["sass"] == "a" * 64 and prints["cubin"] == "c" * 64


ORDER = AMD.fingerprinted_stages


@pytest.mark.parametrize("first", ORDER)
def test_first_changed_stage_is_the_earliest_differing_one(first):
    base = {stage: f"{index:064x}" for index, stage in enumerate(ORDER)}
    head = {stage: (f"{index + 100:064x}" if ORDER.index(stage) >= ORDER.index(first) else base[stage])
            for index, stage in enumerate(ORDER)}
    assert first_changed_stage(base, head, ORDER) == first
    attribution = StageAttribution(base=base, head=head, order=ORDER)
    before = list(ORDER[:ORDER.index(first)])
    assert attribution.identical() == before
    expected = f"first at {first}" + (f": {', '.join(before)} identical" if before else "")
    assert attribution.phrase() == expected
    assert attribution.verdict_text() == f"changed ({expected})"


def test_attribution_without_fingerprints_on_one_side_is_unknown_never_a_stage():
    head = {stage: "1" * 64 for stage in ORDER}
    assert first_changed_stage({}, head, ORDER) is None and first_changed_stage(head, None, ORDER) is None
    unknown = StageAttribution(base={}, head=head, order=ORDER)
    assert not unknown.known
    assert unknown.verdict_text() == ("changed, stage unknown (golden has no stage fingerprints; "
                                      "record them with `xisa bless --record-stages`)")
    # a stage only one side has (another Triton may keep fewer) is skipped, not called changed
    partial = {k: v for k, v in head.items() if k != "ttgir"}
    other = dict(head, ttgir="2" * 64, llir="3" * 64)
    assert first_changed_stage(partial, other, ORDER) == "llir"
    same = StageAttribution(base=head, head=dict(head), order=ORDER)
    assert same.first is None and same.phrase() == f"no stage differs: {', '.join(ORDER)} identical"
