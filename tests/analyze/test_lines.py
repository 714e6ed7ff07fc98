"""Source-line attribution, pure: `.file`/`.loc` (amdgcn) and nvdisasm's `//## File` comments (SASS) give each
instruction its line without moving the fingerprint, the table adds up, and two tables are matched by the
lines' text so that a moved line is no change."""

from __future__ import annotations

from pathlib import Path

import pytest

from xisa.analyze import amdgcn, sass
from xisa.analyze.lines import NO_LINE, count_by_line, line_changes, match_rows, resolve, total

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "asm"

AMDGCN = """\
\t.text
\t.file\t"k.py"
\t.file\t0 "/home/u/proj" "kernels/k.py" md5 0x0123456789abcdef0123456789abcdef
\t.file\t1 "/home/u/proj/kernels" "k.py"
\t.file\t2 "/home/u/proj/kernels" "helpers.py"
\t.file\t3 "/home/u/venv/lib/python3.11/site-packages/triton/language" "standard.py"
\t.globl\tk
\t.type\tk,@function
k:
\t.loc\t1 11 0 prologue_end
\ts_load_dwordx2 s[0:1], s[0:1], 0x0
\t.loc\t1 0 0 is_stmt 0
\ts_mov_b32 s2, 0
\t.loc\t2 7 12 is_stmt 1                 ; helpers.py:7:12 @[ k.py:15:9 ]
\tv_add_f32_e32 v0, v0, v1
.LBB0_1:
\tv_mul_f32_e32 v0, v0, v1
\t.loc\t3 293 12                 ; standard.py:293:12 @[ standard.py:191:9 @[ k.py:20:7 ] ]
\tv_max_f32_e32 v0, v0, v1
\t.loc\t3 43 12                  ; standard.py:43:12
\tv_sub_f32_e32 v0, v0, v1
\t.loc\t0 3 1
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel k
\t.end_amdhsa_kernel
"""


def _locs(stream):
    return [ins.loc for ins in stream.instructions()]


def test_amdgcn_loc_follows_the_file_table_md5_form_included_and_line_0_is_no_line():
    _, stream = amdgcn.parse_stream(AMDGCN)
    standard = "/home/u/venv/lib/python3.11/site-packages/triton/language/standard.py"
    assert _locs(stream) == ["/home/u/proj/kernels/k.py:11", "", "/home/u/proj/kernels/helpers.py:7",
                             "/home/u/proj/kernels/helpers.py:7",
                             "/home/u/proj/kernels/k.py:20",    # tl.max inlined at the kernel's line 20
                             f"{standard}:43",                  # no caller named: the library line itself
                             "/home/u/proj/kernels/k.py:3"]


def test_amdgcn_line_information_is_outside_the_fingerprint():
    moved = AMDGCN.replace("\t.loc\t1 11 0", "\t.loc\t1 12 0").replace("/home/u/proj", "/elsewhere")
    stripped = "\n".join(line for line in AMDGCN.splitlines() if ".loc" not in line and ".file" not in line) + "\n"
    _, stream = amdgcn.parse_stream(AMDGCN)
    assert _locs(amdgcn.parse_stream(moved)[1]) != _locs(stream)
    assert amdgcn.parse_stream(moved)[1].sha256() == amdgcn.parse_stream(stripped)[1].sha256() == stream.sha256()


def test_assembly_without_line_information_is_one_no_line_row():
    asm = (FIXTURES / "scale_gfx942.amdgcn").read_text()
    assert ".loc" not in asm
    analysis, _ = amdgcn.analyze_amdgcn(asm)
    assert [(r["loc"], r["count"]) for r in analysis.lines] == [(NO_LINE, analysis.instructions)]


