"""Output a reviewer can act on: the summary line, the `xisa bless` command that accepts a change,
the compile table per vendor, compile errors that keep their `^`, scopes that match nothing."""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from support import gfx11_branch_change
from xisa.analyze.model import Analysis
from xisa.golden.record import Golden
from xisa.render.compiled import render_compile_table
from xisa.render.formats import cells_phrase, error_block, grouped_by_message
from xisa.render.review import accept_commands, render_check_text, render_markdown, summary_line
from xisa.compile.worker.result import CellResult
from xisa.golden.verdict import CHANGED, ERROR, NEW, SAME, UNUSED, CellVerdict, CheckReport, compute_delta



def _analysis(isa: str = "amdgcn", stream: str = "bb0:\n  s_endpgm\n", **resources) -> Analysis:
    hist: dict[str, int] = {}
    for line in stream.splitlines()[1:]:
        hist[line.split()[0]] = hist.get(line.split()[0], 0) + 1
    if isa == "amdgcn":
        res = {"vgprs": 16, "agprs": 0, "sgprs": 10, "vgpr_spills": 0, "sgpr_spills": 0, "scratch_bytes": 0,
               "lds_bytes": 0, "occupancy": 16, "llvm_occupancy": 16}
    else:
        res = {"registers": 40, "stack_bytes": 0, "local_bytes": 0, "lds_bytes": 0, "occupancy": 48,
               "llvm_occupancy": None}
    res.update(resources)
    return Analysis(isa=isa, sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=sum(hist.values()),
                    blocks=1, histogram=hist, base_histogram=dict(hist), classes={}, resources=res, stream_text=stream)


def _verdict(kernel: str, case: str, target: str, verdict: str) -> CellVerdict:
    return CellVerdict(kernel=kernel, case=case, target=target, verdict=verdict,
                       golden_file=f"golden/{kernel}/{case}/{target}.yaml")


def _report(verdicts: list[CellVerdict], **kw) -> CheckReport:
    return CheckReport(verdicts=verdicts, toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=[], **kw)


# ---------------------------------------------------------------- summary: each target once

@pytest.mark.unit
def test_summary_lists_each_target_once():
    verdicts = [_verdict("k", f"c{i}", "gfx1100", CHANGED if i == 0 else SAME) for i in range(15)]
    verdicts += [_verdict("k", f"c{i}", "gfx942", SAME) for i in range(15)]
    verdicts += [_verdict("k", "c0", "sm_90", ERROR), _verdict("k", "c1", "sm_90", CHANGED),
                 _verdict("k", "c2", "sm_90", SAME)]
    line = summary_line(_report(verdicts))
    assert line == ("gfx1100: 1 changed, 14 byte-identical; sm_90: 1 error, 1 changed, 1 byte-identical; "
                    "byte-identical: gfx942 (15 cells)")
    for target in ("gfx1100", "gfx942", "sm_90"):
        assert line.count(target) == 1


@pytest.mark.unit
def test_summary_names_targets_with_the_same_counts_together():
    """One spec error on 13 targets is one part of the summary, not 13."""
    targets = [f"gfx{n}" for n in (1100, 1151, 1200)] + ["sm_90", "sm_100"]
    verdicts = [_verdict("k", case, target, ERROR) for target in targets for case in ("a", "b")]
    verdicts += [_verdict("k", "a", "gfx942", CHANGED), _verdict("k", "b", "gfx942", ERROR)]
    line = summary_line(_report(verdicts))
    assert line == "gfx1100, gfx1151, gfx1200, sm_100, sm_90: 2 error each; gfx942: 1 error, 1 changed"
    assert summary_line(_report([_verdict("k", "c", "gfx942", SAME)])) == "byte-identical: gfx942 (1 cell)"


# ---------------------------------------------------------------- how to accept a change

