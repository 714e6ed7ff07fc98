"""The A/B judgement alone (`xisa.golden.ab`): side errors, per-target summaries, the first changed stage."""

from __future__ import annotations

import hashlib

import pytest

from xisa.analyze.model import Analysis
from xisa.compile.worker.result import CellResult
from xisa.golden.ab import Side, judge_ab, largest_resource_changes, target_summaries
from xisa.golden.report_json import ab_payload, report_text
from xisa.golden.store import GoldenSet, golden_paths, render_golden, write_golden

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)


def _result(case: str, *, stream: str = "v_add_f32 v0, v1, v2", vgprs: int = 8, ok: bool = True,
            target: str = "gfx942") -> CellResult:
    if not ok:
        return CellResult(kernel="k", case=case, target=target, status="error", error="boom")
    lines = stream.splitlines()
    histogram: dict[str, int] = {}
    for line in lines:
        histogram[line.split()[0]] = histogram.get(line.split()[0], 0) + 1
    analysis = Analysis(isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=len(lines),
                        blocks=1, histogram=histogram, base_histogram=dict(histogram), classes={},
                        resources={"vgprs": vgprs, "scratch_bytes": 0}, stream_text=stream)
    return CellResult(kernel="k", case=case, target=target, status="ok", analysis=analysis,
                      binding={"signature": {}, "constexprs": {}, "attrs": {}}, options={"num_warps": 4})


def _judge(tmp_path, a_results, b_results):
    """Side B against side A's compile, as `xisa ab` judges it: A's results as the goldens bless would write."""
    errors = {result.id: result.error for result in a_results if not result.ok}
    a_goldens = GoldenSet.of_results(a_results, {"gfx942": {"triton": "3.8.0"}, "gfx1100": {"triton": "3.8.0"}})
    sides = [Side("A", toolchain={"triton": "3.8.0"}), Side("B", python="/v/bin/python", toolchain={"triton": "3.9.0"})]
    return judge_ab(b_results, a_goldens=a_goldens, a_errors=errors, a_is_goldens=False,
                    selected_targets={"gfx942"}, kernel_filters=None, sides=sides)


def test_a_compiled_side_judged_in_memory_is_judged_as_its_goldens_written_and_read_back(tmp_path):
    """`GoldenSet.of_results` is what a folder of the goldens bless would write reads back as."""
    a = [_result("x"), _result("y", vgprs=4), _result("z", ok=False)]
    b = [_result("x", stream="v_add_f32 v0, v1, v2\nv_mov_b32 v3, 0", vgprs=16), _result("y"), _result("z")]
    folder = tmp_path / "golden"
    for result in a[:2]:
        write_golden(*golden_paths(folder, result.kernel, result.case, result.target),
                     *render_golden(result, toolchain={"triton": "3.8.0"}, stream_file=True))
    sides = [Side("A", toolchain={"triton": "3.8.0"}), Side("B", toolchain={"triton": "3.8.0"}, knobs={"K": "1"})]
    read = judge_ab(b, a_goldens=GoldenSet.for_results(folder, b, display_root=tmp_path), a_errors={"k:z@gfx942": "boom"},
                    a_is_goldens=False, selected_targets={"gfx942"}, kernel_filters=None, sides=sides)
    made = judge_ab(b, a_goldens=GoldenSet.of_results(a, {"gfx942": {"triton": "3.8.0"}}),
                    a_errors={"k:z@gfx942": "boom"}, a_is_goldens=False, selected_targets={"gfx942"},
                    kernel_filters=None, sides=sides)
    assert report_text(made) == report_text(read)
    assert [v.verdict for v in made.verdicts] == ["changed", "changed", "error"]


def test_a_cell_only_side_a_fails_is_an_error_not_new(tmp_path):
    report = _judge(tmp_path, [_result("x", ok=False), _result("y")], [_result("x"), _result("y")])
    verdicts = {v.case: v for v in report.verdicts}
    assert verdicts["x"].verdict == "error" and verdicts["x"].message == "side A failed: boom"
    assert verdicts["y"].verdict == "same" and verdicts["y"].golden_file == ""
    assert report.exit_code == 2 and report.problems == []      # another Triton on side B is no problem


def test_changes_are_counted_per_target_and_the_largest_listed_first(tmp_path):
    a = [_result("x"), _result("y"), _result("z", target="gfx1100")]
    b = [_result("x", stream="v_add_f32 v0, v1, v2\nv_mov_b32 v3, 0", vgprs=16), _result("y", vgprs=4),
         _result("z", target="gfx1100")]
    report = _judge(tmp_path, a, b)
    assert report.exit_code == 1
    summaries = {s.target: s for s in target_summaries(report)}
    assert summaries["gfx942"].counts == {"changed": 2} and summaries["gfx1100"].counts == {"same": 1}
    assert summaries["gfx942"].instructions == (2, 3)
    assert summaries["gfx942"].resources == {"vgprs": (1, 1, 4)}
    assert largest_resource_changes(report) == [("k:x@gfx942", "vgprs", 8, 16), ("k:y@gfx942", "vgprs", 8, 4)]
    assert ab_payload(report)["sides"]["b"] == {"label": "B", "kind": "python", "python": "/v/bin/python",
                                              "knobs": {}, "toolchain": {"triton": "3.9.0"}, "golden": None}


def test_first_changed_stage_is_the_earliest_stage_whose_fingerprint_differs(tmp_path):
    a, b = _result("x"), _result("x", stream="v_mov_b32 v0, 0")
    verdict = _judge(tmp_path / "none", [a], [b]).verdicts[0]
    assert verdict.verdict == "changed" and verdict.stages.first is None   # no stages recorded
    a.analysis.stages = {stage: digit * 64 for stage, digit in zip(("ttir", "ttgir", "llir", "amdgcn"), "1234")}
    b.analysis.stages = {stage: digit * 64 for stage, digit in zip(("ttir", "ttgir", "llir", "amdgcn"), "1298")}
    report = _judge(tmp_path / "both", [a], [b])
    assert report.verdicts[0].stages.first == "llir"
    assert ab_payload(report)["cells"][0]["first_changed_stage"] == "llir"
