"""What each target resolved (issue 35, item 5): compile lists it all, check what differs between targets."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from xisa.compile.worker.result import CellResult
from xisa.golden.verdict import SAME, CellVerdict, CheckReport
from xisa.render.resolved import resolution_lines
from xisa.render.review import render_check_text

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)


def _result(target: str, resolved: dict) -> CellResult:
    return CellResult(kernel="moe", case="decode", target=target, status="ok", resolved=resolved)


RESULTS = [_result("gfx942", {"config": "config 2 (BLOCK=64)", "platform": {"multiprocessor_count": 304, "backend": "hip"}}),
           _result("gfx942-mi325x", {"config": "config 2 (BLOCK=64)", "platform": {"multiprocessor_count": 304,
                                                                                  "backend": "hip"}}),
           _result("gfx942-mi308x", {"config": "config 5 (BLOCK=32)", "platform": {"multiprocessor_count": 80,
                                                                                  "backend": "hip"}}),
           _result("gfx1100", {})]


def test_every_resolved_value_is_listed_with_the_targets_that_bound_it():
    assert resolution_lines(RESULTS) == [
        "moe:decode  config: config 2 (BLOCK=64) (gfx942, gfx942-mi325x) · config 5 (BLOCK=32) (gfx942-mi308x)",
        "moe:decode  backend: hip (gfx942, gfx942-mi308x, gfx942-mi325x)",
        "moe:decode  multiprocessor_count: 304 (gfx942, gfx942-mi325x) · 80 (gfx942-mi308x)"]


def test_check_lists_only_what_differs_between_targets():
    report = CheckReport(verdicts=[CellVerdict(kernel=r.kernel, case=r.case, target=r.target, verdict=SAME, head=r)
                                   for r in RESULTS], toolchain={}, golden_toolchains={}, scopes=[])
    out = StringIO()
    render_check_text(Console(file=out, width=200, no_color=True), report, counts=[])
    text = out.getvalue()
    assert "resolved per target (where targets differ):" in text
    assert "moe:decode  multiprocessor_count: 304 (gfx942, gfx942-mi325x) · 80 (gfx942-mi308x)" in text
    assert "backend: hip" not in text