NVDISASM = """\
\t.headerflags\t@"EF_CUDA_SM90"
//--------------------- .text.k                --------------------------
\t.section\t.text.k,"ax",@progbits
        .global         k
        .type           k,@function
k:
.text.k:
\t//## File "/home/u/proj/kernels/k.py", line 11
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "/home/u/proj/kernels/helpers.py", line 7 inlined at "/home/u/proj/kernels/k.py", line 15
\t//## File "/home/u/proj/kernels/k.py", line 15
        /*0010*/                   FFMA R7, R0, R9, 1 ;
        /*0020*/                   FFMA R9, R6, R9, 1 ;
\t//## File "/v/site-packages/triton/language/standard.py", line 263 inlined at "/v/site-packages/triton/language/standard.py", line 293
\t//## File "/v/site-packages/triton/language/standard.py", line 293 inlined at "/home/u/proj/kernels/k.py", line 105
\t//## File "/home/u/proj/kernels/k.py", line 105
        /*0030*/                   FADD R48, R89, R86 ;
\t//## File "/home/u/proj/kernels/k.py", line 0
        /*0040*/                   EXIT ;
.L_x_0:
        /*0050*/                   BRA `(.L_x_0) ;
        /*0060*/                   NOP ;
"""


def test_sass_loc_from_nvdisasm_line_comments_innermost_first_and_dropped_from_the_stream():
    stream = sass.parse_stream(NVDISASM)
    helper = "/home/u/proj/kernels/helpers.py:7"
    # a tl.sum inlined twice into the kernel's line 105 is that line's
    assert _locs(stream) == ["/home/u/proj/kernels/k.py:11", helper, helper, "/home/u/proj/kernels/k.py:105", "", ""]
    no_comments = "\n".join(line for line in NVDISASM.splitlines() if "//##" not in line) + "\n"
    assert sass.parse_stream(no_comments).sha256() == stream.sha256()
    assert all(ins.loc == "" for ins in sass.parse_stream(no_comments).instructions())


def test_the_table_adds_up_with_one_explicit_no_line_row():
    _, stream = amdgcn.parse_stream(AMDGCN)
    rows = count_by_line(stream)
    assert total(rows) == sum(1 for _ in stream.instructions())
    assert rows[-1]["loc"] == NO_LINE and rows[-1]["count"] == 1
    assert {r["loc"]: r["count"] for r in rows}["/home/u/proj/kernels/helpers.py:7"] == 2
    assert total(rows) == 7


def test_resolve_makes_paths_relative_merges_and_reads_texts():
    rows = [{"loc": "/a/kernels/k.py:3", "text": "", "count": 2, "histogram": {"v_add_f32": 2}},
            {"loc": "/b/kernels/k.py:3", "text": "", "count": 1, "histogram": {"v_mul_f32": 1}},
            {"loc": NO_LINE, "text": "", "count": 1, "histogram": {"s_endpgm": 1}}]
    out = resolve(rows, path_of=lambda p: p.split("/", 2)[2], text_of=lambda p, n: f"line {n} of {p[-4:]}")
    assert out == [{"loc": "kernels/k.py:3", "text": "line 3 of k.py", "count": 3,
                    "histogram": {"v_add_f32": 2, "v_mul_f32": 1}},
                   {"loc": NO_LINE, "text": "", "count": 1, "histogram": {"s_endpgm": 1}}]


def _row(loc, text, **hist):
    return {"loc": loc, "text": text, "count": sum(hist.values()), "histogram": hist}


BASE = [_row("k.py:7", "offsets = a + b", v_add=3), _row("k.py:9", "x = tl.load(p)", buffer_load=1, v_and=2),
        _row("k.py:13", "y = x * f", v_mul=1), _row("k.py:14", "tl.store(q, y)", buffer_store=1),
        _row(NO_LINE, "", s_mov=1)]


def _shifted(rows, by):
    return [dict(r, loc=f"k.py:{int(r['loc'].split(':')[1]) + by}") if r["loc"] != NO_LINE else r for r in rows]


def test_a_blank_line_inserted_above_is_no_line_change():
    assert line_changes(BASE, _shifted(BASE, 1)) == []
    assert all(a is not None and b is not None for a, b in match_rows(BASE, _shifted(BASE, 1)))


def test_an_edited_line_that_also_moved_is_attributed_to_itself_not_to_minus_n_plus_n():
    head = _shifted(BASE, 2)
    head[2] = _row("k.py:15", "y = x * f + 1.0", v_mul=1, v_add=1)
    (change,) = line_changes(BASE, head)
    assert (change.base_loc, change.head_loc, change.text) == ("k.py:13", "k.py:15", "y = x * f + 1.0")
    assert change.histogram == [("v_add", 0, 1)] and change.delta == 1
    assert change.describe().startswith("k.py:15 (was :13) `y = x * f + 1.0`: +1 v_add")


