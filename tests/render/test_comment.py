"""The markdown report stays under GitHub's 65,536-character limit for a PR comment: a report of ~500 changed
cells keeps its top changes (outside the scope first, the largest instruction changes next), says how many cells
it leaves out and where the rest is; a report that fits is the full markdown, unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import xisa.cli
from xisa.analyze.model import Analysis
from xisa.compile.worker.result import CellResult
from xisa.golden.record import Golden
from xisa.golden.verdict import CHANGED, ERROR, SAME, CellVerdict, CheckReport, compute_delta
from xisa.render.comment import MARKDOWN_MAX_CHARS, MIN_CHARS, bounded_markdown
from xisa.render.review import render_markdown

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)

GITHUB_LIMIT = 65536


def _analysis(adds: int) -> Analysis:
    stream = "bb0:\n" + "".join(f"  v_add_f32 v{i}, v1, v2\n" for i in range(adds)) + "  s_endpgm\n"
    hist = {"v_add_f32": adds, "s_endpgm": 1}
    res = {"vgprs": 16 + adds, "agprs": 0, "sgprs": 10, "vgpr_spills": 0, "sgpr_spills": 0, "scratch_bytes": 0,
           "lds_bytes": 0, "occupancy": 16, "llvm_occupancy": 16}
    return Analysis(isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=adds + 1, blocks=1,
                    histogram=hist, base_histogram=dict(hist), classes={}, resources=res, stream_text=stream)


def _cell(kernel: str, case: str, target: str, before: int, after: int, *, in_scope: bool = False) -> CellVerdict:
    head = CellResult(kernel=kernel, case=case, target=target, status="ok", analysis=_analysis(after),
                      binding={"signature": {}, "constexprs": {}, "attrs": {}}, options={"num_warps": 4})
    base_analysis = _analysis(before)
    base = {**base_analysis.to_record(), "binding": {"signature": {}, "constexprs": {}, "attrs": {}},
            "options": {"num_warps": 4}}
    verdict = CHANGED if before != after else SAME
    return CellVerdict(kernel=kernel, case=case, target=target, verdict=verdict, head=head, in_scope=in_scope,
                       delta=compute_delta(base, head) if verdict == CHANGED else None,
                       base=Golden(path=Path(f"golden/{kernel}/{case}/{target}.yaml"), data=base,
                                   stream_text=base_analysis.stream_text),
                       golden_file=f"golden/{kernel}/{case}/{target}.yaml")


def _large_report() -> CheckReport:
    """520 changed cells (40 cases x 13 targets), 1 of them by far the largest change, 26 in scope, 1 error, and
    260 byte-identical cells."""
    targets = ["gfx1100", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx942", "gfx950",
               "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
    verdicts = []
    for case in range(60):
        for target in targets:
            if case >= 40:
                verdicts.append(_cell("scale_kernel_with_a_long_name", f"case_{case:03d}", target, 8, 8))
            else:
                after = 200 if (case, target) == (7, "sm_90") else 8 + case % 5 + 1
                verdicts.append(_cell("scale_kernel_with_a_long_name", f"case_{case:03d}", target, 8, after,
                                      in_scope=case in (0, 1)))
    verdicts.append(CellVerdict(kernel="broken", case="c", target="gfx942", verdict=ERROR, message="boom"))
    return CheckReport(verdicts=verdicts, toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=["*:x"])


def test_a_report_of_500_changed_cells_keeps_its_top_changes_under_the_limit():
    report = _large_report()
    full = render_markdown(report, counts=[], title="xisa: ISA against `main`")
    assert len(full) > GITHUB_LIMIT                                # what GitHub would refuse
    text = bounded_markdown(report, counts=[], title="xisa: ISA against `main`", full_report="the HTML report")
    assert len(text) <= MARKDOWN_MAX_CHARS < GITHUB_LIMIT
    assert text.startswith("### xisa: ISA against `main`") and "sm_90: 40 changed, 20 byte-identical each; gfx942: 1 error" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    ids = [row.split("`")[1] for row in rows]
    changed = [v for v in report.verdicts if v.verdict != SAME]
    assert 100 < len(rows) < len(changed)
    # outside the scope first, the error before the changes, the largest change next
    assert ids[0] == "broken:c@gfx942" and ids[1] == "scale_kernel_with_a_long_name:case_007@sm_90"
    assert "| 9 → 201 |" in rows[1]
    in_scope = [i for i, cid in enumerate(ids) if cid.split(":")[1].split("@")[0] in ("case_000", "case_001")]
    assert not in_scope        # the 26 in-scope changes come after the 494 outside it, which do not all fit
    assert len(set(ids)) == len(ids)
    footer = text.rstrip().splitlines()[-1]
    assert f"_{len(changed) - len(rows)} more cells that are not byte-identical and 260 byte-identical cells" in footer
    assert f"the whole report ({len(full):,} characters)" in footer and footer.endswith("in the HTML report._")
    assert f"#### Top {len(rows)} of {len(changed)} cells that are not byte-identical" in text


@pytest.mark.parametrize("limit", [MIN_CHARS, 5000, 20000])
def test_the_bound_holds_at_any_limit(limit):
    report = _large_report()
    accept = [f"xisa bless --arch gfx{n} --kernel scale_kernel_with_a_long_name:case_{n:03d}" for n in range(400)]
    text = bounded_markdown(report, counts=[], title="xisa check", accept=accept, max_chars=limit)
    assert len(text) <= limit and "more cells that are not byte-identical" in text
    assert "more commands (xisa check prints them all)" in text


def test_a_report_that_fits_is_the_full_markdown():
    report = CheckReport(verdicts=[_cell("k", "a", "gfx942", 8, 9), _cell("k", "b", "gfx942", 8, 8)],
                         toolchain={"triton": "3.8.0"}, golden_toolchains={}, scopes=[])
    full = render_markdown(report, counts=[], title="xisa check")
    assert bounded_markdown(report, counts=[], title="xisa check") == full
    with pytest.raises(ValueError):
        bounded_markdown(report, counts=[], title="xisa check", max_chars=MIN_CHARS - 1)


def test_max_chars_below_the_minimum_is_refused_by_the_cli(capsys):
    with pytest.raises(SystemExit) as info:
        xisa.cli.main(["check", "--format", "markdown", "--max-chars", str(MIN_CHARS - 1)])
    assert info.value.code == 2 and "--max-chars" in capsys.readouterr().err
