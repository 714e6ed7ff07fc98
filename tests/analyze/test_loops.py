"""Loops of a stream: CFG, back edges, nesting, per-loop counts, the stream read back from its text, and
`loop:` expectations. Pure: streams written by hand in the normalized text a golden stores."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from xisa.analyze import amdgcn, sass
from xisa.analyze.backends import AMD, NVIDIA
from xisa.analyze.expect import evaluate, measure, parse_expectations
from xisa.analyze.loops import analysis_loops, find_loops, loop_changes, stream_with_locs
from xisa.analyze.model import Analysis
from xisa.errors import ParseError, SpecError
from xisa.golden.store import read_golden

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

REPO = Path(__file__).resolve().parents[2]

STRAIGHT = """bb0:
  s_load_dwordx2 s[0:1], s[4:5], 0x0
  s_cmp_eq_u32 s2, 0
  s_cbranch_scc1 bb2
bb1:
  v_add_f32_e32 v1, v2, v3
bb2:
  s_endpgm
"""

# bb1 loops on itself; bb0 and bb2 run once.
ONE_LOOP = """bb0:
  s_mov_b32 s6, 0
bb1:
  global_load_dword v1, v[2:3], off
  s_waitcnt vmcnt(0)
  v_mfma_f32_32x32x8_f16 a[0:15], v[4:5], v[6:7], a[0:15]
  ds_read_b128 v[8:11], v12
  s_add_i32 s6, s6, 1
  s_cmp_lt_i32 s6, s7
  s_cbranch_scc1 bb1
bb2:
  global_store_dword v[2:3], v1, off
  s_endpgm
"""

# bb1 is the outer loop's header, bb2 the inner loop's (bb2 -> bb2), bb3 closes the outer (bb3 -> bb1).
NESTED = """bb0:
  s_mov_b32 s6, 0
bb1:
  s_mov_b32 s8, 0
bb2:
  v_fma_f32 v1, v2, v3, v1
  s_add_i32 s8, s8, 1
  s_cmp_lt_i32 s8, s9
  s_cbranch_scc1 bb2
bb3:
  s_add_i32 s6, s6, 1
  s_cmp_lt_i32 s6, s7
  s_cbranch_scc1 bb1
bb4:
  s_endpgm
"""


def loops_of(text: str, handler=AMD):
    return find_loops(handler.stream_from_text(text), handler)


def test_loop_free_stream_has_no_loops():
    assert loops_of(STRAIGHT) == []


def test_self_loop_is_one_loop_with_its_counts():
    (loop,) = loops_of(ONE_LOOP)
    assert (loop.header, loop.depth, loop.blocks) == ("bb1", 1, ("bb1",))
    body = ONE_LOOP.split("bb1:\n")[1].split("bb2:")[0].strip().splitlines()
    assert loop.instructions == len(body)
    assert loop.classes["matrix"] == 1 and loop.classes["vmem"] == 1 and loop.classes["lds"] == 1
    assert loop.classes["wait"] == 1
    assert loop.base_histogram["v_mfma_f32_32x32x8_f16"] == 1
    assert "global_store_dword" not in loop.base_histogram and "s_endpgm" not in loop.base_histogram
    assert loop.scratch == 0


def test_nested_loops_get_depth_two_and_outer_counts_include_inner():
    outer, inner = loops_of(NESTED)
    assert (outer.header, outer.depth, inner.header, inner.depth) == ("bb1", 1, "bb2", 2)
    assert set(inner.blocks) < set(outer.blocks)
    assert outer.base_histogram["v_fma_f32"] == inner.base_histogram["v_fma_f32"] == 1
    assert outer.instructions > inner.instructions


def test_scratch_inside_the_loop_is_counted_in_that_loop_only():
    spilled = ONE_LOOP.replace("  s_add_i32 s6", "  scratch_store_dword off, v1, s0 offset:4\n"
                                                  "  scratch_load_dword v1, off, s0 offset:4\n  s_add_i32 s6")
    (before,), (after,) = loops_of(ONE_LOOP), loops_of(spilled)
    assert (before.scratch, after.scratch, after.spills) == (0, 2, 1)
    (change,) = loop_changes([before], [after], AMD)
    assert change.figures["scratch"] == (0, 2) and "scratch 0 -> 2" in change.phrase()
    # The same accesses after the loop: the loop's counts do not move, nothing is reported.
    outside = ONE_LOOP.replace("  s_endpgm", "  scratch_store_dword off, v1, s0 offset:4\n  s_endpgm")
    (same,) = loops_of(outside)
    assert same == before and loop_changes([before], [same], AMD) == []


def test_an_instruction_added_inside_the_loop_is_reported_in_it():
    edited = ONE_LOOP.replace("  s_add_i32 s6", "  v_exp_f32_e32 v1, v1\n  s_add_i32 s6")
    (change,) = loop_changes(loops_of(ONE_LOOP), loops_of(edited), AMD)
    assert change.figures["instructions"][1] == change.figures["instructions"][0] + 1
    assert change.histogram == [("v_exp_f32", 0, 1)]
    phrase = change.phrase()
    assert "v_exp_f32 +1" in phrase and "matrix 1 -> 1" in phrase and "scratch" not in phrase   # unmoved: left out
    (plain,) = loop_changes(loops_of(NESTED)[1:], loops_of(NESTED.replace("  v_fma_f32", "  v_exp_f32 v1, v1\n  v_fma_f32"))[1:], AMD)
    assert "matrix" not in plain.phrase()


def test_a_loop_added_or_gone_is_a_change():
    assert [c.head is not None for c in loop_changes([], loops_of(ONE_LOOP), AMD)] == [True]
    assert [c.base is not None for c in loop_changes(loops_of(ONE_LOOP), [], AMD)] == [True]


def test_gfx90a_spills_through_the_scratch_resource_but_triton_buffer_ops_are_not_scratch():
    spill = amdgcn.instruction("buffer_store_dword", "v1, off, s[0:3], 0 offset:8", 1)
    reload = amdgcn.instruction("buffer_load_dword", "v1, off, s[0:3], s33 offset:8", 1)
    triton = amdgcn.instruction("buffer_load_dword", "v1, v2, s[8:11], 0 offen", 1)
    assert [AMD.scratch_access(i) for i in (spill, reload, triton)] == ["store", "load", None]


SASS_LOOP = """bb0:
  MOV R1, c[0x0][0x28]
