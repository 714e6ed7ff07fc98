"""A cell result's cache record gives back what was stored: the per-instruction source locations included."""

from __future__ import annotations

import json

import pytest

from xisa.analyze.model import Analysis
from xisa.compile.worker.result import CellResult

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)


def _result(locs: list[str]) -> CellResult:
    analysis = Analysis(isa="amdgcn", sha256="0" * 64, instructions=len(locs), blocks=1, histogram={"v_add_f32": len(locs)},
                        base_histogram={"v_add_f32": len(locs)}, classes={"valu": len(locs)}, resources={},
                        stream_text="bb0:\n" + "  v_add_f32 v0, v1, v2\n" * len(locs))
    analysis.locs = list(locs)
    return CellResult(kernel="k", case="c", target="gfx942", status="ok", error=None, analysis=analysis,
                      binding={}, options={}, seconds=1.0)


def test_source_locations_survive_the_cache_in_order_repeats_and_gaps_included():
    locs = ["k.py:3", "k.py:3", "", "k.py:7", "k.py:3", "k.py:3", "k.py:3", "", ""]
    record = json.loads(json.dumps(_result(locs).to_cache()))
    assert CellResult.from_cache(record).analysis.locs == locs
    assert len(json.dumps(record["loc_runs"])) < len(json.dumps(locs))   # runs, not one entry per instruction


def test_a_stream_without_line_information_keeps_no_locations():
    assert CellResult.from_cache(json.loads(json.dumps(_result(["", ""]).to_cache()))).analysis.locs == []