@pytest.mark.unit
def test_accept_commands_name_exactly_the_changed_cells():
    verdicts = [_verdict("scale", "big", "gfx1100", CHANGED), _verdict("scale", "small", "gfx1100", CHANGED),
                _verdict("scale", "mid", "gfx1100", SAME), _verdict("gemm", "a", "gfx1100", CHANGED),
                _verdict("gemm", "b", "gfx1100", NEW), _verdict("dot", "f16", "gfx1100", SAME),
                _verdict("scale", "big", "gfx1201", CHANGED), _verdict("scale", "small", "gfx1201", CHANGED),
                _verdict("scale", "mid", "gfx1201", SAME), _verdict("gemm", "a", "gfx1201", CHANGED),
                _verdict("gemm", "b", "gfx1201", CHANGED),
                _verdict("dot", "f16", "gfx942", NEW), _verdict("gone", "c", "gfx942", UNUSED),
                _verdict("dot", "old", "gfx942", UNUSED), _verdict("dot", "f16", "sm_90", ERROR)]
    commands = accept_commands(_report(verdicts), kernels={"scale", "dot", "gemm"})
    assert commands == [
        # gfx1100 and gfx1201 accept the same cells: one command. Every gemm case: the kernel; scale:mid and
        # dot:f16 stay as they are.
        "xisa bless --arch gfx1100 --arch gfx1201 --kernel gemm --kernel scale:big --kernel scale:small",
        # every cell selected on gfx942 is to be accepted: the target with the check's own filters (none),
        # which also removes the golden of the kernel that no longer exists
        "xisa bless --arch gfx942",
    ]
    # Outside a whole target, a golden whose kernel no longer exists cannot be named to bless: rm it.
    orphan = [_verdict("scale", "big", "gfx1100", CHANGED), _verdict("dot", "f16", "gfx1100", SAME),
              _verdict("gone", "c", "gfx1100", UNUSED)]
    assert accept_commands(_report(orphan), kernels={"scale", "dot"}) == [
        "xisa bless --arch gfx1100 --kernel scale",
        "rm -f golden/gone/c/gfx1100.yaml golden/gone/c/gfx1100.isa"]
    # A check narrowed by --kernel: the whole-target form keeps that filter, so no other cell is touched.
    narrowed = [_verdict("scale", "big", "gfx1100", CHANGED), _verdict("scale", "small", "gfx1100", CHANGED)]
    assert accept_commands(_report(narrowed), kernel_filters=["scale:*"], extra_args=["--spec", "my specs"]) == [
        "xisa bless --spec 'my specs' --arch gfx1100 --kernel 'scale:*'"]
    # A shard holds part of a target's cells: name them.
    assert accept_commands(_report(narrowed, shard=(1, 2))) == [
        "xisa bless --arch gfx1100 --kernel scale:big --kernel scale:small"]
    # Nothing to accept, or a result that cannot be trusted: no command.
    assert accept_commands(_report([_verdict("k", "c", "gfx942", SAME)])) == []
    assert accept_commands(_report(narrowed, problems=["goldens were made with Triton 3.6.0"])) == []


def test_check_says_how_to_accept_and_the_command_accepts_exactly_that(run_xisa, tinyproj):
    assert run_xisa("bless", cwd=tinyproj).code == 0
    gfx11_branch_change(tinyproj)
    out = run_xisa("check", "-q", cwd=tinyproj)
    assert out.code == 1
    command = "xisa bless --arch gfx1100 --kernel scale"       # scale's every case changed there; dot did not
    assert f"to accept: {command}" in out.out
    md = run_xisa("check", "--format", "markdown", cwd=tinyproj)
    assert f"```sh\n{command}\n```" in md.out
    assert json.loads(run_xisa("check", "--format", "json", cwd=tinyproj).out)["accept"] == [command]
    blessed = run_xisa(*command.split()[1:], "-q", cwd=tinyproj)
    assert blessed.code == 0 and blessed.out.strip() == "2 written, 0 unchanged, 0 removed"   # -q: the count only
    after = run_xisa("check", cwd=tinyproj)
    assert after.code == 0 and "to accept" not in after.out