bb1:
  LDG.E R2, desc[UR4][R4.64]
  HMMA.16816.F32.BF16 R8, R12, R16, R8
  STL [R1+0x10], R2
  LDL R3, [R1+0x10]
  BSSY B0, bb3
  ISETP.GE.AND P0, PT, R5, R6, PT
  BRA @!P0 bb1
bb2:
  BSYNC B0
bb3:
  EXIT
"""


def test_sass_guarded_back_branch_is_a_loop_and_local_memory_is_scratch():
    (loop,) = loops_of(SASS_LOOP, NVIDIA)
    assert (loop.header, loop.blocks, loop.scratch_loads, loop.scratch_stores) == ("bb1", ("bb1",), 1, 1)
    assert loop.classes["tensor"] == 1 and loop.shown(NVIDIA)["tensor"] == 1
    assert "wait" not in loop.shown(NVIDIA)        # NVIDIA's waits are control bits: none shown, none made up


def test_sass_branch_forms():
    def flow(mnemonic, operands):
        return sass.flow(sass.instruction(mnemonic, operands, 1))
    assert flow("BRA", "bb1") == "jump"
    assert flow("BRA", "@!P0 bb1") == "branch"
    assert flow("BRA", "@P bb1") == "branch"          # register-numbers rule: the number is gone
    assert flow("BRA.U", "!UP0, bb1") == "branch"
    assert flow("BRA.U", "UPT, bb1") == "jump"
    assert flow("BRA.DIV", "UR4, bb1") == "branch"
    assert flow("BRA", "@!PT bb1") == "next"          # never taken
    assert flow("EXIT", "@P0") == "next" and flow("EXIT", "") == "stop"
    assert flow("BSSY", "B0, bb3") == "next"          # names a block, does not go there


def test_an_unconditional_jump_does_not_fall_through():
    text = "bb0:\n  s_branch bb2\nbb1:\n  v_mov_b32 v0, 0\n  s_branch bb1\nbb2:\n  s_endpgm\n"
    assert loops_of(text) == []                       # bb1 loops on itself but is unreachable


def test_loop_line_is_the_back_branch_s_else_the_most_frequent():
    stream = AMD.stream_from_text(ONE_LOOP)
    body = stream.blocks[1]
    body.instructions = [replace(i, loc="k.py:7") for i in body.instructions[:-1]] + \
        [replace(body.instructions[-1], loc="k.py:5")]
    assert find_loops(stream, AMD)[0].loc == "k.py:5"
    body.instructions[-1] = replace(body.instructions[-1], loc="")
    assert find_loops(stream, AMD)[0].loc == "k.py:7"
    assert "k.py:7" in find_loops(stream, AMD)[0].where


def test_locs_side_table_names_the_loop_and_is_ignored_when_it_does_not_fit():
    stream = AMD.stream_from_text(ONE_LOOP)
    count = sum(1 for _ in stream.instructions())
    named = stream_with_locs(AMD.stream_from_text(ONE_LOOP), ["g.py:3"] * count)
    assert find_loops(named, AMD)[0].loc == "g.py:3"
    assert find_loops(stream_with_locs(stream, ["g.py:3"]), AMD)[0].loc == ""


def test_callee_loops_are_found_in_their_function():
    text = ONE_LOOP + "function helper:\n" + ONE_LOOP.replace("s_endpgm", "s_setpc_b64 s[30:31]")
    kernel, callee = loops_of(text)
    assert (kernel.function, callee.function) == ("", "helper") and "in helper" in callee.where


def test_stream_text_parser_refuses_garbage_with_the_line():
    with pytest.raises(ParseError, match="line 1"):
        AMD.stream_from_text("  v_mov_b32 v0, 0\n")


@pytest.mark.parametrize("path", sorted((REPO / "golden").glob("*/*/*.isa")), ids=lambda p: str(p.relative_to(REPO)))
def test_every_golden_stream_reads_back_to_the_same_text(path):
    """The inverse holds for every stored stream: the loops of a golden are those of the stream it was written from."""
    text = path.read_text()
    handler = NVIDIA if path.stem.startswith("sm_") else AMD
    assert handler.stream_from_text(text).text() == text


def analysis_of(text: str, handler=AMD) -> Analysis:
    return Analysis(isa=handler.isa, sha256="", instructions=0, blocks=0, histogram={}, base_histogram={}, classes={},
                    resources={}, stream_text=text)


def expectations(conds: dict):
    return parse_expectations({"*": conds}, path="k.yaml", field="cases[0] (c)")


def test_loop_expectations_take_the_largest_value_over_the_loops():
    spilled = analysis_of(ONE_LOOP.replace("  s_add_i32 s6", "  scratch_store_dword off, v1, s0 offset:4\n  s_add_i32 s6"))
    (failure,) = evaluate(expectations({"loop:scratch": 0}), "gfx942", spilled)
    assert failure.actual == 1 and "in the loop at bb1 (depth 1)" in str(failure)
    assert evaluate(expectations({"loop:scratch": 0, "loop:spills": "<=1", "loop:v_mfma*": ">0",
                                  "loop:class:matrix": 1, "loop:instructions": ">1"}), "gfx942",
                    analysis_of(ONE_LOOP)) == []
    # Outer loop of two: its counts include the inner one's.
    assert measure("loop:v_fma_f32", analysis_of(NESTED)) == 1
    # No loop: every count is 0, so an upper bound holds and a lower bound fails.
    assert evaluate(expectations({"loop:scratch": 0}), "gfx942", analysis_of(STRAIGHT)) == []
    (none,) = evaluate(expectations({"loop:v_mfma*": ">0"}), "gfx942", analysis_of(STRAIGHT))
    assert "no loop" in str(none)


def test_loop_class_alias_counts_on_the_other_vendor():
    assert measure("loop:class:matrix", analysis_of(SASS_LOOP, NVIDIA)) == 1
    assert measure("loop:class:wait", analysis_of(SASS_LOOP, NVIDIA)) is None


@pytest.mark.parametrize("key, said", [
    ("loop:vgprs", "is the kernel's, not a loop's"),
    ("loop:scratch_bytes", "is the kernel's, not a loop's"),
    ("loop:scrach", "did you mean 'loop:scratch'"),
    ("loop:class:matirx", "did you mean 'class:matrix'"),
    ("loop:whatever", "unknown key"),
])
def test_bad_loop_key_is_one_line_naming_the_field(key, said):
    with pytest.raises(SpecError) as info:
        expectations({key: 0})
    assert said in str(info.value) and f"expect.*.{key}" in str(info.value) and "\n" not in str(info.value)


def test_a_real_golden_with_scratch_in_its_loop_fails_loop_scratch():
    """decode_stage1 fp8_d256 spills inside its KV loop on gfx1100 (scratch_bytes > 0 in its golden)."""
    folder = REPO / "golden" / "decode_stage1" / "fp8_d256"
    golden = read_golden(folder / "gfx1100.yaml", folder / "gfx1100.isa", display="gfx1100.yaml")
    analysis = golden.analysis()
    loops = analysis_loops(analysis)
    assert golden.data["resources"]["scratch_bytes"] > 0 and any(loop.scratch for loop in loops)
    (failure,) = evaluate(expectations({"loop:scratch": 0}), "gfx1100", analysis)
    assert failure.actual == max(loop.scratch for loop in loops)


def test_a_loop_is_named_by_its_for_line_when_the_back_edge_carries_the_last_body_line():
    # As ptxas for sm_100+ writes it: the back-edge branch has the last statement's line, the counter the `for`'s.
    stream = AMD.stream_from_text(ONE_LOOP)
    locs = ["g.py:2", "g.py:5", "g.py:5", "g.py:6", "g.py:6", "g.py:4", "g.py:4", "g.py:6", "g.py:9", "g.py:9"]
    named = stream_with_locs(stream, locs)
    texts = {"g.py:2": "acc = 0", "g.py:4": "for k in range(0, K, BLOCK):", "g.py:5": "a = tl.load(p)",
             "g.py:6": "acc = tl.dot(a, b, acc)", "g.py:9": "tl.store(q, acc)"}
    assert find_loops(named, AMD)[0].loc == "g.py:6"                # without texts: the back edge's line
    assert find_loops(named, AMD, texts)[0].loc == "g.py:4"         # with them: the loop statement
    while_texts = {**texts, "g.py:4": "while k < K:"}
    assert find_loops(named, AMD, while_texts)[0].loc == "g.py:4"
    no_statement = {**texts, "g.py:4": "k += BLOCK"}                 # no loop statement in the loop: as before
    assert find_loops(named, AMD, no_statement)[0].loc == "g.py:6"