def test_changes_come_largest_first_and_a_line_new_on_one_side_is_unpaired():
    head = [*BASE[:4], _row("k.py:20", "z = tl.exp(y)", v_exp=5), BASE[4]]
    head[1] = _row("k.py:9", "x = tl.load(p)", buffer_load=1, v_and=1)
    changes = line_changes(BASE, head)
    assert [(c.base_loc, c.head_loc) for c in changes] == [(None, "k.py:20"), ("k.py:9", "k.py:9")]
    assert [c.delta for c in changes] == [5, -1]


def test_duplicate_line_texts_pair_in_order():
    base = [_row("k.py:5", "acc += 1", v_add=1), _row("k.py:9", "acc += 1", v_add=2)]
    head = [_row("k.py:6", "acc += 1", v_add=1), _row("k.py:10", "acc += 1", v_add=4)]
    (change,) = line_changes(base, head)
    assert (change.base_loc, change.head_loc, change.delta) == ("k.py:9", "k.py:10", 2)


def test_the_edited_line_comes_before_larger_lines_the_compiler_only_traded_instructions_between():
    # The edit adds 2 v_mul on line 13; the scheduler also moved 3 s_mov from line 9 to line 7 (net zero).
    head = [_row("k.py:7", "offsets = a + b", v_add=3, s_mov=3), _row("k.py:9", "x = tl.load(p)", buffer_load=1,
            v_and=2, s_mov=0), _row("k.py:13", "y = x * f * g", v_mul=3), BASE[3], BASE[4]]
    base = [BASE[0], _row("k.py:9", "x = tl.load(p)", buffer_load=1, v_and=2, s_mov=3), *BASE[2:]]
    changes = line_changes(base, head)
    assert [c.head_loc for c in changes] == ["k.py:13", "k.py:7", "k.py:9"]
    assert [c.explains for c in changes] == [2, 0, 0]
    assert changes[1].size == changes[2].size == 3 > changes[0].size


def test_an_edited_line_next_to_a_line_that_lost_all_its_instructions_stays_one_row():
    # line 13 edited in place, line 14 no longer has instructions: a replaced run of unequal length
    head = [BASE[0], BASE[1], _row("k.py:13", "y = x * f * 0.5", v_mul=2), BASE[4]]
    changes = line_changes(BASE, head)
    assert sorted((c.base_loc, c.head_loc) for c in changes) == [("k.py:13", "k.py:13"), ("k.py:14", None)]


def test_waits_and_delay_hints_do_not_rank_a_line_first():
    base = [_row("k.py:5", "a = tl.load(p)", s_delay_alu=1, v_and=1), _row("k.py:9", "acc = acc * 0.5", v_mul=1)]
    head = [_row("k.py:5", "a = tl.load(p)", s_delay_alu=40, v_and=1), _row("k.py:9", "acc = acc * 0.5", v_mul=3)]
    assert [c.head_loc for c in line_changes(base, head)] == ["k.py:5", "k.py:9"]        # the hints counted
    ranked = line_changes(base, head, is_filler=lambda m: m == "s_delay_alu")
    assert [c.head_loc for c in ranked] == ["k.py:9", "k.py:5"] and ranked[1].explains == 0


def test_the_line_whose_text_changed_comes_first_even_when_other_lines_moved_more():
    # A one-instruction edit on line 13; the register allocator's ripple adds 3 v_and on line 9 (text unchanged).
    head = [BASE[0], _row("k.py:9", "x = tl.load(p)", buffer_load=1, v_and=5), _row("k.py:13", "y = x * f * 0.5",
            v_mul=2), BASE[3], BASE[4]]
    changes = line_changes(BASE, head)
    assert [(c.head_loc, c.edited) for c in changes] == [("k.py:13", True), ("k.py:9", False)]
    assert changes[1].explains > changes[0].explains      # ranked first for its edit, not its size
    assert changes[0].to_json()["edited"] is True