# ---------------------------------------------------------------- --scope that matches nothing

@pytest.mark.unit
@pytest.mark.parametrize("scope,message", [
    ("gfx110", "scope 'gfx110': 'gfx110' matches no target (fix: did you mean 'gfx1100'?)"),
    ("gfx1100:scael", "scope 'gfx1100:scael': 'scael' matches no kernel (fix: did you mean 'scale'?)"),
    ("gfx11*:scale:bigg", "scope 'gfx11*:scale:bigg': 'bigg' matches no case of scale (fix: did you mean 'big'?)"),
])
def test_a_scope_that_matches_nothing_is_refused(run_xisa_in_process, tinyproj, scope, message):
    for command in (["check"], ["report", "--html", str(tinyproj / "r.html")]):
        out = run_xisa_in_process(*command, "--scope", scope, cwd=tinyproj)
        assert out.code == 2 and out.err == f"xisa: error: --scope: {message}\n", out.err
    assert not (tinyproj / "golden").exists() and not (tinyproj / "r.html").exists()


# ---------------------------------------------------------------- the compile table

def _results(case: str) -> list[CellResult]:
    return [
        CellResult(kernel="decode_stage1", case=case, target="gfx1100", status="ok",
                   analysis=_analysis("amdgcn", "bb0:\n  v_fma_f32 v1, v2, v3\n  v_fma_f32 v4, v5, v6\n  s_endpgm\n")),
        CellResult(kernel="decode_stage1", case="broken", target="gfx1100", status="error", error="boom"),
        CellResult(kernel="decode_stage1", case=case, target="sm_90", status="ok",
                   analysis=_analysis("sass", "bb0:\n  HMMA.16816.F32 R0, R4, R8, R0 ;\n  EXIT ;\n",
                                      stack_bytes=3144, local_bytes=8)),
    ]


def _render(results: list[CellResult], width: int, **kw) -> str:
    buffer = StringIO()
    render_compile_table(Console(file=buffer, width=width, no_color=True), results, {},
                         isa_of={"gfx1100": "amdgcn", "sm_90": "sass"}, **kw)
    return buffer.getvalue()


def _table_lines(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and lines[i][0] not in "┏┃┡│└"), len(lines))
    return lines[start:end]


@pytest.mark.unit
def test_compile_table_per_vendor_with_aligned_error_rows():
    text = _render(_results("fp8_d256_generic"), 120, counts=[], top=3)
    amd, nvidia = _table_lines(text, "gfx1100"), _table_lines(text, "sm_90")
    assert "waves per SIMD" in amd[0] and "warps per SM" in nvidia[0]
    assert "waves/SIMD" in "\n".join(amd) and "V/A/SGPR" in "\n".join(amd)
    assert "warps/SM" in "\n".join(nvidia) and "regs/thread" in "\n".join(nvidia)
    assert "VGPR" not in "\n".join(nvidia) and "scratch" not in "\n".join(nvidia)
    # The error row's `error` sits under the status header, nothing under sha256.
    header = next(line for line in amd if "sha256" in line)
    error_row = next(line for line in amd if "decode_stage1:broken" in line)
    assert error_row.index("error") == header.index("status")
    assert error_row[header.index("sha256"):header.index("status")].strip(" │") == ""
    sass_row = next(line for line in nvidia if "decode_stage1:fp8" in line)
    assert "3144" in sass_row and " 8 " in sass_row
    assert "v_fma_f32 2 · s_endpgm 1" in text and "HMMA.16816.F32 1" in text


