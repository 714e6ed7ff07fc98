"""`check` calls a cell the same exactly when `bless` would leave its golden as it is (issue 22, class 3).

A golden records the cell's binding, options, code-object fingerprint and sections, launch metadata, counts and
resources; whichever one differs, bless rewrites the golden, so check must say `changed`, and where none
differs (only a side table: stage fingerprints, source lines), both leave the cell alone.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from xisa.analyze.model import Analysis
from xisa.compile.result import CellResult
from xisa.golden.bless import bless
from xisa.golden.store import GoldenSet
from xisa.golden.verdict import build_report

TOOLCHAIN = {"triton": "3.8.0"}


def _result() -> CellResult:
    stream = "bb0:\n  s_endpgm\n"
    analysis = Analysis(
        isa="amdgcn", sha256=hashlib.sha256(stream.encode()).hexdigest(), instructions=1, blocks=1, histogram={"s_endpgm": 1},
        base_histogram={"s_endpgm": 1}, classes={"program": 1}, resources={"vgprs": 4, "lds_bytes": 0},
        stream_text=stream, code_sha256="c" * 64,
        code_sections={"(header)": "1" * 16, ".text": "2" * 16, ".note": "3" * 16},
        metadata={"shared": 0, "global_scratch_size": 0, "name": "k_kernel"},
        stages={"ttir": "e" * 64}, lines=[{"loc": "k.py:3", "text": "x", "count": 1, "histogram": {"s_endpgm": 1}}])
    return CellResult(kernel="k", case="c", target="gfx942", status="ok", analysis=analysis,
                      binding={"signature": {"x_ptr": "*fp32"}, "constexprs": {}, "attrs": {}},
                      options={"num_warps": 4, "debug": False})


def _changed(result: CellResult, **analysis_fields) -> CellResult:
    changed = copy.deepcopy(result)
    changed.analysis = replace(changed.analysis, **analysis_fields)
    return changed


def _with(result: CellResult, **fields) -> CellResult:
    changed = copy.deepcopy(result)
    for name, value in fields.items():
        setattr(changed, name, value)
    return changed


BASE = _result()
MUTATIONS = {
    "options.num_warps": _with(BASE, options={"num_warps": 8, "debug": False}),
    "options.debug": _with(BASE, options={"num_warps": 4, "debug": True}),
    "binding.signature": _with(BASE, binding={"signature": {"x_ptr": "*fp16"}, "constexprs": {}, "attrs": {}}),
    "binding.attrs": _with(BASE, binding={"signature": {"x_ptr": "*fp32"}, "constexprs": {},
                                          "attrs": {"x_ptr": ["tt.divisibility=16"]}}),
    "code_sha256 alone": _changed(BASE, code_sha256="d" * 64),
    "a code section": _changed(BASE, code_sha256="d" * 64,
                               code_sections={"(header)": "1" * 16, ".text": "2" * 16, ".note": "4" * 16}),
    "launch metadata (dynamic shared memory)": _changed(BASE, metadata={"shared": 1024, "global_scratch_size": 0,
                                                                        "name": "k_kernel"}),
    "a resource not compared before (wavefront_size)": _changed(BASE, resources={"vgprs": 4, "lds_bytes": 0,
                                                                                 "wavefront_size": 64}),
}


def _judge(tmp_path: Path, head: CellResult):
    golden = tmp_path / "golden"
    common = dict(selected_targets={"gfx942"}, kernel_filters=None)
    bless([BASE], golden_dir=golden, display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN}, stream_files=True,
          **common)
    goldens = GoldenSet.for_results(golden, [head], display_root=tmp_path)
    report = build_report([head], {}, goldens=goldens, scopes=[], toolchain=TOOLCHAIN, **common)
    outcome = bless([head], golden_dir=golden, display_root=tmp_path, toolchains={"gfx942": TOOLCHAIN},
                    stream_files=True, **common)
    return report.verdicts[0], outcome


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_whatever_bless_would_rewrite_check_calls_changed(tmp_path, monkeypatch, name):
    monkeypatch.delenv("CI", raising=False)
    verdict, outcome = _judge(tmp_path, MUTATIONS[name])
    assert outcome.written, name            # bless rewrote the golden ...
    assert verdict.verdict == "changed", (name, verdict.message)   # ... so check may not call it the same
    assert verdict.delta is not None and verdict.delta.fields


def test_a_side_table_alone_changes_neither_verdict_nor_golden(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    moved = _changed(BASE, stages={"ttir": "f" * 64},
                     lines=[{"loc": "k.py:9", "text": "x", "count": 1, "histogram": {"s_endpgm": 1}}])
    verdict, outcome = _judge(tmp_path, moved)
    assert verdict.verdict == "same" and not outcome.written and outcome.unchanged


def test_an_unchanged_stream_with_another_code_object_names_the_section(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    verdict, _ = _judge(tmp_path, MUTATIONS["a code section"])
    assert "the printed stream is the same, the code bytes are not (.note)" in verdict.message
    options_only, _ = _judge(tmp_path / "o", MUTATIONS["options.num_warps"])
    assert "options.num_warps: 4 -> 8" in options_only.message