@pytest.mark.unit
def test_compile_table_never_cuts_a_cell_name():
    # The corpus's longest name fits whole on one line at 120 columns, in both vendors' tables.
    text = _render(_results("fp8_d256_generic"), 120, counts=[], top=0)
    assert sum("decode_stage1:fp8_d256_generic " in line for line in text.splitlines()) == 2
    assert "…" not in text
    # A name too long for the terminal folds over lines, every character kept.
    long_case = "fp8_d256_generic-paged-kv-split-with-a-very-long-suffix"
    text = _render(_results(long_case), 120, counts=["v_fma*", "v_mfma*"], top=0)
    amd = _table_lines(text, "gfx1100")
    body = [line.split("│")[1].strip() for line in amd[next(i for i, l in enumerate(amd) if l.startswith("┡")) + 1:-1]]
    assert len(body) > 2                                       # folded over several lines ...
    assert "".join(body) == f"decode_stage1:{long_case}decode_stage1:broken"   # ... every character kept


def test_compile_top_option_and_count_validation(run_xisa, tinyproj):
    out = run_xisa("compile", "--arch", "gfx942", "--kernel", "scale:small", "--top", "2", cwd=tinyproj)
    assert out.code == 0 and "gfx942: top 2 instructions" in out.out
    listing = out.out.split("top 2 instructions", 1)[1]
    assert listing.splitlines()[1].strip().startswith("scale:small") and listing.count(" · ") == 1
    bad = run_xisa("compile", "--arch", "gfx942", "--count", "scrach_bytes", cwd=tinyproj)
    assert bad.code == 2 and "--count: unknown key 'scrach_bytes'" in bad.err and "'scratch_bytes'" in bad.err


# ---------------------------------------------------------------- multi-line compile errors

@pytest.mark.unit
def test_error_block_keeps_the_caret_under_its_column():
    message = ("CompilationError: at 2:41:\n"
               "def k(x_ptr, BLOCK: tl.constexpr):\n"
               "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
               "                                         ^\n"
               "arange's range must be a power of 2")
    lines = error_block("error k:c@gfx942", message).splitlines()
    assert lines[0] == "error k:c@gfx942: CompilationError: at 2:41:"
    source, caret = lines[2], lines[3]
    assert source[caret.index("^"):].startswith("tl.arange")
    long = error_block("e", "\n".join(f"line {i}" for i in range(100)), max_lines=5).splitlines()
    assert len(long) == 7 and "94 more lines" in long[1] and long[-1] == "    line 99"


def test_compile_error_is_multi_line_with_the_caret_aligned(run_xisa, tinyproj):
    path = tinyproj / "kernels" / "scale.yaml"
    path.write_text(path.read_text() + "  - name: broken\n    constexprs: {BLOCK: 1000}\n")
    out = run_xisa("compile", "--arch", "gfx942", "--kernel", "scale:broken", "--json", cwd=tinyproj)
    assert out.code == 2
    error = json.loads(out.out)["cells"][0]["error"]
    assert error.startswith("CompilationError: at ") and "\n" in error and error.endswith("power of 2")
    block = out.err[out.err.index("error scale:broken@gfx942: "):].splitlines()
    caret = next(i for i, line in enumerate(block) if line.strip() == "^")
    assert block[caret - 1][block[caret].index("^"):].startswith("tl.arange(")
    text = run_xisa("check", "--arch", "gfx942", "--kernel", "scale:broken", cwd=tinyproj)
    assert text.code == 2 and "error: scale:broken@gfx942: CompilationError: at " in text.out
    lines = text.out.splitlines()
    caret = next(i for i, line in enumerate(lines) if line.strip() == "^")
    assert lines[caret - 1][lines[caret].index("^"):].startswith("tl.arange(")


# ---------------------------------------------------------------- binding differences in text

@pytest.mark.unit
def test_check_text_shows_what_the_binding_changed():
    stream = "bb0:\n  v_add_f32 v1, v2, v3\n"
    head = CellResult(kernel="k", case="c", target="gfx942", status="ok",
                      analysis=_analysis("amdgcn", stream + "  v_add_f32 v4, v5, v6\n"),
                      binding={"signature": {"x_ptr": "*bf16"}, "constexprs": {"BLOCK": 64}, "attrs": {}},
                      options={"num_warps": 8})
    base = {**_analysis("amdgcn", stream).to_record(),
            "binding": {"signature": {"x_ptr": "*fp16"}, "constexprs": {"BLOCK": 64}, "attrs": {}},
            "options": {"num_warps": 4}}
    v = CellVerdict(kernel="k", case="c", target="gfx942", verdict=CHANGED, head=head, delta=compute_delta(base, head),
                    base=Golden(path=Path("g.yaml"), data=base, stream_text=stream))
    assert v.delta.binding == [("signature.x_ptr", "*fp16", "*bf16"), ("options.num_warps", 4, 8)]
    buffer = StringIO()
    render_check_text(Console(file=buffer, width=200, no_color=True), _report([v]), counts=[])
    assert "binding signature.x_ptr: *fp16 -> *bf16" in buffer.getvalue()
    assert "binding options.num_warps: 4 -> 8" in buffer.getvalue()


# ---------------------------------------------------------------- a problem shared by several cells: once

@pytest.mark.unit
def test_cells_phrase_names_each_case_once_with_its_targets():
    assert cells_phrase(["k:c@gfx942"]) == "k:c@gfx942"
    assert cells_phrase(["k:c@gfx90a", "k:c@gfx942", "j:d@sm_90"]) == "k:c on 2 targets (gfx90a, gfx942); j:d@sm_90"
    assert grouped_by_message([("a", "m1"), ("b", "m2"), ("c", "m1")]) == [(["a", "c"], "m1"), (["b"], "m2")]
    # cases on the same targets together (one bad value in `defaults:`, every case on every target)
    assert cells_phrase(["k:a@gfx90a", "k:a@sm_90", "k:b@gfx90a", "k:b@sm_90", "j:d@sm_90"]) == \
        "k:a, k:b on 2 targets (gfx90a, sm_90); j:d@sm_90"
    assert cells_phrase(["k:a@gfx942", "k:b@gfx942"]) == "k:a, k:b on gfx942"


@pytest.mark.unit
def test_check_text_prints_a_shared_error_once_with_the_cells_it_concerns():
    message = "kernels/k.yaml: cases[0].args: the kernel has no parameter 'count'\n    more detail"
    targets = [f"gfx{n}" for n in (1100, 1151, 1200, 1201, 90, 942, 950)]
    verdicts = [CellVerdict(kernel="k", case="c", target=t, verdict=ERROR, message=message) for t in targets]
    verdicts.append(CellVerdict(kernel="k", case="d", target="gfx942", verdict=ERROR, message="another problem"))
    buffer = StringIO()
    render_check_text(Console(file=buffer, width=200, no_color=True), _report(verdicts), counts=[], quiet=True)
    text = buffer.getvalue()
    assert text.count("no parameter 'count'") == 1 and text.count("more detail") == 1
    assert f"error: k:c on 7 targets ({', '.join(targets)}): kernels/k.yaml: " in text
    assert "error: k:d@gfx942: another problem" in text


@pytest.mark.unit
def test_markdown_writes_a_shared_error_once_after_the_targets():
    message = "kernels/k.yaml: cases[0].args: the kernel has no parameter 'count'\nsecond line"
    targets = ["gfx1100", "gfx942", "sm_90"]
    verdicts = [CellVerdict(kernel="k", case="c", target=t, verdict=ERROR, message=message) for t in targets]
    verdicts.append(CellVerdict(kernel="k", case="d", target="gfx942", verdict=ERROR, message="its own problem"))
    md = render_markdown(_report(verdicts), counts=[], title="xisa check")
    assert md.count("no parameter 'count'") == 1 and md.count("second line") == 1
    assert "- k:c on 3 targets (gfx1100, gfx942, sm_90): kernels/k.yaml: cases[0].args: " in md
    assert md.count("- `k:c`: error, the problem below that several cells share") == 3     # each target's table
    assert "- `k:d`: its own problem" in md
